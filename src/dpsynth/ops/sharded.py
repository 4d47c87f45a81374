"""Private voters sharded over Ray actors (`backends.executor: {name: ray}`).

Each actor takes one block of the private records, embeds it once and keeps the embeddings in
its memory for the run, so no iteration embeds again and the driver never holds them. A
record's block follows from a digest of its own text (`shard_blocks`), never from its place in
the file: a node may embed and search with other low-order bits than another (another CPU,
another thread count), so a record's vote may depend on its shard, and a record joining must
move no other record to another shard, or their votes could move with it. A vote sends each
actor the public candidates; the actor answers with its block's un-noised integer histogram,
and the driver sums the blocks' histograms into the very histogram the local engine counts
(on a cluster of like nodes), before the one noisy release. Subsampled votes draw their
Poisson sample on the driver, over all votes in record order as locally, and send each actor
the draws of its records' votes: same noise state, same answer.

Nothing private enters Ray's object store, which may spill to disk: texts, labels and samples
go to an actor, and histograms come back, in messages of at most INLINE_BYTES, which Ray
passes inside the task's RPC rather than as stored objects (its limit is 100 KiB). Only the
public candidates are `ray.put`. Actor errors carry their type, never a message that could
quote a record, so no private text reaches a Ray log either.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.backends.config import EmbedderConfig, ExecutorConfig
from dpsynth.data import Access, PrivateDataset
from dpsynth.data.bounding import record_rank
from dpsynth.errors import DpsynthError
from dpsynth.ops.nearest import Voters

log = logging.getLogger(__name__)

INLINE_BYTES = 64 << 10
"""The largest message to or from an actor: under Ray's inline limit, with room for framing."""


class ShardError(DpsynthError):
    """A shard's actor failed; the message names the exception type only."""


def _quiet(method: Callable[..., Any]) -> Callable[..., Any]:
    """An actor method whose exceptions keep their type and lose their message."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            raise ShardError(f"{type(exc).__name__} in a private shard's "
                             f"{method.__name__}") from None

    return wrapper


class Shard:
    """One block of private records on a Ray worker: built from public config only, fed its
    records in inline pieces, then asked for votes."""

    def __init__(self, embedder: EmbedderConfig, base_dir: Path | None,
                 allow_remote: bool, search: str) -> None:
        self._embedder_cfg = (embedder, base_dir)
        self._allow_remote = allow_remote
        self._search = search
        self._inbox: dict[str, list[np.ndarray]] = {}
        self._voters: Voters | None = None
        self._votes = np.zeros(0, dtype=np.int64)

    @_quiet
    def put(self, name: str, piece: np.ndarray) -> None:
        self._inbox.setdefault(name, []).append(piece)

    @_quiet
    def embed(self) -> int:
        """Embed the texts received (as `PrivateDataset.embed` does locally) and drop them."""
        from dpsynth.backends import build_embedder

        ends = self._take("ends")
        blob = self._take("texts").tobytes()
        texts = [blob[a:b].decode("utf-8") for a, b in zip(np.r_[0, ends[:-1]], ends,
                                                           strict=True)]
        labels = self._take("labels") if "labels" in self._inbox else None
        embeddings = PrivateDataset(texts).embed(build_embedder(*self._embedder_cfg),
                                                 allow_remote=self._allow_remote)
        self._voters = Voters(embeddings, labels, self._search)
        return len(texts)

    @_quiet
    def vote(self, candidates: np.ndarray, candidate_groups: np.ndarray | None,
             n_labels: int | None = None) -> int:
        """Find each record's candidate and keep the votes; return how many there are."""
        assert self._voters is not None
        self._votes = self._voters.votes(candidates, candidate_groups, n_labels)
        return len(self._votes)

    @_quiet
    def histogram(self, n_bins: int, parts: int) -> Any:
        """The kept votes' counts (all votes without a `keep` sample), in `parts` slices."""
        votes = self._votes
        if "keep" in self._inbox:
            votes = votes[np.unpackbits(self._take("keep"), count=len(votes)).astype(bool)]
        counts = np.array_split(np.bincount(votes, minlength=n_bins), parts)
        return counts[0] if parts == 1 else tuple(counts)

    @_quiet
    def row(self, index: int) -> np.ndarray:
        assert self._voters is not None
        return np.array(self._voters.embeddings[index])

    def _take(self, name: str) -> np.ndarray:
        return np.concatenate(self._inbox.pop(name))


class ShardedVoters:
    """The driver's handle on the shards; answers what `Voters` answers. It keeps which
    records each shard holds and their label codes (the private set the driver holds
    anyway), to hand each shard the sample of its own votes."""

    def __init__(self, ray: Any, actors: list[Any], blocks: list[np.ndarray],
                 labels: np.ndarray | None):
        self._ray, self._actors, self._blocks, self._labels = ray, actors, blocks, labels
        self.has_labels = labels is not None
        self.embeddings = _Rows(self)
        """Rows on demand, for the few that the τ estimate pairs up."""

    def __repr__(self) -> str:
        return f"ShardedVoters(shards={len(self._actors)})"

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("private voters must not reach a checkpoint, cache or worker")

    def votes(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
              n_labels: int | None = None) -> ShardVotes:
        ref = self._ray.put(np.ascontiguousarray(candidates))  # public: may be stored
        sizes = self._ray.get([a.vote.remote(ref, candidate_groups, n_labels)
                               for a in self._actors])
        voted = np.ones(sum(len(b) for b in self._blocks), dtype=bool)
        if candidate_groups is not None and self._labels is not None:
            voted = np.isin(self._labels, candidate_groups)  # `Voters.votes`: own group only
        place = np.cumsum(voted) - 1  # a record's vote's place among all votes, in order
        places = [place[block[voted[block]]] for block in self._blocks]
        if [len(p) for p in places] != sizes:
            raise DpsynthError("the shards cast other votes than their records hold")
        return ShardVotes(self, places)

    def counts(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
               n_labels: int | None = None) -> np.ndarray:
        return self.votes(candidates, candidate_groups, n_labels).histogram(
            None, len(candidates) * (n_labels or 1))

    def close(self) -> None:
        """Stop the actors: their embeddings go with them."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []


class ShardVotes:
    """The latest vote's votes, held by the shards (a `privacy.mechanisms.VoteTable`)."""

    def __init__(self, voters: ShardedVoters, places: list[np.ndarray]) -> None:
        self._voters, self._places = voters, places
        """Per shard, where its votes stand among all votes in record order."""

    def __len__(self) -> int:
        return sum(len(p) for p in self._places)

    def histogram(self, keep: np.ndarray | None, n_bins: int) -> np.ndarray:
        ray, actors = self._voters._ray, self._voters._actors
        parts = max(1, -(-n_bins * 8 // INLINE_BYTES))
        answers = []
        for actor, places in zip(actors, self._places, strict=True):
            if keep is not None:
                _send(actor, "keep", np.packbits(keep[places]))
            answers.append(actor.histogram.options(num_returns=parts).remote(n_bins, parts))
        blocks = [np.concatenate(ray.get(a)) if parts > 1 else ray.get(a) for a in answers]
        return np.sum(blocks, axis=0, dtype=np.int64)


class _Rows:
    """`embeddings[i]` of sharded voters: one row, fetched from the shard that holds it."""

    def __init__(self, voters: ShardedVoters) -> None:
        self._voters = voters

    def __getitem__(self, index: int) -> np.ndarray:
        voters = self._voters
        for actor, block in zip(voters._actors, voters._blocks, strict=True):
            offset = int(np.searchsorted(block, index))
            if offset < len(block) and block[offset] == index:
                return voters._ray.get(actor.row.remote(offset))
        raise IndexError(f"record {index} is in no shard")


def shard_voters(private: PrivateDataset, embedder: EmbedderConfig, base_dir: Path | None,
                 executor: ExecutorConfig, allow_remote: bool) -> ShardedVoters:
    """Start one actor per block of the private records (on the connected Ray cluster), send
    each its block inline, and have all of them embed at once."""
    from dpsynth.backends.ray_cluster import import_ray

    if private.n_records < executor.workers:
        raise DpsynthError(f"backends.executor.workers: {executor.workers} shards for "
                           f"{private.n_records} records; use fewer workers")
    ray = import_ray()
    wanted, cpus = executor.workers * executor.cpus_per_worker, ray.cluster_resources()
    if cpus.get("CPU", 0.0) < wanted:  # the actors would wait for CPUs forever
        raise DpsynthError(f"backends.executor: {executor.workers} workers of "
                           f"{executor.cpus_per_worker:g} CPU need {wanted:g} CPUs; the "
                           f"cluster has {cpus.get('CPU', 0.0):g}")
    if ray.available_resources().get("CPU", 0.0) < wanted:
        log.warning("ray: waiting for %g free CPUs for the private shards", wanted)
    actor_class = ray.remote(num_cpus=executor.cpus_per_worker, max_restarts=0)(Shard)
    texts = private.texts(Access.LOCAL_EMBEDDING)
    labels = private.label_codes(Access.LEDGERED_OP) if private.has_labels else None
    blocks = [block for block in shard_blocks(texts, executor.workers) if len(block)]
    actors = []
    for block in blocks:
        actor = actor_class.remote(embedder.model_copy(update={"cache": None}), base_dir,
                                   allow_remote, executor.search)
        encoded = [texts[i].encode("utf-8") for i in block]
        _send(actor, "texts", np.frombuffer(b"".join(encoded), dtype=np.uint8))
        _send(actor, "ends", np.cumsum([len(t) for t in encoded], dtype=np.int64))
        if labels is not None:
            _send(actor, "labels", labels[block])
        actors.append(actor)
    if ray.get([actor.embed.remote() for actor in actors]) != [len(b) for b in blocks]:
        raise DpsynthError("the shards embedded other records than they were sent")
    return ShardedVoters(ray, actors, blocks, labels)


def shard_blocks(texts: list[str], workers: int) -> list[np.ndarray]:
    """The records (indices, in order) of each of `workers` shards: a record's shard is a
    digest of its own text, so a record joining or leaving moves no other record between
    shards (tests/ops/test_shard_assignment.py); copies of a text share a shard."""
    shard = np.fromiter((record_rank(t) % workers for t in texts), dtype=np.int64,
                        count=len(texts))
    return [np.flatnonzero(shard == s) for s in range(workers)]


def _send(actor: Any, name: str, array: np.ndarray) -> None:
    """Send a 1-D array to an actor in pieces Ray passes inline (calls run in order)."""
    for piece in _pieces(array):
        actor.put.remote(name, piece)


def _pieces(array: np.ndarray) -> Iterator[np.ndarray]:
    step = max(1, INLINE_BYTES // array.itemsize)
    for start in range(0, max(len(array), 1), step):
        yield array[start : start + step]
