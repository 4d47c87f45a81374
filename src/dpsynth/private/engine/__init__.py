"""Where the private embeddings live and are searched, chosen by `backends.executor.name`:
here (`local`), or on a Ray cluster's workers (`ray`). An engine answers two questions, with
what only a DP release may then read: the private records as nearest-neighbour voters, and
PATE teachers fit on their partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from dpsynth.backends.base import Embedder
from dpsynth.backends.config import BackendsConfig
from dpsynth.data import PrivateDataset
from dpsynth.private.engine.local import LocalEngine
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.engine.ray import RayEngine, ShardedTeachers, ShardedVoters
from dpsynth.private.engine.teachers import Teachers


class Engine(Protocol):
    def voters(self, private: PrivateDataset) -> Voters | ShardedVoters:
        """The private records as voters, embedded once (the caller keeps them)."""

    def teachers(self, private: PrivateDataset, voters: Voters | ShardedVoters,
                 negatives: np.ndarray, n_teachers: int, key: bytes, seed: int,
                 labelled: bool) -> Teachers | ShardedTeachers:
        """PATE teachers of the private units against the public `negatives`, fit from the
        embeddings of the run's `voters` (this engine's, taken before the first release:
        nothing is embedded again); the caller closes them once it has asked its queries."""


ENGINES: dict[str, type[LocalEngine] | type[RayEngine]] = {"local": LocalEngine,
                                                           "ray": RayEngine}


def build_engine(embedder: Embedder, backends: BackendsConfig,
                 base_dir: Path | None) -> Engine:
    """The engine `backends.executor.name` names."""
    return ENGINES[backends.executor.name].build(embedder, backends, base_dir)
