"""What a private record's training document is conditioned on, described by public facts
only: the recipe says how, the private side encodes each record, so no recipe code reads a
private text or label."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Conditioning:
    """A record's document is `lm.document(name of its label, keywords of its nearest
    topic, its text, the document kind)`."""

    label_names: Mapping[str, str] = field(default_factory=dict)
    """The name the LM is asked for each label by (the label itself when none is declared)."""
    centroids: np.ndarray | None = None
    """The public topic centroids a record's topic is the nearest of; None: no topics."""
    keywords: Sequence[Sequence[str]] = ()
    """Each topic's keywords, in the order of `centroids`."""
    document: str | None = None
    """The kind of document every prompt asks for (`data.document`); None: a text."""

    def label_name(self, label: str | None) -> str | None:
        return None if label is None else self.label_names.get(label, label)
