"""What the report says about quality: the synthetic set's own statistics (public), the
quality card (private), readable metric names and reference lines."""

import html
import json
import re

import pytest

from dpsynth.evaluate.result import metric_rows
from dpsynth.evaluate.tables import TextTable
from dpsynth.report import write_report
from dpsynth.report.names import explain, readable
from dpsynth.report.synthetic import label_display, summarise


def _section(page: str, anchor: str) -> str:
    start = page.index(f'<section id="{anchor}">')
    return page[start:page.index("</section>", start)]


def _anchors(page: str) -> list[str]:
    return re.findall(r'<section id="([a-z-]+)">', page)


def _declare(run_dir, labels, names=None) -> None:
    config = json.loads((run_dir / "config.json").read_text())
    config["data"] = {"labels": labels, "label_names": names}
    (run_dir / "config.json").write_text(json.dumps(config))


def test_repeats_fold_case_and_spacing_and_absent_labels_are_named():
    table = TextTable(["Hello  there", "hello there", "HELLO THERE ", "other text"],
                      ["b", "b", "b", "x"], "synthetic")
    summary = summarise(table, ["a", "b"])
    assert summary.distinct == 2 and summary.repeat_rate == 0.5
    assert summary.label_counts == {"a": 0, "b": 3, "x": 1}  # declared first, then the rest
    rows = {name: (value, how) for name, value, how in summary.rows(str.upper)}
    assert rows["Exact repeats"][0] == "50.0% (2)"
    assert rows["Labels present"][0] == "2 of 3"
    assert "No synthetic record for: A" in rows["Labels present"][1]
    assert rows["Words per text"][0] == "mean 2.0, median 2, range 2–2"


def test_declared_label_names_are_shown():
    display = label_display({"data": {"label_names": {"0": "everyday post"}}})
    assert display("0") == "0 (everyday post)"
    assert display("1") == "1"
    assert label_display(None)("0") == "0"


def test_public_page_shows_the_synthetic_set_with_labels_as_declared(run_dir):
    _declare(run_dir, ["billing", "delivery", "refund"], {"billing": "Billing question"})
    page = write_report(run_dir).read_text(encoding="utf-8")
    synthetic = _section(page, "synthetic-set")
    assert "Exact repeats" in synthetic and "0.0% (0)" in synthetic
    assert "Labels present" in synthetic and "2 of 3" in synthetic
    assert "No synthetic record for: refund" in synthetic
    assert "billing (Billing question)" in synthetic  # in the label chart
    assert "billing (Billing question)" in _section(page, "samples")
    assert "even split 1/3" in synthetic and "synthetic mean" in synthetic
    assert "real test" not in "".join(re.findall(r"<svg.*?</svg>", synthetic, re.DOTALL))


def test_the_quality_card_sets_accuracy_between_floor_and_ceiling(run_dir):
    metrics_path = run_dir / "eval" / "metrics.json"
    m = json.loads(metrics_path.read_text())
    m["utility"]["classification"].update(accuracy=0.8, majority_class_rate=0.5)
    m["reference"]["real_train_classification"]["accuracy"] = 0.9
    metrics_path.write_text(json.dumps(m))
    private = write_report(run_dir, include_private=True).read_text(encoding="utf-8")
    card = _section(private, "quality")
    assert "closes 75% of the gap" in card  # (0.8 - 0.5) / (0.9 - 0.5)
    assert "majority-class rate 0.5 (floor)" in card
    assert "real-train reference 0.9 (ceiling)" in card
    assert card.count("<svg") == 1
    assert _anchors(private)[0] == "quality"  # the data owner reads it first


def test_an_accuracy_under_the_floor_closes_none_of_the_gap():
    from dpsynth.report.html import _verdict

    assert "closes 0% of the gap" in _verdict(0.4, 0.5, 0.9)


def test_the_public_page_opens_with_the_synthetic_set_not_a_withheld_card(run_dir):
    public = write_report(run_dir).read_text(encoding="utf-8")
    assert _anchors(public)[:2] == ["synthetic-set", "samples"]
    card = _section(public, "quality")
    assert "left out of the public version" in card and "<svg" not in card


def test_a_public_test_split_gives_a_card_without_the_ceiling(run_dir):
    metrics_path = run_dir / "eval" / "metrics.json"
    m = json.loads(metrics_path.read_text())
    m["meta"]["real_test"]["private"] = False
    m["utility"]["classification"].update(accuracy=0.75, majority_class_rate=0.5)
    metrics_path.write_text(json.dumps(m))
    card = _section(write_report(run_dir).read_text(encoding="utf-8"), "quality")
    assert "+25.0 points against always answering the most common label" in card
    assert "(ceiling)" not in card and "majority-class rate 0.5 (floor)" in card


def test_metrics_have_readable_names_and_each_one_an_explanation(run_dir):
    m = json.loads((run_dir / "eval" / "metrics.json").read_text())
    keys = [key for _, key, _ in metric_rows(m)]
    assert "classification.majority_class_rate" in keys
    assert [k for k in keys if not explain(k)] == []
    page = write_report(run_dir, include_private=True).read_text(encoding="utf-8")
    metrics = _section(page, "metrics")
    assert "Majority-class rate" in metrics
    assert html.escape(explain("frechet_distance")) in metrics


@pytest.mark.parametrize(("key", "name"), [
    ("classification.majority_class_rate", "Majority-class rate"),
    ("nearest_private_similarity.synthetic.p90", "Nearest-private similarity, synthetic (p90)"),
    ("some_new.metric_key", "Some new, metric key"),
])
def test_readable_names(key, name):
    assert readable(key) == name


def test_the_spend_curve_is_drawn_against_the_budget(run_dir):
    lines = [json.dumps({"iteration": i, "epsilon_spent": 1.0 + i}) for i in range(3)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    iterations = _section(write_report(run_dir).read_text(encoding="utf-8"), "iterations")
    assert "ε spent so far" in iterations and "budget ε = 4" in iterations


def test_the_similarity_histogram_marks_the_near_copy_threshold(run_dir):
    page = write_report(run_dir, include_private=True).read_text(encoding="utf-8")
    assert "near-copy threshold 0.95" in _section(page, "privacy-diagnostics")
