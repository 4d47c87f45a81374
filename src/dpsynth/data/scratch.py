"""Scratch space for private embeddings: in memory when small, else a float32 memory map of an
unlinked temporary file, so embedding and voting over a million records hold one block of them
in RAM, not all of them.

The file never has a name a process could open: `tempfile.TemporaryFile` creates it with
O_TMPFILE where the kernel offers it, else unlinks it at once. Only the mapping keeps it, so
the kernel frees it when the run ends, however it ends (SIGKILL included); it is never a
cache or a checkpoint. It lives on the file system of TMPDIR (docs/privacy.md#where-private-
data-lives-during-a-run says what that means for its freed blocks).
"""

from __future__ import annotations

import tempfile

import numpy as np

IN_MEMORY_BYTES = 64 << 20
"""Arrays up to this size stay in memory (43,690 rows of 384 float32s)."""


def scratch_array(rows: int, dim: int, in_memory_bytes: int | None = None) -> np.ndarray:
    """An uninitialised (rows, dim) float32 array: in memory up to `in_memory_bytes`
    (IN_MEMORY_BYTES when None), else out of core on an unlinked temporary file."""
    limit = IN_MEMORY_BYTES if in_memory_bytes is None else in_memory_bytes
    if rows * dim * 4 <= limit:
        return np.empty((rows, dim), dtype=np.float32)
    with tempfile.TemporaryFile(prefix="dpsynth-") as file:  # the map keeps its own handle
        return np.memmap(file, dtype=np.float32, mode="w+", shape=(rows, dim))
