"""The local engine: the private records embedded in this process (out of core on an unlinked
temporary file when large, `dpsynth.data.scratch`) and searched here."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpsynth.backends.base import Embedder
from dpsynth.backends.config import BackendsConfig
from dpsynth.data import PrivateDataset
from dpsynth.private.engine.nearest import Voters, private_voters
from dpsynth.private.engine.teachers import Teachers, train_teachers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalEngine:
    embedder: Embedder
    allow_remote: bool = False
    """`backends.embedder.allow_remote_on_private`: the user's explicit opt-in."""
    search: str = "exact"
    """`backends.executor.search`: how the voters find each record's nearest candidate."""

    @classmethod
    def build(cls, embedder: Embedder, backends: BackendsConfig,
              base_dir: Path | None) -> LocalEngine:
        return cls(embedder, backends.embedder.allow_remote_on_private,
                   backends.executor.search)

    def embed(self, private: PrivateDataset) -> np.ndarray:
        """Embed private texts: never cached, a remote embedder only with the opt-in."""
        log.info("embedding the private records (once per run)")
        return private.embed(self.embedder, allow_remote=self.allow_remote)

    def voters(self, private: PrivateDataset) -> Voters:
        return private_voters(private, self.embed(private), self.search)

    def teachers(self, private: PrivateDataset, voters: Voters, negatives: np.ndarray,
                 n_teachers: int, key: bytes, seed: int, labelled: bool) -> Teachers:
        return Teachers(train_teachers(private, self.embed, negatives, n_teachers, key, seed,
                                       labelled, voters.embeddings))
