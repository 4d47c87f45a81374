"""The pool's embeddings and an exact nearest-neighbour index over them.

Pool texts are public, so their embeddings may be stored: they are computed once per (pool,
embedder) and kept in a `.npy` file named by a digest of both, beside the pool (or in
`index_dir`, or in the user cache folder when the pool's folder is read-only, as shared data
folders often are). A changed pool or embedder gets a new file; stale ones are never read.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpsynth.backends.base import Embedder
from dpsynth.backends.cache import content_key
from dpsynth.errors import InputError

log = logging.getLogger(__name__)


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dpsynth" / "pool"


class PoolIndex:
    """Texts, their unit embeddings (row i embeds texts[i]) and an inner-product faiss index.

    `embedded` counts the texts this construction had to embed (0 when the stored file was
    reused)."""

    def __init__(self, texts: Sequence[str], embedder: Embedder, source: Path,
                 index_dir: Path | None = None) -> None:
        try:
            import faiss
        except ImportError:
            raise InputError("the pool generator needs faiss: pip install 'dpsynth[dist]'"
                             ) from None
        self.texts = list(texts)
        self.embedder = embedder
        self.digest = content_key(embedder.identity(), embedder.dim, self.texts)[:16]
        self.file_name = f"{source.name}.emb-{self.digest}.npy"
        folders = [index_dir] if index_dir is not None else [source.parent, user_cache_dir()]
        self.embedded = 0
        self.vectors = self._load(folders)
        if self.vectors is None:
            log.info("embedding %d pool texts from %s (once: the result is stored)",
                     len(self.texts), source)
            self.vectors = np.ascontiguousarray(embedder.encode(self.texts), dtype=np.float32)
            self.embedded = len(self.texts)
            self._save(folders)
        self.words = np.array([len(t.split()) for t in self.texts])
        self._index = faiss.IndexFlatIP(self.vectors.shape[1])
        self._index.add(self.vectors)

    def __len__(self) -> int:
        return len(self.texts)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(similarities, ids) of the `k` nearest pool texts to each unit query, best first."""
        k = min(k, len(self.texts))
        return self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k)

    def _load(self, folders: list[Path]) -> np.ndarray | None:
        for folder in folders:
            file = folder / self.file_name
            if not file.is_file():
                continue
            try:
                vectors = np.load(file, allow_pickle=False)
            except (OSError, ValueError) as exc:
                log.warning("pool embeddings %s unreadable (%s); embedding the pool again",
                            file, exc)
                continue
            if vectors.shape == (len(self.texts), self.embedder.dim):
                log.info("pool embeddings reused from %s", file)
                return np.ascontiguousarray(vectors, dtype=np.float32)
            log.warning("pool embeddings %s have shape %s, expected %s; embedding again",
                        file, vectors.shape, (len(self.texts), self.embedder.dim))
        return None

    def _save(self, folders: list[Path]) -> None:
        """Write atomically to the first folder that accepts it; a pool that cannot be stored
        still works, it is only embedded again next time."""
        for folder in folders:
            partial: Path | None = None
            try:
                folder.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp",
                                                 delete=False) as handle:
                    partial = Path(handle.name)
                    np.save(handle, self.vectors, allow_pickle=False)
                os.replace(partial, folder / self.file_name)
                log.info("pool embeddings stored in %s", folder / self.file_name)
                return
            except OSError as exc:
                if partial is not None:
                    partial.unlink(missing_ok=True)
                log.info("pool embeddings cannot be stored in %s (%s)", folder, exc)
        log.warning("pool embeddings could not be stored in %s; set backends.generator."
                    "index_dir to a writable folder to reuse them",
                    ", ".join(map(str, folders)))
