"""A persistent content cache (SQLite) for generations and embeddings of public text.

Keys are SHA-256 digests of (backend identity, operation, inputs, sampling parameters, sample
index), so the file holds no input text, only outputs: synthetic text and embeddings of public
or synthetic text. Private text never reaches it: `CachedEmbedder.encode_private`, the path
`PrivateDataset.embed` takes, and `encode_uncached`, evaluation's path for real splits, go
straight to the wrapped embedder, and generators never see private text at all.

A generator is asked for the same thing many times on purpose (ten texts for one label), so
each request gets a sample index: the number of times the same request was made before in
this run. A rerun asks in the same order and so hits the same entries; `state_dict` lets a
resumed run continue the numbering instead of replaying earlier samples.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.backends.base import FAILED, Condition, Embedder, Generator, WrappedGenerator
from dpsynth.errors import InputError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (key TEXT PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, dim INTEGER NOT NULL,
                                       vector BLOB NOT NULL);
"""


def content_key(*parts: Any) -> str:
    """A SHA-256 hex digest of the parts as canonical JSON."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ContentCache:
    """One SQLite file; safe to share between threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False,
                                       isolation_level=None)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise InputError(f"cache {self.path}: cannot open it as an SQLite file "
                             f"({exc})") from None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ContentCache({str(self.path)!r})"

    def get_texts(self, keys: Sequence[str]) -> dict[str, str]:
        rows = self._select("SELECT key, text FROM generations", keys)
        return {key: text for key, text in rows}

    def put_texts(self, items: dict[str, str]) -> None:
        self._insert("INSERT OR REPLACE INTO generations VALUES (?, ?)", list(items.items()))

    def get_vectors(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        rows = self._select("SELECT key, dim, vector FROM embeddings", keys)
        return {key: np.frombuffer(blob, dtype=np.float32, count=dim)
                for key, dim, blob in rows}

    def put_vectors(self, items: dict[str, np.ndarray]) -> None:
        rows = [(k, int(v.shape[0]), np.asarray(v, dtype=np.float32).tobytes())
                for k, v in items.items()]
        self._insert("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)", rows)

    def close(self) -> None:
        self._db.close()

    def _select(self, query: str, keys: Sequence[str]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows += self._db.execute(f"{query} WHERE key IN ({marks})", chunk).fetchall()
        return rows

    def _insert(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(statement, rows)
            self._db.execute("COMMIT")


class CachedGenerator(WrappedGenerator):
    """Serves repeated requests from the cache and forwards only the misses, as one batch.

    `read_only` (used for dry runs) looks entries up but stores nothing, so a dry run counts
    only the calls a real run would pay for and never leaves placeholder text behind. Scores
    and the context LM are forwarded, never cached: they are deterministic and cheap beside
    sampling, and what a context holds is never stored.
    """

    def __init__(self, inner: Generator, cache: ContentCache, read_only: bool = False) -> None:
        super().__init__(inner)
        self.cache = cache
        self.read_only = read_only
        self.hits = 0
        self.misses = 0
        self._seen: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"CachedGenerator({self.inner!r}, {self.cache!r})"

    def usage(self) -> dict[str, float]:
        return {**self.inner.usage(), "cache_hits": float(self.hits),
                "cache_misses": float(self.misses)}

    def state_dict(self) -> dict[str, Any]:
        """The sample numbering, for a checkpoint (digests only, no text)."""
        return {"seen": dict(self._seen)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._seen = Counter(state["seen"])

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self._serve("generate", [[asdict(c)] for c in conditions],
                           lambda idx: self.inner.generate([conditions[i] for i in idx]))

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        inputs = [[t, asdict(c), strength] for t, c in zip(texts, conditions, strict=True)]
        return self._serve("rewrite", inputs, lambda idx: self.inner.rewrite(
            [texts[i] for i in idx], [conditions[i] for i in idx], strength))

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        inputs = [[t, asdict(c)] for t, c in zip(masked_texts, conditions, strict=True)]
        return self._serve("fill", inputs, lambda idx: self.inner.fill(
            [masked_texts[i] for i in idx], [conditions[i] for i in idx]))

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        inputs = [[list(g), asdict(c)] for g, c in zip(parent_groups, conditions, strict=True)]
        return self._serve("crossover", inputs, lambda idx: self.inner.crossover(
            [parent_groups[i] for i in idx], [conditions[i] for i in idx]))

    def _serve(self, op: str, inputs: list[Any],
               call: Callable[[list[int]], list[str]]) -> list[str]:
        identity = self.inner.identity()
        keys = []
        for item in inputs:
            request = content_key(identity, op, item)
            keys.append(content_key(request, self._seen[request]))
            self._seen[request] += 1
        found = self.cache.get_texts(keys)
        missing = [i for i, key in enumerate(keys) if key not in found]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        fresh = call(missing) if missing else []
        if not self.read_only:
            self.cache.put_texts({keys[i]: text for i, text in zip(missing, fresh, strict=True)
                                  if text != FAILED})
        out = [found.get(key, FAILED) for key in keys]
        for i, text in zip(missing, fresh, strict=True):
            out[i] = text
        return out


class CachedEmbedder(Embedder):
    """Caches embeddings of public and synthetic text; private text bypasses the cache."""

    def __init__(self, inner: Embedder, cache: ContentCache) -> None:
        self.inner = inner
        self.cache = cache
        self.is_remote = inner.is_remote
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, {self.cache!r})"

    @property
    def dim(self) -> int:
        return self.inner.dim

    def identity(self) -> dict[str, object]:
        return self.inner.identity()

    def usage(self) -> dict[str, float]:
        return {**self.inner.usage(), "cache_hits": float(self.hits),
                "cache_misses": float(self.misses)}

    def served_by(self) -> Embedder:
        return self.inner.served_by()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        identity = self.inner.identity()
        keys = [content_key(identity, text) for text in texts]
        found = self.cache.get_vectors(list(set(keys)))
        missing: dict[str, int] = {}  # each missing key once, at its first position
        for i, key in enumerate(keys):
            if key not in found:
                missing.setdefault(key, i)
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = self.inner.encode([texts[i] for i in missing.values()])
            new = dict(zip(missing, fresh, strict=True))
            self.cache.put_vectors(new)
            found.update(new)
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def encode_private(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode_private(texts)

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode_uncached(texts)
