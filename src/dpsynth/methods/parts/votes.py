"""The DP vote over a population of samples, and each sample's label: the one it was
generated for, or the one whose private records voted for it clearly most (pe, dpga)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from dpsynth.methods.base import RunContext, group_codes
from dpsynth.privacy.stages import VOTING

LabelsFrom = Literal["generation", "votes"]

RELABEL_MARGIN = 2.0
"""A sample leaves the label it was generated for only when another label's noisy count leads
by this many σ: a bare argmax over the cells follows the noise at σ ≈ 8 (ε = 1). pe on
ag_news, pool, 3 seeds: margin 0 / 1 / 2 gave 0.710 / 0.772 / 0.801 at ε = 1 and 0.812 /
0.820 / 0.826 at ε = 4 (docs/recipes/pe.md)."""


def vote_on_samples(ctx: RunContext, texts: list[str], embeddings: np.ndarray, labels: list,
                    groups: list, labels_from: LabelsFrom,
                    threshold: float = 0.0) -> tuple[np.ndarray, list]:
    """Noisy votes per sample, and its label: as generated (records vote within their own
    label), or with `votes` (records vote over every sample, each in its own label's cell)
    the label whose count reaches `threshold` and leads the generated label's by
    RELABEL_MARGIN σ. Copies of a text take the label of its first copy, which holds all
    its votes (ties go to the lowest index). Everything after the release reads the noisy
    cells and public labels only."""
    stage = ctx.plan.stage(VOTING)
    if labels_from == "generation" or groups == [None]:
        return ctx.private.nearest_votes(stage, embeddings, group_codes(groups, labels)), labels
    cells = ctx.private.labelled_votes(stage, embeddings, len(groups))
    rows, generated = np.arange(len(cells)), group_codes(groups, labels)
    best = np.argmax(cells, axis=1)
    lead = cells[rows, best] - cells[rows, generated]
    relabel = (cells[rows, best] >= threshold) & (lead >= RELABEL_MARGIN * stage.mechanism.sigma)
    best = np.where(relabel, best, generated)
    first: dict[str, int] = {}
    best = best[[first.setdefault(text, i) for i, text in enumerate(texts)]]
    return cells[rows, best], [groups[i] for i in best]
