"""Plots as inline SVG strings: matplotlib figures without pyplot's global state."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.errors import InputError
from dpsynth.report.names import readable

REAL, SYNTHETIC, BUDGET = "#4c72b0", "#dd8452", "red"


def _legend(ax) -> None:
    """Legend beside the axes, where it cannot cover bars or points."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize="small")


def _figure(width: float = 6.4, height: float = 3.2):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("plots in the report need the 'report' extra: "
                         "pip install 'dpsynth[report]'") from None
    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig) -> str:
    """The figure as an `<svg>` element, text kept as text, without the XML prologue."""
    from matplotlib import rc_context

    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "dpsynth"}):
        fig.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


def stage_spend(stages: Sequence[tuple[str, float]], total: float | None,
                budget: float | None) -> str:
    """Horizontal bars: ε each stage would cost alone, with the composed total and budget."""
    fig = _figure(8.0, 0.9 + 0.45 * max(len(stages), 1))
    ax = fig.subplots()
    names = [name for name, _ in stages]
    ax.barh(names, [value for _, value in stages], color=SYNTHETIC)
    ax.invert_yaxis()
    if total is not None:
        ax.axvline(total, color="black", linestyle="-", label=f"composed total ε = {total:.3g}")
    if budget is not None:
        ax.axvline(budget, color=BUDGET, linestyle="--", label=f"budget ε = {budget:.3g}")
    ax.set_xlabel("ε (each stage alone, at the budget's δ)")
    if total is not None or budget is not None:
        _legend(ax)
    return to_svg(fig)


def iteration_curves(rows: Sequence[dict[str, Any]], budget: float | None = None) -> str:
    """One small panel per numeric field of the per-iteration metrics, titled by its
    readable name; the ε spent so far is drawn against the budget."""
    from matplotlib.ticker import MaxNLocator

    xs = [row.get("iteration", i) for i, row in enumerate(rows)]
    fields = sorted({k for row in rows for k, v in row.items()
                     if k != "iteration" and isinstance(v, int | float)
                     and not isinstance(v, bool)})
    if not fields:
        raise InputError("metrics.jsonl has no numeric fields to plot")
    cols = min(3, len(fields))
    nrows = -(-len(fields) // cols)
    fig = _figure(3.4 * cols, 2.4 * nrows)
    axes = np.atleast_1d(fig.subplots(nrows, cols, squeeze=False)).ravel()
    for ax, name in zip(axes, fields, strict=False):
        points = [(x, row[name]) for x, row in zip(xs, rows, strict=True)
                  if isinstance(row.get(name), int | float)]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                color=SYNTHETIC)
        if name == "epsilon_spent" and budget is not None:
            ax.axhline(budget, color=BUDGET, linestyle="--", label=f"budget ε = {budget:.3g}")
            ax.legend(loc="lower right", frameon=False, fontsize="x-small")
        ax.set_title(readable(name), fontsize="small")
        ax.set_xlabel("iteration", fontsize="small")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[len(fields):]:
        ax.set_visible(False)
    return to_svg(fig)


def length_histogram(real: Sequence[int] | None, synthetic: Sequence[int]) -> str:
    """Word-length distributions, as densities so sets of different sizes compare, each
    with its mean marked."""
    fig = _figure(8.0, 3.2)
    ax = fig.subplots()
    values = [*synthetic, *(real or [])]
    bins = np.histogram_bin_edges(values, bins=min(40, max(5, len(set(values)))))
    if real:
        ax.hist(real, bins=bins, density=True, alpha=0.55, color=REAL, label="real test")
        ax.axvline(float(np.mean(real)), color=REAL, linestyle="--",
                   label=f"real test mean {np.mean(real):.1f}")
    ax.hist(synthetic, bins=bins, density=True, alpha=0.55, color=SYNTHETIC, label="synthetic")
    ax.axvline(float(np.mean(synthetic)), color=SYNTHETIC, linestyle="--",
               label=f"synthetic mean {np.mean(synthetic):.1f}")
    ax.set_xlabel("words per text")
    ax.set_ylabel("density")
    _legend(ax)
    return to_svg(fig)


def label_bars(real: dict[str, float] | None, synthetic: dict[str, float]) -> str:
    """Share of each label, side by side, in the order given, against an even split."""
    return to_svg(label_bars_figure(real, synthetic))


def label_bars_figure(real: dict[str, float] | None, synthetic: dict[str, float]):
    """Horizontal bars, one row per label and the figure as tall as the rows need, so label
    names of any length or number never overlap."""
    classes = [*synthetic, *(c for c in real or {} if c not in synthetic)]
    per_row = 0.42 if real else 0.3
    fig = _figure(8.0, 0.9 + per_row * max(len(classes), 1))
    ax = fig.subplots()
    y = np.arange(len(classes))
    height = 0.4 if real else 0.8
    if real:
        ax.barh(y - height / 2, [real.get(c, 0.0) for c in classes], height, color=REAL,
                label="real test")
    ax.barh(y + (height / 2 if real else 0), [synthetic.get(c, 0.0) for c in classes], height,
            color=SYNTHETIC, label="synthetic")
    ax.set_yticks(y, [_short(c, 40) for c in classes], fontsize="small")
    ax.set_ylim(len(classes) - 0.5, -0.5)  # first label on top
    if len(classes) > 1:
        ax.axvline(1 / len(classes), color="grey", linestyle=":",
                   label=f"even split 1/{len(classes)}")
    ax.set_xlabel("share")
    _legend(ax)
    return fig


def quality_bars(bars: Sequence[tuple[str, float, str]], floor: float | None,
                 ceiling: float | None) -> str:
    """Real-test accuracy of each classifier as a bar (`(name, value, colour)`), with the
    majority-class floor and the real-train ceiling drawn across as reference lines."""
    fig = _figure(8.0, 0.9 + 0.5 * len(bars))
    ax = fig.subplots()
    names = [name for name, _, _ in bars]
    values = [value for _, value, _ in bars]
    ax.barh(names, values, color=[colour for _, _, colour in bars])
    for y, value in enumerate(values):
        ax.text(min(value, 1.0) + 0.01, y, f"{value:.3f}", va="center", fontsize="small")
    ax.invert_yaxis()
    if floor is not None:
        ax.axvline(floor, color="grey", linestyle="--",
                   label=f"majority-class rate {floor:.3g} (floor)")
    if ceiling is not None:
        ax.axvline(ceiling, color=REAL, linestyle=":",
                   label=f"real-train reference {ceiling:.3g} (ceiling)")
    ax.set_xlim(0, 1.08)
    ax.set_xlabel("accuracy on the real test split")
    if floor is not None or ceiling is not None:
        _legend(ax)
    return to_svg(fig)


def embedding_map(real: Sequence[Sequence[float]], synthetic: Sequence[Sequence[float]],
                  explained: Sequence[float] | None = None) -> str:
    """The two sets on the first two principal components of their embeddings."""
    fig = _figure(8.0, 5.2)
    ax = fig.subplots()
    r, s = np.asarray(real), np.asarray(synthetic)
    if len(r):
        ax.scatter(r[:, 0], r[:, 1], s=8, alpha=0.5, color=REAL, label="real test")
    if len(s):
        ax.scatter(s[:, 0], s[:, 1], s=8, alpha=0.5, color=SYNTHETIC, label="synthetic")
    pct = [f" ({100 * v:.0f}% of variance)" for v in explained] if explained else ["", ""]
    ax.set_xlabel("PC 1" + pct[0])
    ax.set_ylabel("PC 2" + pct[1])
    _legend(ax)
    return to_svg(fig)


def similarity_histogram(edges: Sequence[float], counts: Sequence[int],
                         baseline: Sequence[int] | None = None,
                         threshold: float | None = None) -> str:
    """Nearest-private-neighbour similarity: synthetic records vs fresh real test records,
    with the similarity from which a synthetic record counts as a near copy."""
    fig = _figure(8.0, 3.2)
    ax = fig.subplots()
    centres = (np.asarray(edges[:-1]) + np.asarray(edges[1:])) / 2
    width = (edges[1] - edges[0]) * (0.45 if baseline is not None else 0.9)

    def shares(c: Sequence[int]) -> np.ndarray:
        return np.asarray(c) / max(sum(c), 1)

    if baseline is not None:
        ax.bar(centres - width / 2, shares(baseline), width, color=REAL,
               label="real test → private (baseline)")
    ax.bar(centres + (width / 2 if baseline is not None else 0), shares(counts), width,
           color=SYNTHETIC, label="synthetic → private")
    if threshold is not None:
        ax.axvline(threshold, color=BUDGET, linestyle="--",
                   label=f"near-copy threshold {threshold:.3g}")
    ax.set_xlabel("cosine similarity to the nearest private record")
    ax.set_ylabel("share of records")
    _legend(ax)
    return to_svg(fig)


def _short(label: str, limit: int = 18) -> str:
    label = re.sub(r"\s+", " ", label)
    return label if len(label) <= limit else label[: limit - 1] + "…"
