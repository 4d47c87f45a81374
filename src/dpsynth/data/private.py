"""The private dataset: private records behind explicit, purpose-named accessors.

Nothing here prints, logs or pickles a private text. Code that needs the raw texts says why
by the accessor it calls, so every such place can be found by a search for `Access.`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Protocol

import numpy as np

from dpsynth.data.scratch import scratch_array
from dpsynth.errors import InputError

log = logging.getLogger(__name__)

EMBED_BLOCK_ROWS = 4096
"""Private texts per call to the embedder (a multiple of the usual batch sizes)."""


class Access(StrEnum):
    """The only reasons private texts may leave this object."""

    LOCAL_EMBEDDING = "local embedding"
    LOCAL_DP_TRAINING = "local DP training"
    LEDGERED_OP = "an op that charges the privacy ledger"


class SupportsEncode(Protocol):
    is_remote: bool

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_private(self, texts: Sequence[str]) -> np.ndarray: ...


class PrivateDataset:
    """Private records (text, optional label) grouped into privacy units.

    `records_per_unit` is the configured bound k on the records one unit may hold (the
    factor by which one unit can move a per-record count, which sensitivities use). It is a
    public parameter, never the data's own maximum: a sensitivity read off the data would
    differ between neighbouring datasets.
    """

    __slots__ = ("_label_codes", "_public_units", "_texts", "_units", "label_names", "origin",
                 "records_per_unit")

    def __init__(
        self,
        texts: Sequence[str],
        *,
        labels: Sequence[str] | None = None,
        label_names: Sequence[str] | None = None,
        units: Sequence[int] | None = None,
        records_per_unit: int = 1,
        max_units: int | None = None,
        origin: str = "",
    ) -> None:
        if not texts:
            raise InputError("a private dataset needs at least one record")
        self._texts: tuple[str, ...] = tuple(texts)
        if labels is not None:
            if len(labels) != len(texts):
                raise InputError("labels and texts differ in length")
            if label_names is None:
                raise InputError("labels need their declared label set, label_names (the "
                                 "public data.labels): a set read from the records is not "
                                 "public")
            names = list(label_names)
            index = {name: i for i, name in enumerate(names)}
            if not set(labels) <= set(index):  # how many are not depends on the data
                raise InputError(f"a label is not in the declared label set {names}; add it "
                                 "to data.labels or fix the data")
            self.label_names: tuple[str, ...] | None = tuple(names)
            self._label_codes: np.ndarray | None = np.array([index[v] for v in labels])
        else:
            self.label_names, self._label_codes = None, None
        unit_ids = np.arange(len(texts)) if units is None else np.asarray(units, dtype=np.int64)
        if len(unit_ids) != len(texts):
            raise InputError("units and texts differ in length")
        if records_per_unit < 1:
            raise InputError(f"records_per_unit must be at least 1, got {records_per_unit}")
        if np.bincount(np.unique(unit_ids, return_inverse=True)[1]).max() > records_per_unit:
            raise InputError(f"a privacy unit holds more than records_per_unit="
                             f"{records_per_unit} records; bound contributions first")
        self._units = unit_ids
        self.records_per_unit = records_per_unit
        if max_units is not None and len(np.unique(unit_ids)) > max_units:
            raise InputError(f"the private data holds more privacy units than its declared "
                             f"bound data.max_units={max_units}; raise the bound")
        self._public_units = max_units
        self.origin = origin
        """Where the records were read, by identity on disk, not content (each file's inode
        and modification time; empty for an in-memory table): public. A release drawn in
        parts continues after a kill only from the same."""

    @property
    def n_records(self) -> int:
        return len(self._texts)

    @property
    def n_units(self) -> int:
        """N as the plan uses it (δ, sampling rates, size checks): the declared public bound
        `data.max_units` where there is one, so the count itself is never used or shown."""
        if self._public_units is not None:
            return self._public_units
        return len(np.unique(self._units))

    @property
    def n_units_is_a_bound(self) -> bool:
        return self._public_units is not None

    @property
    def has_labels(self) -> bool:
        return self._label_codes is not None

    def __len__(self) -> int:
        return len(self._texts)

    def __repr__(self) -> str:
        """N and the declared labels only: with k > 1 the number of records is private."""
        labels = len(self.label_names) if self.label_names is not None else 0
        return f"PrivateDataset(units={self.n_units}, labels={labels})"

    __str__ = __repr__

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError(
            "PrivateDataset refuses to be pickled or copied: private text must not reach a "
            "checkpoint, cache or worker process"
        )

    def texts(self, access: Access) -> list[str]:
        """The raw private texts, for one of the purposes in `Access`."""
        if not isinstance(access, Access):
            raise TypeError("name the purpose with dpsynth.data.Access")
        log.debug("private texts read for %s", access.value)
        return list(self._texts)

    def mostly_within(self, public_texts: Iterable[str]) -> bool:
        """Whether half or more of the private texts appear verbatim among `public_texts`: a
        check that a file named as public (a pool) is not a copy of the private data. One bit,
        answered before any release; no text or count leaves."""
        public = {t.strip() for t in public_texts}
        return 2 * sum(t.strip() in public for t in self._texts) >= len(self._texts)

    def mostly_covers(self, texts: Iterable[str]) -> bool:
        """Whether half or more of `texts` are private texts verbatim: a check that records
        named as held out are not the private data (or a part of it). One bit, no count."""
        private = {t.strip() for t in self._texts}
        named = [t.strip() for t in texts]
        return 2 * sum(t in private for t in named) >= len(named) > 0

    def label_codes(self, access: Access) -> np.ndarray:
        """Each record's label index into `label_names` (private: ledgered ops only)."""
        if self._label_codes is None:
            raise InputError("this dataset has no labels; set data.label_column")
        if access is not Access.LEDGERED_OP:
            raise TypeError("private labels are read only by ops that charge the ledger")
        return self._label_codes.copy()

    def unit_ids(self) -> np.ndarray:
        """Each record's privacy unit, for ops that bound per-unit contributions."""
        return self._units.copy()

    def embed(self, embedder: SupportsEncode, *, allow_remote: bool = False,
              block_rows: int = EMBED_BLOCK_ROWS,
              in_memory_bytes: int | None = None) -> np.ndarray:
        """Embed the private texts, refusing a remote embedder unless explicitly allowed.

        Calls `encode_private`, which cache wrappers pass straight through: private
        embeddings are never stored. Texts go to the embedder `block_rows` at a time, into a
        `scratch_array` (out of core above `in_memory_bytes`), so the embeddings of a large
        set never sit in RAM at once.
        """
        if getattr(embedder, "is_remote", True) and not allow_remote:
            raise InputError(
                "refusing to send private text to a remote embedder; use a local embedder or "
                "set backends.embedder.allow_remote_on_private: true"
            )
        if getattr(embedder, "is_remote", True):
            log.warning("private texts are being sent to a remote embedder (explicit opt-in)")
        encode = getattr(embedder, "encode_private", embedder.encode)
        texts = self.texts(Access.LOCAL_EMBEDDING)
        first = _finite(encode(texts[:block_rows]))  # its width is the embedder's dimension
        out = scratch_array(len(texts), first.shape[1], in_memory_bytes)
        out[: len(first)] = first
        for start in range(block_rows, len(texts), block_rows):
            out[start : start + block_rows] = _finite(encode(texts[start : start + block_rows]))
        return out

    def subset(self, indices: Sequence[int] | np.ndarray) -> PrivateDataset:
        """The records at `indices`, still private, keeping the label set and units."""
        idx = np.asarray(indices, dtype=np.int64)
        out = object.__new__(PrivateDataset)
        out._texts = tuple(self._texts[i] for i in idx)
        out.label_names = self.label_names
        out._label_codes = self._label_codes[idx] if self._label_codes is not None else None
        out._units = self._units[idx]
        out.records_per_unit = self.records_per_unit
        out._public_units = None  # a part's count is used inside the boundary only
        return out


def _finite(block: np.ndarray) -> np.ndarray:
    """A record whose embedding is not finite (a custom or remote embedder's failure on its
    text) is read as the zero vector: a fixed rule, so the record cannot make a later release
    fail, and silent, since a warning would say that some record did this."""
    with np.errstate(over="ignore", invalid="ignore"):  # a value past float32's range: inf
        block = np.array(block, dtype=np.float32)
    block[~np.isfinite(block).all(axis=1)] = 0.0
    return block
