"""The run's closing line: downstream accuracy on held-out records named in the config."""

import json

import pandas as pd
import pytest
from sklearn.metrics import f1_score

from dpsynth.config import parse_config
from dpsynth.errors import ConfigError
from dpsynth.evaluate.held_out import score_held_out

WORDS = {"billing": "invoice refund charge payment", "shipping": "parcel courier delivery box"}


def table(n_per_label, shift=0):
    rows = [{"text": f"{words} note{i + shift}", "label": label}
            for label, words in WORDS.items() for i in range(n_per_label)]
    return pd.DataFrame(rows)


def config(tmp_path, **extra):
    (tmp_path / "public.txt").write_text("\n".join(WORDS.values()) + "\nsomething else\n")
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": sorted(WORDS)},
           "budget": {"epsilon": 1}, "recipe": {"name": "pe"},
           "backends": {"embedder": {"name": "tfidf", "fit_texts": "public.txt",  # config-relative
                                     "dim": 4}},
           "output": {"dir": str(tmp_path / "out")}, **extra}
    return parse_config(raw, "run.yaml", base_dir=tmp_path)


def test_the_synthetic_set_is_scored_on_the_held_out_records(tmp_path):
    table(10).to_csv(tmp_path / "synthetic.csv", index=False)
    held = pd.concat([table(6, shift=100), table(3, shift=200).iloc[:3]])  # 9 billing, 6 ship
    held.to_csv(tmp_path / "held.csv", index=False)
    score = score_held_out(config(tmp_path, held_out={"path": "held.csv"}),
                           tmp_path / "synthetic.csv")
    assert score.majority == pytest.approx(9 / 15)
    assert score.accuracy == pytest.approx(1.0)  # the labels' words separate them
    assert score.n_held_out == 15
    assert score.macro_f1 == pytest.approx(1.0)
    constant = f1_score(held["label"], [held["label"].mode()[0]] * 15, average="macro")
    assert score.majority_macro_f1 == pytest.approx(constant)  # 2·0.6 / (1.6·2)
    assert "computed from that split" in score.line() and "held.csv" in score.line()
    assert "macro-F1 1.000" in score.line() and f"macro-F1 {constant:.3f}" in score.line()
    metrics = json.loads((tmp_path / "out" / "eval" / "metrics.json").read_text())
    assert metrics["meta"]["real_test"]["private"] is True


def test_the_same_files_are_scored_once(tmp_path, monkeypatch):
    """A rerun of a finished run says its score again without recomputing it; a changed
    held-out file is scored afresh."""
    from dpsynth.evaluate import held_out

    table(10).to_csv(tmp_path / "synthetic.csv", index=False)
    table(5, shift=100).to_csv(tmp_path / "held.csv", index=False)
    cfg = config(tmp_path, held_out={"path": "held.csv"})
    first = score_held_out(cfg, tmp_path / "synthetic.csv")
    calls = []
    monkeypatch.setattr(held_out, "evaluate", lambda *a, **k: calls.append(1) or 1 / 0)
    assert score_held_out(cfg, tmp_path / "synthetic.csv") == first
    assert not calls
    table(4, shift=300).to_csv(tmp_path / "held.csv", index=False)
    with pytest.raises(ZeroDivisionError):
        score_held_out(cfg, tmp_path / "synthetic.csv")
    assert calls == [1]


def test_a_useless_synthetic_set_scores_no_better_than_its_labels_allow(tmp_path):
    swapped = table(10)
    swapped["label"] = swapped["label"].map({"billing": "shipping", "shipping": "billing"})
    swapped.to_csv(tmp_path / "synthetic.csv", index=False)
    table(5, shift=100).to_csv(tmp_path / "held.csv", index=False)
    score = score_held_out(config(tmp_path, held_out={"path": "held.csv"}),
                           tmp_path / "synthetic.csv")
    assert score.accuracy == pytest.approx(0.0)


def test_held_out_must_be_other_records_with_labels(tmp_path):
    with pytest.raises(ConfigError, match="held_out.path: is data.path"):
        config(tmp_path, held_out={"path": "private.csv"})
    raw_without_labels = {"data": {"path": "private.csv"}, "budget": {"epsilon": 1},
                          "recipe": {"name": "pe"}, "held_out": {"path": "held.csv"}}
    with pytest.raises(ConfigError, match="needs data.label_column"):
        parse_config(raw_without_labels, "run.yaml", base_dir=tmp_path)


def test_held_out_records_that_are_the_private_ones_are_refused(tmp_path):
    """A link to the private file, a copy of it, or a sample of its records would make the
    closing line a training accuracy: refused before anything is released."""
    import os

    from dpsynth.preflight import make_plan

    table(10).to_csv(tmp_path / "private.csv", index=False)
    os.link(tmp_path / "private.csv", tmp_path / "linked.csv")
    with pytest.raises(ConfigError, match="held_out.path: is data.path"):
        config(tmp_path, held_out={"path": "linked.csv"})
    table(10).to_csv(tmp_path / "copy.csv", index=False)
    table(10).iloc[::4].to_csv(tmp_path / "sample.csv", index=False)
    for name in ("copy.csv", "sample.csv"):
        with pytest.raises(ConfigError, match=f"held_out.path: .*{name} holds private"):
            make_plan(config(tmp_path, held_out={"path": name}))
    table(5, shift=100).to_csv(tmp_path / "held.csv", index=False)
    assert make_plan(config(tmp_path, held_out={"path": "held.csv"})).data.n_units == 20
