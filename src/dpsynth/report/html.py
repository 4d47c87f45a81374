"""One self-contained HTML page per run: inline CSS and SVG, nothing fetched from a network.

Every section is always present; a section whose input is missing says what is missing and
how to produce it.

The page is public by default: it shows only what carries no private information (the
run's settings, the ledger, the per-iteration DP releases, generator counters, and the
synthetic set with what it says about itself: labels, lengths, repeats, a sample) and leaves
out everything computed from private records: the privacy diagnostics, the embedder's
counters (they count the private texts it embedded), the real splits' record counts, and
every metric, distribution and map computed on the real test split unless the evaluation
declared that split public (`EvalConfig.public_test`). `include_private=True` adds them back
for the data owner, with the quality card on top: downstream accuracy of the synthetic set
against the real-train reference and the majority-class rate.
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from dpsynth import __version__
from dpsynth.evaluate.privacy import PRIVATE_NOTICE
from dpsynth.evaluate.result import metric_rows
from dpsynth.report import plots
from dpsynth.report.inputs import RunArtifacts, load_run
from dpsynth.report.names import explain, readable
from dpsynth.report.synthetic import label_display, summarise

log = logging.getLogger(__name__)

SECTIONS = (
    ("quality", "Quality"),
    ("synthetic-set", "The synthetic set"),
    ("samples", "Sample synthetic texts"),
    ("privacy-spend", "Privacy spend by stage"),
    ("run", "Run and cost"),
    ("iterations", "Per-iteration curves"),
    ("embedding-map", "Embedding map"),
    ("metrics", "All metrics"),
    ("privacy-diagnostics", "Privacy diagnostics (private only)"),
)
REPORT_FILE = "report.html"
Label = Callable[[str], str]
"""Names a label as declared (`label_display`)."""
PUBLIC_USAGE = ("generator",)
"""usage.json sections that see only public inputs; the embedder also embeds private text."""

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:0 auto;
padding:1.5rem;color:#222;line-height:1.45}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
.meta{color:#666;font-size:.9rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem}
td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left;vertical-align:top}
td.how{color:#555;font-size:.85rem;max-width:34rem}code.key{color:#888;font-size:.75rem}
.verdict{font-size:1.1rem;font-weight:600}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.missing{color:#8a6d3b;background:#fcf8e3;border:1px solid #faebcc;padding:.5rem .8rem}
.private{color:#a94442;background:#f2dede;border:1px solid #ebccd1;padding:.5rem .8rem;
font-weight:600}
figure{margin:.8rem 0}svg{max-width:100%;height:auto}
ol.samples li{margin:.35rem 0}.label{font-size:.8rem;color:#555;background:#eee;
padding:0 .35rem;border-radius:3px;margin-right:.4rem}
"""


def write_report(run_dir: str | Path, output: str | Path | None = None,
                 include_private: bool = False, samples: int = 12) -> Path:
    """Render the run folder's report to `output` (default RUN_DIR/report.html); public
    unless `include_private`."""
    artifacts = load_run(run_dir)
    path = Path(output) if output is not None else artifacts.run_dir / REPORT_FILE
    if include_private:
        log.warning("the report includes diagnostics computed from private records (%s); "
                    "leave out --private for a page to share", PRIVATE_NOTICE)
    path.write_text(render(artifacts, include_private, samples), encoding="utf-8")
    log.info("wrote %s", path)
    return path


def render(artifacts: RunArtifacts, include_private: bool = False, samples: int = 12) -> str:
    real_test = include_private or not _test_is_private(artifacts)
    display = label_display(artifacts.config)
    builders: dict[str, Callable[[], str]] = {
        "quality": lambda: _quality(artifacts, include_private, real_test, display),
        "synthetic-set": lambda: _synthetic_set(artifacts, real_test, display),
        "samples": lambda: _samples(artifacts, samples, display),
        "privacy-spend": lambda: _privacy_spend(artifacts),
        "run": lambda: _run(artifacts, include_private),
        "iterations": lambda: _iterations(artifacts),
        "embedding-map": lambda: _embedding_map(artifacts, real_test),
        "metrics": lambda: _metrics(artifacts, include_private, real_test),
        "privacy-diagnostics": lambda: _privacy_diagnostics(artifacts, include_private),
    }
    order = _order(artifacts, real_test)
    body = []
    for anchor, title in order:
        body.append(f'<section id="{anchor}"><h2>{html.escape(title)}</h2>'
                    f"{builders[anchor]()}</section>")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    toc = " · ".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in order)
    name = html.escape(artifacts.run_dir.resolve().name)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>dpsynth report: {name}</title><style>{_CSS}</style></head><body>"
        f"<h1>dpsynth report: {name}</h1>"
        f'<p class="meta">generated {stamp} by dpsynth {html.escape(__version__)}</p>'
        f"{_not_private_banner(artifacts)}{_assumption_banner(artifacts)}"
        f"{_version_banner(include_private)}"
        f"<nav>{toc}</nav>{''.join(body)}</body></html>\n"
    )


def _order(a: RunArtifacts, real_test: bool) -> list[tuple[str, str]]:
    """SECTIONS, with the quality card first where it can be shown and else among the other
    parts that need the real test split, so a public page opens with what it holds."""
    if real_test and a.evaluation is not None:
        return list(SECTIONS)
    rest = [s for s in SECTIONS if s[0] != "quality"]
    at = [anchor for anchor, _ in rest].index("embedding-map")
    return [*rest[:at], SECTIONS[0], *rest[at:]]


def _test_is_private(a: RunArtifacts) -> bool:
    """The real test split is private unless the evaluation declared it public; an
    evaluation that does not say (an older metrics.json) counts as private."""
    meta = a.evaluation.metrics.get("meta", {}) if a.evaluation is not None else {}
    return (meta.get("real_test") or {}).get("private", True) is not False


def _not_private_banner(a: RunArtifacts) -> str:
    """A run whose DP noise came from its seed released nothing private: say so first."""
    noise = ((a.config or {}).get("budget") or {}).get("noise")
    if noise != "seeded_not_private":
        return ""
    return ('<p class="private"><strong>NOT PRIVATE</strong>: this run drew its DP noise from '
            "its seed (budget.noise: seeded_not_private), so the noise can be regenerated and "
            "subtracted. It is a reproduction, not a private release.</p>")


def _assumption_banner(a: RunArtifacts) -> str:
    """What the run's ε rests on beyond the ledger, as privacy.json states it."""
    if a.privacy is None or not a.privacy.assumes:
        return ""
    return (f'<p class="private"><strong>Assumption</strong>: '
            f"{html.escape(a.privacy.assumes)}.</p>")


def _version_banner(include_private: bool) -> str:
    if include_private:
        return ('<p class="private">Private version: holds diagnostics computed from private '
                "records. Not for sharing.</p>")
    return ('<p class="meta">Public version: nothing on this page is computed from private '
            "records.</p>")


def _private_only(what: str) -> str:
    return (f'<p class="missing">{html.escape(what)}: computed from private records, so left '
            "out of the public version (build the report with --private to see it)</p>")


def _run(a: RunArtifacts, include_private: bool) -> str:
    parts = []
    if a.config is not None:
        c = a.config
        backends = c.get("backends", {})
        rows = [("recipe", c.get("recipe", {}).get("name", "n/a")),
                ("recipe params", json.dumps(c.get("recipe", {}).get("params", {}))),
                ("budget ε", _num(c.get("budget", {}).get("epsilon"))),
                ("generator", _generator(c)),
                ("embedder", _backend(backends.get("embedder", {}))),
                ("seed", _num(c.get("seed")))]
        parts.append(_table(["setting", "value"], rows))
    else:
        parts.append(_missing("config", a))
    if a.usage is not None:
        sections = {backend: counters for backend, counters in a.usage.items()
                    if isinstance(counters, dict)}
        shown = {b: c for b, c in sections.items() if include_private or b in PUBLIC_USAGE}
        rows = [(f"{backend} {key}", _num(value)) for backend, counters in shown.items()
                for key, value in counters.items()]
        parts.append(_table(["usage", "value"], rows) if rows else
                     '<p class="meta">usage.json records no counters</p>')
        hidden = sorted(b for b in sections.keys() - shown.keys() if sections[b])
        if hidden:
            parts.append(_private_only(f"{', '.join(hidden)} counters"))
    else:
        parts.append(_missing("usage", a))
    return "".join(parts)


def _generator(config: dict) -> str:
    """The configured generator, or what samples instead for a recipe that trains its own
    (ctcl, dpft: backends.generator is unused there)."""
    recipe = config.get("recipe", {}).get("name")
    try:
        from dpsynth.methods.registry import RECIPES

        own = recipe in RECIPES and not RECIPES[recipe].uses_backend_generator
    except (ImportError, AttributeError, TypeError):
        own = False
    if own:
        params = config["recipe"].get("params", {})
        model = {None: "SmolLM2-135M-Instruct", "offline": "the shipped offline LM"}.get(
            params.get("model"), params.get("model"))
        if params.get("model") is None and params.get("lora_rank", 16):
            model += " (LoRA adapters)"
        return f"{model}, fine-tuned with DP by {recipe} (backends.generator unused)"
    return _backend(config.get("backends", {}).get("generator", {}))


def _backend(cfg: dict) -> str:
    name = cfg.get("name", "n/a")
    return f"{name} ({cfg['model']})" if cfg.get("model") else str(name)


def _privacy_spend(a: RunArtifacts) -> str:
    p = a.privacy
    if p is None:
        return _missing("privacy", a)
    rows = [("budget ε", _num(p.budget_epsilon)), ("budget δ", _num(p.budget_delta)),
            ("spent ε (composed)", _num(p.spent_epsilon))]
    parts = [_table(["", "value"], rows), f'<p class="meta">{html.escape(p.source)}</p>']
    if p.stopped is not None:
        parts.insert(0, f'<p class="missing">Incomplete run ({html.escape(p.stopped)}): the '
                     "spend below is every release it made before it stopped; running the "
                     "same config again resumes it.</p>")
    if p.stages:
        parts.append(_table(
            ["stage", "releases", "mechanisms", "ε alone"],
            [(s.stage, _num(s.releases), ", ".join(s.mechanisms), _num(s.epsilon_alone))
             for s in p.stages]))
        finite = [(s.stage, s.epsilon_alone) for s in p.stages if s.epsilon_alone is not None]
        if finite:
            parts.append(_figure(plots.stage_spend(finite, p.spent_epsilon, p.budget_epsilon),
                                 "ε per stage alone; stages compose to the total, which is "
                                 "less than their sum"))
    return "".join(parts)


def _iterations(a: RunArtifacts) -> str:
    if not a.iterations:
        return _missing("iterations", a, "the run wrote no per-iteration metrics")
    budget = a.privacy.budget_epsilon if a.privacy is not None else None
    return _figure(plots.iteration_curves(a.iterations, budget),
                   "from metrics.jsonl: DP releases and synthetic-only statistics per iteration")


def _synthetic_set(a: RunArtifacts, real_test: bool, display: Label) -> str:
    """What the synthetic set says about itself (public), and beside it the real test
    split's side of each distribution where that split may be shown."""
    if a.synthetic is None and a.evaluation is None:
        return _missing("synthetic", a)
    figures = a.evaluation.figures if a.evaluation is not None else {}
    declared = ((a.config or {}).get("data") or {}).get("labels")
    summary = summarise(a.synthetic, declared) if a.synthetic is not None else None
    parts = []
    if summary is not None:
        parts.append(_table(["statistic", "value", "how to read it"],
                            [(n, v, _How(h)) for n, v, h in summary.rows(display)]))
    real_shares = (figures.get("labels") or {}).get("real_shares") if real_test else None
    synthetic_shares = (figures.get("labels") or {}).get("synthetic_shares")
    if summary is not None and summary.label_counts:
        synthetic_shares = {k: v / max(summary.records, 1)
                            for k, v in summary.label_counts.items()}
    if synthetic_shares:
        parts.append(_figure(
            plots.label_bars(_named(real_shares, display), _named(synthetic_shares, display)),
            "share of each label, declared labels first; the dotted line is an even split"))
    lengths = figures.get("lengths", {})
    synthetic_lengths = lengths.get("synthetic") or (summary.word_counts if summary else [])
    if synthetic_lengths:
        real_lengths = lengths.get("real_test") if real_test else None
        parts.append(_figure(plots.length_histogram(real_lengths, synthetic_lengths),
                             "words per text; dashed lines mark the means"))
    if a.evaluation is None:
        parts.append(_see_metrics("the real test split's distributions"))
    elif not real_test:
        parts.append(_private_only("the real test split's distributions"))
    return "".join(parts)


def _named(shares: dict[str, float] | None, display: Label) -> dict[str, float] | None:
    return None if shares is None else {display(k): v for k, v in shares.items()}


def _embedding_map(a: RunArtifacts, real_test: bool) -> str:
    if a.evaluation is not None and not real_test:
        return _private_only("the map, fitted on the real test split as well")
    figures = a.evaluation.figures if a.evaluation is not None else {}
    points = figures.get("embedding_map")
    if not points:
        return (_see_metrics("the map") if a.evaluation is None else
                '<p class="missing">the evaluation holds no embedding map</p>')
    return _figure(plots.embedding_map(points["real_test"], points["synthetic"],
                                       points.get("explained_variance")),
                   "PCA of sentence embeddings, fitted on both sets")


def _metrics(a: RunArtifacts, include_private: bool, real_test: bool) -> str:
    if a.evaluation is None:
        return _missing("evaluation", a)
    if not real_test:
        return _private_only("utility and fidelity, measured on the real test split")
    metrics = a.evaluation.metrics
    sections = ("utility", "fidelity") + (("reference",) if include_private else ())
    rows = [row for row in metric_rows(metrics) if row[0].split(" ")[0] in sections]
    meta = metrics.get("meta", {})
    splits = ("synthetic", "real_test") + (("real_train",) if include_private else ())
    sizes = ", ".join(f"{k.replace('_', ' ')}: {meta[k]['records']} records"
                      for k in splits if meta.get(k))
    return f'<p class="meta">{html.escape(sizes)}</p>{_metric_table(rows)}'


def _metric_table(rows: list[tuple[str, str, str]]) -> str:
    """metric_rows as a table: readable name (raw key beneath), value, how to read it (once
    for a run of rows that share it, such as the quantiles of one distribution)."""
    out, last = [], None
    for _, key, value in rows:
        how = explain(key)
        out.append((_Html(f'{html.escape(readable(key))}<br>'
                          f'<code class="key">{html.escape(key)}</code>'),
                    value, _How("" if how == last else how)))
        last = how
    return _table(["metric", "value", "how to read it"], out)


def _quality(a: RunArtifacts, include_private: bool, real_test: bool, display: Label) -> str:
    """The quality card: real-test accuracy of the classifier trained on the synthetic set,
    between the majority-class floor and, for the data owner, the real-train ceiling."""
    if a.evaluation is None:
        return _see_metrics("the quality card")
    if not real_test:
        return _private_only("the quality card (downstream accuracy on the real test split, "
                             "against the real-train reference and the majority class)")
    metrics = a.evaluation.metrics
    classification = metrics.get("utility", {}).get("classification", {})
    accuracy = classification.get("accuracy")
    if accuracy is None:
        return ('<p class="missing">the evaluation has no downstream accuracy (it needs '
                "labels on both the synthetic set and the real test split)</p>")
    floor = classification.get("majority_class_rate")
    real = (metrics.get("reference") or {}).get("real_train_classification")
    ceiling = real.get("accuracy") if real is not None and include_private else None
    bars = [("trained on the synthetic set", accuracy, plots.SYNTHETIC)]
    rows = [("trained on the synthetic set", _num(accuracy),
             _How(explain("classification.accuracy")))]
    if ceiling is not None:
        name = f"trained on the real train split ({real.get('model', 'logistic')}, private)"
        bars.append(("trained on the real train split", ceiling, plots.REAL))
        rows.append((name, _num(ceiling), _How(explain("real_train_classification.accuracy"))))
    if floor is not None:
        name = ("always answering the most common label "
                f"({display(classification.get('majority_class', '?'))})")
        bars.append(("always the most common label", floor, "#999999"))
        rows.append((name, _num(floor), _How(explain("classification.majority_class_rate"))))
    parts = [_verdict(accuracy, floor, ceiling),
             _figure(plots.quality_bars(bars, floor, ceiling),
                     "real-test accuracy of a classifier on embeddings; the dashed line is the "
                     "floor" + (", the dotted one the ceiling" if ceiling is not None else "")),
             _table(["real-test accuracy of a classifier", "accuracy", "how to read it"], rows)]
    if real is not None and ceiling is None:
        parts.append(_private_only("the reference classifier trained on the real train split"))
    elif real is None:
        parts.append('<p class="meta">pass the real train split to <code>dpsynth eval '
                     "--real-train</code> for the real-data reference (private only)</p>")
    recall = classification.get("per_class_recall")
    if recall:
        parts.append(_table(["label", "recall (trained on synthetic)"],
                            [(display(c), _num(r)) for c, r in recall.items()]))
    return "".join(parts)


def _verdict(accuracy: float, floor: float | None, ceiling: float | None) -> str:
    """One sentence on what the accuracy is worth."""
    if floor is not None and ceiling is not None and ceiling > floor:
        share = max(0.0, (accuracy - floor) / (ceiling - floor))
        text = (f"Accuracy {accuracy:.3f}: the synthetic set closes {100 * share:.0f}% of the "
                f"gap from the majority-class floor ({floor:.3f}) to the real-data ceiling "
                f"({ceiling:.3f}).")
    elif floor is not None:
        text = (f"Accuracy {accuracy:.3f}, {100 * (accuracy - floor):+.1f} points against "
                f"always answering the most common label ({floor:.3f}).")
    else:
        text = f"Accuracy {accuracy:.3f}."
    return f'<p class="verdict">{html.escape(text)}</p>'


def _privacy_diagnostics(a: RunArtifacts, include_private: bool) -> str:
    if not include_private:
        return _private_only("membership inference, nearest-private-neighbour similarity and "
                             "copies")
    private = a.evaluation.metrics.get("privacy") if a.evaluation is not None else None
    if private is None:
        return ('<p class="missing">not computed: pass the private train split to '
                "<code>dpsynth eval --real-train</code></p>")
    hist = private["nearest_private_similarity"]
    base = hist.get("real_test_baseline")
    return "".join([
        f'<p class="private">{html.escape(PRIVATE_NOTICE).capitalize()}.</p>',
        _metric_table(metric_rows({"privacy": private})),
        _figure(plots.similarity_histogram(hist["synthetic"]["bin_edges"],
                                           hist["synthetic"]["counts"],
                                           base["counts"] if base else None,
                                           private.get("copies", {}).get("near_threshold")),
                "a synthetic set that copies private records piles up near 1; compare with "
                "fresh real records"),
    ])


def _samples(a: RunArtifacts, k: int, display: Label) -> str:
    if a.synthetic is None:
        return _missing("synthetic", a)
    table = a.synthetic
    rng = np.random.default_rng(0)
    picks = np.sort(rng.choice(len(table), size=min(k, len(table)), replace=False))
    items = []
    for i in picks:
        label = (f'<span class="label">{html.escape(display(table.labels[i]))}</span>'
                 if table.labels is not None else "")
        items.append(f"<li>{label}{html.escape(table.texts[i])}</li>")
    return (f'<p class="meta">{len(picks)} of {len(table)} synthetic records, drawn at '
            f'random</p><ol class="samples">{"".join(items)}</ol>')


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption class=\"meta\">{html.escape(caption)}</figcaption></figure>"


def _table(header: list[str], rows: list[tuple]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|n/a|inf|nan")


class _Html(str):
    """A cell already escaped and marked up."""


class _How(str):
    """A cell explaining how to read its row."""


def _cell(value: object) -> str:
    text = str(value)
    if isinstance(value, _Html):
        return f"<td>{text}</td>"
    kind = (' class="how"' if isinstance(value, _How) else
            ' class="num"' if _NUMBER.fullmatch(text) else "")
    return f"<td{kind}>{html.escape(text)}</td>"


def _num(value: object) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    return str(value)


def _see_metrics(what: str) -> str:
    """Sections that need an evaluation point to the Metrics section, which says once how to
    make one."""
    return (f'<p class="missing">{html.escape(what)}: needs an evaluation against a real test '
            'split (see <a href="#metrics">Metrics</a>)</p>')


def _missing(part: str, a: RunArtifacts, default: str = "not available") -> str:
    reason = a.missing.get(part, default)
    return f'<p class="missing">{html.escape(reason)}</p>'
