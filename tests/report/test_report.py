import itertools
import json
import re

import pytest

from dpsynth.evaluate import PRIVATE_NOTICE
from dpsynth.report import SECTIONS, load_run, write_report
from dpsynth.report.inputs import read_privacy

NETWORK = re.compile(r"""(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?https?:|@import""",
                     re.IGNORECASE)


def _section(page: str, anchor: str) -> str:
    start = page.index(f'<section id="{anchor}">')
    return page[start:page.index("</section>", start)]


def test_full_run_renders_every_section_with_content(run_dir):
    page = write_report(run_dir, include_private=True).read_text(encoding="utf-8")
    for anchor, title in SECTIONS:
        body = _section(page, anchor)
        assert title in body
        assert 'class="missing"' not in body, anchor
    for anchor in ("quality", "synthetic-set", "privacy-spend", "iterations", "embedding-map",
                   "privacy-diagnostics"):
        assert "<svg" in _section(page, anchor), anchor
    assert "metadata" in _section(page, "privacy-spend")
    assert "hf (tiny-lm)" in _section(page, "run") and "1234" in _section(page, "run")
    assert "classification.accuracy" in _section(page, "metrics")
    assert PRIVATE_NOTICE.capitalize() in _section(page, "privacy-diagnostics")
    assert "&lt;b&gt;&amp;" in _section(page, "samples")  # texts are escaped
    assert "<b>&" not in page


def test_page_fetches_nothing_from_a_network(run_dir):
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert not NETWORK.search(page)
    assert "<script" not in page and "<link" not in page


def test_the_page_is_public_unless_private_diagnostics_are_asked_for(run_dir):
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert "Public version" in page
    assert "left out of the public version" in _section(page, "privacy-diagnostics")
    assert PRIVATE_NOTICE.capitalize() not in page
    for anchor in ("privacy-spend", "iterations", "synthetic-set"):  # public inputs stay
        assert "<svg" in _section(page, anchor), anchor
    assert "1234" in _section(page, "run")  # generator calls see only public inputs


PLANTED = {  # distinctive values, each computed from private records in a real evaluation
    "accuracy": "0.6143", "frechet": "0.8629", "auc": "0.7317", "median": "0.9137",
    "copies": "4271", "train records": "7919", "test records": "6353",
    "embedder texts": "5807", "variance": "74% of variance", "reference": "0.5813",
    "majority": "0.4567",
}


def _plant(run_dir, test_private: bool | None) -> None:
    """Overwrite the evaluation and usage with the PLANTED values."""
    metrics_path, figures_path = run_dir / "eval" / "metrics.json", run_dir / "eval/figures.json"
    m = json.loads(metrics_path.read_text())
    m["utility"]["classification"]["accuracy"] = 0.6143
    m["utility"]["classification"]["majority_class_rate"] = 0.4567
    m["fidelity"]["frechet_distance"] = 0.8629
    m["privacy"]["membership_inference"]["distance_attack_auc"] = 0.7317
    m["privacy"]["nearest_private_similarity"]["synthetic"]["median"] = 0.9137
    m["privacy"]["copies"]["exact"] = 4271
    m["reference"]["real_train_classification"]["accuracy"] = 0.5813
    m["meta"]["real_train"]["records"] = 7919
    m["meta"]["real_test"]["records"] = 6353
    if test_private is None:
        del m["meta"]["real_test"]["private"]  # an evaluation from before the marker
    else:
        m["meta"]["real_test"]["private"] = test_private
    metrics_path.write_text(json.dumps(m))
    f = json.loads(figures_path.read_text())
    f["embedding_map"]["explained_variance"] = [0.7377, 0.1212]
    figures_path.write_text(json.dumps(f))
    usage = json.loads((run_dir / "usage.json").read_text())
    usage["embedder"] = {"texts": 5807.0}
    (run_dir / "usage.json").write_text(json.dumps(usage))


def _shows(page: str, value: str) -> bool:
    """`value` on the page as a whole number, not inside a longer one (an SVG coordinate)."""
    return re.search(rf"(?<![\d.]){re.escape(value)}(?!\d)", page) is not None


def _plots(page: str) -> str:
    return "".join(re.findall(r"<svg.*?</svg>", page, re.DOTALL))


@pytest.mark.parametrize("test_private", [True, None])
def test_public_page_holds_nothing_computed_from_private_records(run_dir, test_private):
    _plant(run_dir, test_private)
    public = write_report(run_dir).read_text(encoding="utf-8")
    private = write_report(run_dir, include_private=True).read_text(encoding="utf-8")
    for name, value in PLANTED.items():
        assert not _shows(public, value), name
        assert _shows(private, value), name
    assert "real test" not in _plots(public)  # no real-test side in any plot
    assert "real test" in _plots(private)
    assert "12 of 40 synthetic records" in public  # the synthetic set is public


def test_a_public_test_split_shows_its_metrics_but_nothing_from_the_train_split(run_dir):
    _plant(run_dir, test_private=False)
    public = write_report(run_dir).read_text(encoding="utf-8")
    for name in ("accuracy", "frechet", "test records", "variance", "majority"):
        assert _shows(public, PLANTED[name]), name
    for name in ("auc", "median", "copies", "train records", "embedder texts", "reference"):
        assert not _shows(public, PLANTED[name]), name
    assert "real test" in _plots(public)


def test_private_records_never_reach_the_page(run_dir, tmp_path):
    import pandas as pd

    private = pd.read_csv(tmp_path / "train.csv")["text"].tolist()
    page = write_report(run_dir, include_private=True).read_text(encoding="utf-8")
    import html

    assert not any(html.escape(t) in page or t in page for t in private)


def test_missing_parts_degrade_to_notes(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "synthetic.csv").write_text("text\nhello there\nanother text\n")
    artifacts = load_run(bare)
    assert set(artifacts.missing) == {"privacy", "iterations", "evaluation", "config", "usage"}
    page = write_report(bare).read_text(encoding="utf-8")
    for anchor, _ in SECTIONS:
        assert f'<section id="{anchor}">' in page
    assert "no privacy.json" in _section(page, "privacy-spend")
    assert "dpsynth eval" in _section(page, "metrics")
    assert "hello there" in _section(page, "samples")


@pytest.mark.parametrize("fmt", ["tsv", "jsonl", "parquet", "hf"])
def test_the_synthetic_set_is_found_in_every_output_format(tmp_path, fmt):
    if fmt == "hf":
        pytest.importorskip("datasets")
    import pandas as pd

    from dpsynth.data import write_table

    write_table(pd.DataFrame({"text": ["hello there", "another text"], "label": ["a", "b"]}),
                tmp_path / f"synthetic.{fmt}", fmt)
    assert "synthetic" not in load_run(tmp_path).missing
    assert "hello there" in _section(write_report(tmp_path).read_text(encoding="utf-8"),
                                     "samples")


def test_stored_ledger_figures_are_read_when_no_charges_are_recorded(stored_ledger):
    spend = read_privacy(stored_ledger)
    assert (spend.budget_epsilon, spend.spent_epsilon) == (4.0, 3.91)
    assert [s.stage for s in spend.stages] == ["metadata", "votes"]
    assert spend.stages[1].mechanisms == ("gaussian",)
    assert "not recomputed" in spend.source


def test_ledger_figures_are_recomputed_from_recorded_releases():
    ledger_module = pytest.importorskip("dpsynth.privacy.ledger")
    from dp_accounting import dp_event

    ledger = ledger_module.PrivacyLedger(4.0, 1e-5)
    ledger.charge("votes", dp_event.GaussianDpEvent(5.0))
    ledger.charge("votes", dp_event.GaussianDpEvent(5.0))
    data = ledger.to_dict()
    data["spent"]["epsilon"] = 0.0  # a tampered stored total must not be believed
    spend = read_privacy(data)
    assert spend.spent_epsilon == pytest.approx(ledger.spent())
    assert spend.spent_epsilon > 0
    assert "recomputed" in spend.source


@pytest.mark.parametrize("n", [4, 5, 12, 30])
def test_label_chart_names_never_overlap(n):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dpsynth.report.plots import label_bars_figure

    names = [f"a rather long category name, number {i}" for i in range(n)]
    shares = {name: 1.0 / n for name in names}
    fig = label_bars_figure(shares, shares)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    boxes = [t.get_window_extent(renderer) for t in ax.get_yticklabels() if t.get_text()]
    assert len(boxes) == n
    for first, second in itertools.pairwise(boxes):
        assert not first.overlaps(second)
    assert all(box.x0 >= 0 for box in boxes)  # names are not cut at the figure's edge


def test_the_eval_notice_appears_once(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "synthetic.csv").write_text("text,label\nhello there,a\nanother text,b\n")
    page = write_report(bare).read_text(encoding="utf-8")
    assert page.count("dpsynth eval") == 1
    assert 'href="#metrics"' in _section(page, "synthetic-set")


def test_majority_class_and_real_train_reference(run_dir):
    _plant(run_dir, test_private=False)
    public = _section(write_report(run_dir).read_text(encoding="utf-8"), "quality")
    private = _section(write_report(run_dir, include_private=True).read_text(
        encoding="utf-8"), "quality")
    for page in (public, private):
        assert "always answering the most common label (billing)" in page
        assert _shows(page, "0.4567") and "trained on the synthetic set" in page
    assert "trained on the real train split" in private and _shows(private, "0.5813")
    assert "reference classifier trained on the real train split" in public
    # the caption names the dotted ceiling only where one is drawn (the private page)
    assert "the dotted one the ceiling" in private and "the dotted one" not in public


def test_a_recipe_that_samples_its_own_lm_is_not_reported_as_using_the_generator(run_dir):
    config = json.loads((run_dir / "config.json").read_text())
    for params, named in [({"steps": 3}, "SmolLM2-135M-Instruct (LoRA adapters)"),
                          ({"model": "offline"}, "the shipped offline LM")]:
        config["recipe"] = {"name": "dpft", "params": params}
        (run_dir / "config.json").write_text(json.dumps(config))
        run = _section(write_report(run_dir).read_text(encoding="utf-8"), "run")
        assert f"{named}, fine-tuned with DP by dpft" in run
        assert "hf (tiny-lm)" not in run
