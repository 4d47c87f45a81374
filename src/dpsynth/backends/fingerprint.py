"""Model folders as cache keys: a digest of their files, so a retrained model in the same
folder, or another model in a folder of the same name, never shares cached outputs."""

from __future__ import annotations

import hashlib
from pathlib import Path


def folder_digest(folder: str | Path) -> str:
    """A SHA-256 digest of the names and contents of a model folder's files: a cache key
    that changes with the weights, tokenizer or keyword table, wherever the folder lies."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).iterdir() if p.is_file()):
        with path.open("rb") as handle:
            content = hashlib.file_digest(handle, "sha256").hexdigest()
        digest.update(f"{path.name}:{content}\n".encode())
    return digest.hexdigest()[:16]
