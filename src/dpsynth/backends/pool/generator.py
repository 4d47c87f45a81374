"""`PoolGenerator`: public text as a generator, by retrieval in embedding space.

Every output is a text of the pool, verbatim; this is the public-data setting of Private
Evolution, where DP selection picks among real public texts instead of LM samples:

- generate: the pool texts nearest to the condition (label, keywords, free text) embedded
  as a query, those of the condition's length first; one is drawn at random among the best
  `candidates`.
- rewrite: a neighbour of the parent, nearer for a low strength: strength 0 gives the
  nearest other text, strength 1 the `candidates`-th nearest.
- crossover: the nearest text to the parents' mean embedding, other than a parent.
- fill: the nearest text to the masked text (blanks dropped).

rewrite, crossover and fill search near the parent *and* the condition: the query is the
parents' embedding plus the condition's (label, keywords, free text), so a child stays with
its label instead of drifting to whatever topic neighbours its parent.

No pool text is returned twice within one call unless the call asks for more texts than the
pool holds. Only generate draws at random, from the seed and its call count (as in
`OfflineGenerator`); the other operations are deterministic.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpsynth.backends.base import BLANK, Condition, Embedder, Generator
from dpsynth.backends.pool.index import PoolIndex
from dpsynth.backends.pool.texts import read_pool_texts
from dpsynth.errors import InputError

DEFAULT_MAX_TEXTS = 10_000
"""Pool texts kept (a fixed subsample beyond it). Embedding is paid once per pool: MiniLM took
160 s for 2,000 wikinews paragraphs on 2 shared CPU cores, so about 13 minutes for this many."""
DEFAULT_CANDIDATES = 20
LENGTH_SLACK = 0.25
"""A text is of the condition's length when it has (1 ± slack) times the target words, as
for `OfflineGenerator`."""
RETRIEVAL_DEPTH = 4
"""Nearest texts looked at per output, in multiples of `candidates`: the length bucket is
sought among these, so relevance comes first and length second."""


class PoolGenerator(Generator):
    """Retrieves texts from a public pool (see the module docstring for each operation)."""

    is_remote = False

    def __init__(self, path: str | Path, embedder: Embedder, *, text_column: str = "text",
                 max_texts: int | None = DEFAULT_MAX_TEXTS,
                 candidates: int = DEFAULT_CANDIDATES, seed: int | None = None,
                 index_dir: str | Path | None = None) -> None:
        if candidates < 1:
            raise InputError(f"candidates={candidates}: must be at least 1")
        self.path = Path(path)
        self.candidates = candidates
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**63)
        self.index = PoolIndex(read_pool_texts(self.path, text_column, max_texts), embedder,
                               self.path, Path(index_dir) if index_dir is not None else None)
        self._ids = {text: i for i, text in enumerate(self.index.texts)}
        self._calls = 0
        self._repeats = 0

    def __repr__(self) -> str:
        return f"PoolGenerator({self.path}, {len(self.index)} texts)"

    def identity(self) -> dict[str, object]:
        return {"backend": "pool", "pool": self.index.digest, "candidates": self.candidates,
                "embedder": self.index.embedder.identity()}

    def usage(self) -> dict[str, float]:
        return {"pool_texts": len(self.index), "pool_texts_embedded": self.index.embedded,
                "pool_repeats": self._repeats}

    def state_dict(self) -> dict[str, int]:
        """The call count that keys each call's randomness, for checkpoints."""
        return {"calls": self._calls}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._calls = int(state["calls"])

    def stored_embeddings(self, texts: Sequence[str], embedder: Embedder
                          ) -> dict[str, np.ndarray]:
        """The stored vectors of those `texts` that are pool texts, when `embedder` is the
        one that indexed the pool: a run then never embeds a retrieved text again."""
        mine = self.index.embedder
        if embedder.identity() != mine.identity() or embedder.dim != mine.dim:
            return {}
        return {t: self.index.vectors[self._ids[t]] for t in texts if t in self._ids}

    # ------------------------------------------------------------ operations

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        rng = self._rng()
        used: set[int] = set()
        queries = [_query_text(c) for c in conditions]
        ranked = self._rank_by_text(queries, len(conditions))
        out = []
        for cond, order in zip(conditions, ranked, strict=True):
            if not len(order):  # an empty condition matches any pool text
                order = rng.permutation(len(self.index))
            elif cond.length is not None:
                order = self._by_length(order, cond.length)
            free = self._free(order, used, set(), self.candidates)
            out.append(self._take(free[rng.integers(len(free))], used))
        return out

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        _check_pairs("rewrite", texts, conditions)
        if not 0 <= strength <= 1:
            raise InputError(f"strength={strength}: must lie in [0, 1]")
        if not texts:
            return []
        rank = round(strength * (self.candidates - 1))
        used: set[int] = set()
        out = []
        queries = self._steered(self._vectors(texts), conditions)
        for text, order in zip(texts, self._rank(queries, len(texts) + 1), strict=True):
            free = self._free(order, used, self._own_ids([text]), rank + 1)
            out.append(self._take(free[min(rank, len(free) - 1)], used))
        return out

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        _check_pairs("crossover", parent_groups, conditions)
        if not parent_groups:
            return []
        means = np.stack([self._vectors(group).mean(axis=0) for group in parent_groups])
        means = self._steered(_unit(means), conditions)
        reach = len(parent_groups) + max(map(len, parent_groups))
        used: set[int] = set()
        return [self._take(self._free(order, used, self._own_ids(group), 1)[0], used)
                for group, order in zip(parent_groups, self._rank(means, reach), strict=True)]

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        _check_pairs("fill", masked_texts, conditions)
        if not masked_texts:
            return []
        unmasked = [" ".join(w for w in t.split() if w.strip(BLANK)) for t in masked_texts]
        used: set[int] = set()
        queries = self._steered(self.index.embedder.encode(unmasked), conditions)
        return [self._take(self._free(order, used, set(), 1)[0], used)
                for order in self._rank(queries, len(masked_texts))]

    # ------------------------------------------------------------ retrieval

    def _rng(self) -> np.random.Generator:
        """This call's generator, from the seed and the call count."""
        self._calls += 1
        return np.random.default_rng([self.seed, self._calls])

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of `texts`, read from the index for pool texts (most parents are)."""
        ids = [self._ids.get(t) for t in texts]
        missing = [t for t, i in zip(texts, ids, strict=True) if i is None]
        fresh = iter(self.index.embedder.encode(missing)) if missing else iter(())
        return np.stack([self.index.vectors[i] if i is not None else next(fresh) for i in ids])

    def _steered(self, vectors: np.ndarray, conditions: Sequence[Condition]) -> np.ndarray:
        """Each unit vector plus its condition's embedding, renormalised (unchanged for an
        empty condition); each distinct condition embedded once."""
        queries = [_query_text(c) for c in conditions]
        distinct = sorted({q for q in queries if q})
        if not distinct:
            return vectors
        found = dict(zip(distinct, self.index.embedder.encode(distinct), strict=True))
        steer = np.stack([found[q] if q else np.zeros(vectors.shape[1], vectors.dtype)
                          for q in queries])
        return _unit(vectors + steer)

    def _own_ids(self, texts: Sequence[str]) -> set[int]:
        return {self._ids[t] for t in texts if t in self._ids}

    def _rank(self, queries: np.ndarray, batch: int) -> list[np.ndarray]:
        """Ids of the pool texts nearest each query, best first, deep enough for every output
        of a batch of `batch` to find a free candidate (`_free` handles the rest)."""
        _, ids = self.index.search(queries, RETRIEVAL_DEPTH * self.candidates + batch)
        return [row[row >= 0] for row in ids]

    def _rank_by_text(self, queries: list[str], batch: int) -> list[np.ndarray]:
        """`_rank` for query texts, each distinct one embedded once; an empty query ranks
        nothing."""
        distinct = sorted({q for q in queries if q})
        found = (dict(zip(distinct, self._rank(self.index.embedder.encode(distinct), batch),
                          strict=True)) if distinct else {})
        return [found.get(q, np.zeros(0, dtype=np.int64)) for q in queries]

    def _by_length(self, order: np.ndarray, length: int) -> np.ndarray:
        """`order` with the texts of the target length first, each part kept in order."""
        words = self.index.words[order]
        inside = (words >= np.floor(length * (1 - LENGTH_SLACK))) & (
            words <= np.ceil(length * (1 + LENGTH_SLACK)))
        return order[np.argsort(~inside, kind="stable")]

    def _free(self, order: np.ndarray, used: set[int], exclude: set[int], want: int
              ) -> list[int]:
        """Up to `want` ids from `order` not used in this call nor excluded, else from the
        rest of the pool; once the call has used the whole pool, texts repeat (counted)."""
        blocked = used | exclude
        if used and len(blocked) >= len(self.index):
            self._repeats += 1
            used.clear()
            blocked = set(exclude)
        free = list(itertools.islice((i for i in map(int, order) if i not in blocked), want))
        if not free:
            free = [i for i in range(len(self.index)) if i not in blocked][:want]
        return free or [int(order[0])]  # the excluded parents are the whole pool

    def _take(self, pool_id: int, used: set[int]) -> str:
        used.add(pool_id)
        return self.index.texts[pool_id]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _query_text(cond: Condition) -> str:
    return " ".join(p for p in (cond.label, *cond.keywords, cond.text) if p)


def _check_pairs(name: str, items: Sequence, conditions: Sequence[Condition]) -> None:
    if len(items) != len(conditions):
        raise InputError(f"{name}: {len(items)} inputs but {len(conditions)} conditions; "
                         "give one condition per input")
