"""The Ray engine: private voters and PATE teachers sharded over Ray actors
(`backends.executor: {name: ray}`).

Each actor takes one block of the private records (one actor per `workers`, its block empty
or not), embeds it once and keeps the embeddings in its memory for the run, so no iteration
embeds again and the driver holds them only in passing (dpga's τ pairs, kd_tutor's relay). A
record's block follows from a digest of its own text (`shard_blocks`), never from its place in
the file: a node may embed and search with other low-order bits than another (another CPU,
another thread count), so a record's vote may depend on its shard, and a record joining must
move no other record to another shard, or their votes could move with it. A vote sends each
actor the public candidates; the actor answers with its block's un-noised integer histogram,
and the driver sums the blocks' histograms into the very histogram the local engine counts
(on a cluster of like nodes), before the one noisy release. Subsampled votes draw their
Poisson sample on the driver, over all votes in record order as locally, and send each actor
the draws of its records' votes: same noise state, same answer. Where a release needs each
record's nearest candidate itself (ctcl's topic of each record), the shards send their votes
back, small integers, and the driver puts them in record order (`ShardedVoters.nearest`).

PATE teachers (kd_tutor) are sharded by teacher instead (`ShardedVoters.teachers`): the
voters' actors become the teachers'. A unit's teacher is a keyed hash of its own texts, and
teacher m's rows go whole to actor m mod `workers`, relayed by the driver, in inline pieces,
from the actors that embedded them, so a unit joining moves no other unit between actors and
no teacher to another actor, no record is embedded again after the first release (the
embedding is what one record's text can fail), and each teacher is fit on one worker from the
same rows, in the same order, as locally. An actor fits its teachers on the public
negatives, then answers each query batch with its teachers' un-noised vote counts; the driver
sums them before the one noisy release per batch.

Nothing private enters Ray's object store, which may spill to disk: texts, labels, classes,
samples and teachers' rows go to an actor, and histograms, votes, vote counts and rows come
back, in messages of at most INLINE_BYTES, which Ray passes inside the task's RPC rather
than as stored objects (its limit is 100 KiB). Only public arrays (candidates, negatives,
queries) are `ray.put`. Actor errors carry their type, never a message that could quote a
record, so no private text reaches a Ray log either.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.backends.base import Embedder
from dpsynth.backends.config import BackendsConfig, EmbedderConfig, ExecutorConfig
from dpsynth.data import Access, PrivateDataset
from dpsynth.data.bounding import record_rank
from dpsynth.errors import DpsynthError
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.engine.teachers import fit_teachers, teacher_partitions, teacher_votes

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
    records in inline pieces, then asked for votes, or to fit teachers and ask them."""

    def __init__(self, embedder: EmbedderConfig, base_dir: Path | None,
                 allow_remote: bool, search: str) -> None:
        self._embedder_cfg = (embedder, base_dir)
        self._allow_remote = allow_remote
        self._search = search
        self._inbox: dict[str, list[np.ndarray]] = {}
        self._voters: Voters | None = None
        self._votes = np.zeros(0, dtype=np.int64)
        self._teachers: list = []
        self._teacher_ids: list[int] = []

    @_quiet
    def put(self, name: str, piece: np.ndarray) -> None:
        self._inbox.setdefault(name, []).append(piece)

    @_quiet
    def embed(self) -> tuple[int, int]:
        """Embed the texts received (as `PrivateDataset.embed` does locally) and drop them;
        answer the embeddings' shape."""
        from dpsynth.backends import build_embedder

        ends = self._take("ends")
        blob = self._take("texts").tobytes()
        texts = [blob[a:b].decode("utf-8") for a, b in zip(np.r_[0, ends][:-1], ends,
                                                           strict=True)]
        labels = self._take("labels") if "labels" in self._inbox else None
        if not texts:  # an empty block: it votes nothing, and may fit teachers later
            return 0, 0
        embeddings = PrivateDataset(texts).embed(build_embedder(*self._embedder_cfg),
                                                 allow_remote=self._allow_remote)
        self._voters = Voters(embeddings, labels, self._search)
        return embeddings.shape

    @_quiet
    def vote(self, candidates: np.ndarray, candidate_groups: np.ndarray | None,
             n_labels: int | None = None) -> int:
        """Find each record's candidate and keep the votes; return how many there are."""
        self._votes = (np.zeros(0, dtype=np.int64) if self._voters is None else
                       self._voters.votes(candidates, candidate_groups, n_labels))
        return len(self._votes)

    @_quiet
    def histogram(self, n_bins: int, parts: int) -> Any:
        """The kept votes' counts (all votes without a `keep` sample), in `parts` slices."""
        votes = self._votes
        if "keep" in self._inbox:
            votes = votes[np.unpackbits(self._take("keep"), count=len(votes)).astype(bool)]
        return _split(np.bincount(votes, minlength=n_bins), parts)

    @_quiet
    def kept(self, parts: int) -> Any:
        """The kept votes themselves, in `parts` slices."""
        return _split(self._votes, parts)

    @_quiet
    def rows(self, parts: int) -> Any:
        """The embeddings of this block's records at the offsets received, flat, in `parts`."""
        assert self._voters is not None
        return _split(np.ravel(self._voters.embeddings[self._take("offsets")]), parts)

    @_quiet
    def drop(self) -> None:
        """Free the voters' embeddings once their rows are relayed: the teachers' rows come
        in while others are still relayed."""
        self._voters = None

    @_quiet
    def fit(self, negatives: np.ndarray, teachers: list[int], seed: int, width: int) -> int:
        """Fit `teachers` (`pate.fit_teachers`, as locally) on the rows received for them,
        put in record order; the queries need the teachers only."""
        if "records" in self._inbox:
            order = np.argsort(self._take("records"), kind="stable")
            embeddings = self._take("embeddings").reshape(-1, width)[order]
            parts, classes = self._take("teachers")[order], self._take("classes")[order]
        else:  # its teachers' partitions are empty: they vote public, as locally
            embeddings = np.zeros((0, width), dtype=negatives.dtype)
            parts = classes = np.zeros(0, dtype=np.int64)
        self._teachers = fit_teachers(embeddings, parts, classes, negatives, teachers, seed)
        self._teacher_ids = teachers
        return len(self._teachers)

    @_quiet
    def teach(self, queries: np.ndarray, n_classes: int, soft_key: bytes | None,
              parts: int) -> Any:
        """This shard's teachers' un-noised votes per query and class, flat, in `parts`
        (soft ones drawn by their global ids, as locally)."""
        return _split(teacher_votes(self._teachers, queries, n_classes, soft_key,
                                    self._teacher_ids).ravel(), parts)

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
                 labels: np.ndarray | None, width: int):
        self._ray, self._actors, self._blocks, self._labels = ray, actors, blocks, labels
        self._width = width
        """The embeddings' dimension."""
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

    def nearest(self, candidates: np.ndarray) -> np.ndarray:
        """Each record's nearest candidate, in record order, as `Voters.nearest`."""
        return self.votes(candidates).gathered()

    def counts(self, candidates: np.ndarray, candidate_groups: np.ndarray | None = None,
               n_labels: int | None = None) -> np.ndarray:
        return self.votes(candidates, candidate_groups, n_labels).histogram(
            None, len(candidates) * (n_labels or 1))

    def teachers(self, rows: np.ndarray, parts: np.ndarray, classes: np.ndarray,
                 negatives: np.ndarray, n_teachers: int, seed: int) -> ShardedTeachers:
        """The actors become `n_teachers` PATE teachers: teacher m learns the records `rows`
        with `parts` == m (as `classes`) against the public `negatives`, on actor m mod
        `workers` (one actor per block, so where a teacher is fit follows from the config),
        from the embeddings the actors hold; these voters then hold nothing."""
        ray, actors, self._actors = self._ray, self._actors, []
        teacher_of = np.full(sum(len(b) for b in self._blocks), -1, dtype=np.int64)
        class_of = np.zeros(len(teacher_of), dtype=np.int64)
        teacher_of[rows], class_of[rows] = parts, classes
        try:
            for source, block in zip(actors, self._blocks, strict=True):
                home = np.where(teacher_of[block] >= 0, teacher_of[block] % len(actors), -1)
                for target, actor in enumerate(actors):
                    offsets = np.flatnonzero(home == target)
                    if len(offsets):
                        _send(source, "offsets", offsets)
                        flat = _receive(ray, _ask(source.rows,
                                                  _parts(len(offsets) * self._width)))
                        records = block[offsets]
                        for name, values in (("embeddings", flat), ("records", records),
                                             ("teachers", teacher_of[records]),
                                             ("classes", class_of[records])):
                            _send(actor, name, values)
                source.drop.remote()
            ref = ray.put(np.ascontiguousarray(negatives))  # public: may be stored
            mine = [list(range(a, n_teachers, len(actors))) for a in range(len(actors))]
            fitted = ray.get([actor.fit.remote(ref, ids, seed, self._width)
                              for actor, ids in zip(actors, mine, strict=True)])
            if fitted != [len(ids) for ids in mine]:
                raise DpsynthError("the shards fit other teachers than they were asked for")
        except BaseException:
            _stop(ray, actors)
            raise
        return ShardedTeachers(ray, actors, n_teachers)

    def close(self) -> None:
        """Stop the actors: their embeddings go with them."""
        _stop(self._ray, self._actors)
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
        answers = []
        for actor, places in zip(actors, self._places, strict=True):
            if keep is not None:
                _send(actor, "keep", np.packbits(keep[places]))
            answers.append(_ask(actor.histogram, _parts(n_bins), n_bins))
        return np.sum([_receive(ray, a) for a in answers], axis=0, dtype=np.int64)

    def gathered(self) -> np.ndarray:
        """The votes themselves, in the order of all votes (record order, where all vote)."""
        ray, actors = self._voters._ray, self._voters._actors
        answers = [_ask(actor.kept, _parts(len(places)))
                   for actor, places in zip(actors, self._places, strict=True)]
        out = np.empty(len(self), dtype=np.int64)
        for places, answer in zip(self._places, answers, strict=True):
            out[places] = _receive(ray, answer)
        return out


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


class ShardedTeachers:
    """The driver's handle on teachers fit by the shards (`ShardedVoters.teachers`); answers
    what `pate.Teachers` answers."""

    def __init__(self, ray: Any, actors: list[Any], n_teachers: int) -> None:
        self._ray, self._actors, self._n_teachers = ray, actors, n_teachers

    def __len__(self) -> int:
        return self._n_teachers

    def __repr__(self) -> str:
        return f"ShardedTeachers(teachers={self._n_teachers}, shards={len(self._actors)})"

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("teachers of private records must not reach a checkpoint, cache or "
                        "worker")

    def votes(self, queries: np.ndarray, n_classes: int = 2,
              soft_key: bytes | None = None) -> np.ndarray:
        """Votes per query and class (`teachers.teacher_votes`): the sum of the shards'
        un-noised ones."""
        ref = self._ray.put(np.ascontiguousarray(queries))  # public: may be stored
        cells = len(queries) * n_classes
        answers = [_ask(actor.teach, _parts(cells), ref, n_classes, soft_key)
                   for actor in self._actors]
        counts = np.zeros(cells, dtype=np.int64)
        for answer in answers:
            counts += _receive(self._ray, answer)
        return counts.reshape(len(queries), n_classes)

    def close(self) -> None:
        """Stop the actors: the teachers and what they learnt go with them."""
        _stop(self._ray, self._actors)
        self._actors = []


@dataclass(frozen=True)
class RayEngine:
    """Where a run's private records are embedded and used with `backends.executor: ray`:
    public config only, handed to each actor to build its embedder."""

    embedder: EmbedderConfig
    base_dir: Path | None
    executor: ExecutorConfig
    allow_remote: bool

    @classmethod
    def build(cls, embedder: Embedder, backends: BackendsConfig,
              base_dir: Path | None) -> RayEngine:
        """From the run's config: each actor builds its own embedder from it."""
        return cls(backends.embedder, base_dir, backends.executor,
                   backends.embedder.allow_remote_on_private)

    def voters(self, private: PrivateDataset) -> ShardedVoters:
        """One actor per block of the private records (blocks by digest, `shard_blocks`),
        each holding its block's embeddings for votes."""
        if private.n_units < self.executor.workers:  # N, public (the records count is not)
            raise DpsynthError(f"backends.executor.workers: {self.executor.workers} shards "
                               f"for N = {private.n_units} privacy units; use fewer workers")
        texts = private.texts(Access.LOCAL_EMBEDDING)
        labels = private.label_codes(Access.LEDGERED_OP) if private.has_labels else None
        blocks = shard_blocks(texts, self.executor.workers)
        ray, actors, width = self._start(texts, blocks,
                                         {} if labels is None else {"labels": labels})
        return ShardedVoters(ray, actors, blocks, labels, width)

    def teachers(self, private: PrivateDataset, voters: ShardedVoters, negatives: np.ndarray,
                 n_teachers: int, key: bytes, seed: int,
                 labelled: bool = False) -> ShardedTeachers:
        """`pate.train_teachers` on the cluster: the `voters`' actors become the teachers,
        fit from the embeddings they took before the first release."""
        keep, parts, classes = teacher_partitions(private, n_teachers, key, labelled)
        return voters.teachers(keep, parts, classes, negatives, n_teachers, seed)

    def _start(self, texts: list[str], blocks: list[np.ndarray],
               per_record: dict[str, np.ndarray]) -> tuple[Any, list[Any], int]:
        """Start one actor per block (on the connected Ray cluster), send each its records'
        texts and `per_record` arrays inline, and have all of them embed at once; answer
        the embeddings' dimension too, the same on every actor with records (checked here,
        before any release reads them)."""
        from dpsynth.backends.ray_cluster import import_ray

        executor = self.executor
        ray = import_ray()
        wanted, cpus = executor.workers * executor.cpus_per_worker, ray.cluster_resources()
        if cpus.get("CPU", 0.0) < wanted:  # the actors would wait for CPUs forever
            raise DpsynthError(f"backends.executor: {executor.workers} workers of "
                               f"{executor.cpus_per_worker:g} CPU need {wanted:g} CPUs; the "
                               f"cluster has {cpus.get('CPU', 0.0):g}")
        if ray.available_resources().get("CPU", 0.0) < wanted:
            log.warning("ray: waiting for %g free CPUs for the private shards", wanted)
        actor_class = ray.remote(num_cpus=executor.cpus_per_worker, max_restarts=0)(Shard)
        actors = []
        try:
            for block in blocks:
                actor = actor_class.remote(self.embedder.model_copy(update={"cache": None}),
                                           self.base_dir, self.allow_remote, executor.search)
                actors.append(actor)
                encoded = [texts[i].encode("utf-8") for i in block]
                _send(actor, "texts", np.frombuffer(b"".join(encoded), dtype=np.uint8))
                _send(actor, "ends", np.cumsum([len(t) for t in encoded], dtype=np.int64))
                for name, values in per_record.items():
                    _send(actor, name, values[block])
            shapes = ray.get([actor.embed.remote() for actor in actors])
            if [rows for rows, _ in shapes] != [len(b) for b in blocks]:
                raise DpsynthError("the shards embedded other records than they were sent")
            widths = {width for rows, width in shapes if rows}
            if len(widths) != 1:
                raise DpsynthError("the shards' embedders answer other dimensions: "
                                   f"{sorted(widths)}")
        except BaseException:
            _stop(ray, actors)
            raise
        return ray, actors, widths.pop()


def shard_blocks(texts: list[str], workers: int) -> list[np.ndarray]:
    """The records (indices, in order) of each of `workers` shards: a record's shard is a
    digest of its own text, so a record joining or leaving moves no other record between
    shards (tests/ops/test_shard_assignment.py); copies of a text share a shard."""
    shard = np.fromiter((record_rank(t) % workers for t in texts), dtype=np.int64,
                        count=len(texts))
    return [np.flatnonzero(shard == s) for s in range(workers)]


def _stop(ray: Any, actors: list[Any]) -> None:
    """Kill the actors, and with them what they hold."""
    for actor in actors:
        ray.kill(actor)


def _send(actor: Any, name: str, array: np.ndarray) -> None:
    """Send a 1-D array to an actor in pieces Ray passes inline (calls run in order)."""
    for piece in _pieces(array):
        actor.put.remote(name, piece)


def _pieces(array: np.ndarray) -> Iterator[np.ndarray]:
    step = max(1, INLINE_BYTES // array.itemsize)
    for start in range(0, max(len(array), 1), step):
        yield array[start : start + step]


def _parts(n_values: int) -> int:
    """How many inline pieces an actor answers `n_values` 64-bit numbers in."""
    return max(1, -(-n_values * 8 // INLINE_BYTES))


def _split(values: np.ndarray, parts: int) -> Any:
    """An actor's answer in `parts` pieces (one return value each; `_receive` joins them)."""
    pieces = np.array_split(values, parts)
    return pieces[0] if parts == 1 else tuple(pieces)


def _ask(method: Any, parts: int, *args: Any) -> Any:
    """Call an actor method that answers in `parts` pieces (its last argument)."""
    return method.options(num_returns=parts).remote(*args, parts)


def _receive(ray: Any, answer: Any) -> np.ndarray:
    got = ray.get(answer)
    return np.concatenate(got) if isinstance(got, list) else got
