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
    page = write_report(run_dir).read_text(encoding="utf-8")
    for anchor, title in SECTIONS:
        body = _section(page, anchor)
        assert title in body
        assert 'class="missing"' not in body, anchor
    for anchor in ("privacy-spend", "iterations", "distributions", "embedding-map",
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


def test_public_page_leaves_private_diagnostics_out(run_dir, tmp_path):
    page = write_report(run_dir, tmp_path / "public.html",
                        include_private=False).read_text(encoding="utf-8")
    assert "left out of this page" in _section(page, "privacy-diagnostics")
    assert PRIVATE_NOTICE.capitalize() not in page


def test_private_records_never_reach_the_page(run_dir, tmp_path):
    import pandas as pd

    private = pd.read_csv(tmp_path / "train.csv")["text"].tolist()
    page = write_report(run_dir).read_text(encoding="utf-8")
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
