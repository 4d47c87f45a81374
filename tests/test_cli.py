"""The command line: exit codes, one-line errors and help."""

import os
import re
import subprocess
import sys

import pytest
import yaml

from dpsynth.cli import main


def run_cli(*argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    return info.value.code


def write_config(tmp_path, data_path, **data):
    config = {"data": {"path": str(data_path), "label_column": "label",
                       "labels": ["account", "billing", "shipping", "technical"], **data},
              "budget": {"epsilon": 2.0}, "recipe": {"name": "dpga"},
              "output": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_plan_on_bundled_example(capsys):
    main(["plan"])
    out = capsys.readouterr().out
    assert "privacy units" in out and "N = 197 (user-level, k = 1" in out
    assert "ε = 4" in out


def test_bad_data_is_a_one_line_error_with_exit_2(tmp_path, capsys):
    (tmp_path / "d.csv").write_text("text,label\nhello,a\n,b\n")
    code = run_cli("plan", str(write_config(tmp_path, tmp_path / "d.csv")))
    err = capsys.readouterr().err
    assert code == 2
    assert "row 2, field 'text': text is empty" in err
    assert "Traceback" not in err


def test_bad_config_exit_2(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("data: {path: x.csv}\nbudget: {epsilon: 1, delta: 2}\nrecipe: {name: dpga}\n")
    assert run_cli("plan", str(path)) == 2
    assert "budget.delta" in capsys.readouterr().err


def test_unknown_option_is_a_usage_error():
    assert run_cli("plan", "--no-such-option") == 2


def test_bad_log_level(capsys):
    assert run_cli("plan", "--log-level", "loud") == 2


def test_report_of_a_missing_folder_is_bad_input(tmp_path, capsys):
    assert run_cli("report", str(tmp_path / "absent")) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_help_lists_every_command():
    result = subprocess.run([sys.executable, "-m", "dpsynth", "--help"], capture_output=True,
                            text=True, check=True)
    for command in ("run", "plan", "eval", "report"):
        assert command in result.stdout


def test_run_and_plan_help_list_the_recipes():
    from dpsynth.methods.registry import RECIPES

    for command in ("run", "plan"):
        result = subprocess.run([sys.executable, "-m", "dpsynth", command, "--help"],
                                capture_output=True, text=True, check=True)
        assert f"{', '.join(RECIPES)};" in " ".join(result.stdout.split())


def test_plan_tables_are_not_cut_outside_a_terminal():
    """Piped to a file, rich would squeeze the tables into 80 columns (`subsam…`)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "dpsynth", "plan"], capture_output=True,
                            text=True, check=True, env=env)
    assert "subsampled_gaussian" in result.stdout and "length_range_svt" in result.stdout
    assert "…" not in result.stdout
    assert any(line.endswith("(total 1,300)") for line in result.stdout.splitlines())


def test_plan_prints_public_facts_only(tmp_path, capsys):
    """Rows read, truncated, duplicated or bounded away depend on the private file: the plan
    and the log show N, k and the labels, never those counts."""
    rows = ["text,label,user"] + [f"ticket {i} {'x' * (i % 3) * 40},{'ab'[i % 2]},u{i % 7}"
                                  for i in range(40)] + ["ticket 1 ,b,u1"] * 3
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    path = write_config(tmp_path, tmp_path / "d.csv", user_column="user", max_chars=60,
                        duplicates="drop", labels=["a", "b"])
    main(["plan", str(path)])
    captured = capsys.readouterr()
    shown = re.sub(r"\d\d:\d\d:\d\d", "", captured.out + captured.err)  # the log's clock
    assert "N = 7 (user-level, k = 1" in shown
    for word in ("rows", "truncated", "duplicate", "dropped", r"\b43\b", r"\b40\b"):
        assert not re.search(word, shown), word


def test_plan_says_when_labels_are_codes(tmp_path, capsys):
    rows = ["text,label"] + [f"ticket {i},{i % 2}" for i in range(12)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    main(["plan", str(write_config(tmp_path, tmp_path / "d.csv", labels=[0, 1]))])
    shown = capsys.readouterr().out
    assert "are codes" in shown and "declare data.label_names" in shown.lower()
    main(["plan"])  # the bundled example's labels are names
    assert "are codes" not in capsys.readouterr().out
    rows = ["text,label"] + [f"ticket {i},{['ABBR', 'HUM'][i % 2]}" for i in range(12)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    main(["plan", str(write_config(tmp_path, tmp_path / "t.csv", labels=["ABBR", "HUM"]))])
    assert "the labels (ABBR, HUM) are codes" in capsys.readouterr().out  # trec's abbreviations
    main(["plan", str(write_config(tmp_path, tmp_path / "d.csv", labels=[0, 1], label_names={
        0: "everyday post", 1: "disaster report"}))])
    shown = capsys.readouterr().out
    assert "are codes" not in shown
    assert "0 (everyday post), 1 (disaster report)" in shown
    assert "text (data.document names the kind)" in shown


def test_plan_shows_the_document_kind(tmp_path, capsys):
    rows = ["text,label"] + [f"ticket {i},{'ab'[i % 2]}" for i in range(12)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    main(["plan", str(write_config(tmp_path, tmp_path / "d.csv", labels=["a", "b"],
                                   document="support ticket"))])
    assert re.search(r"document\s*│?\s*support ticket", capsys.readouterr().out)


def test_plan_warns_where_the_noise_drowns_kd_tutors_votes(tmp_path, capsys):
    rows = ["text,label"] + [f"ticket {i},{'ab'[i % 2]}" for i in range(400)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    path = write_config(tmp_path, tmp_path / "d.csv", labels=["a", "b"])
    for epsilon, warned in [(0.5, True), (8.0, False)]:
        raw = yaml.safe_load(path.read_text())
        raw["budget"]["epsilon"] = epsilon
        raw["recipe"] = {"name": "kd_tutor", "params": {"teachers": 20}}
        path.write_text(yaml.safe_dump(raw))
        main(["plan", str(path)])
        shown = " ".join(capsys.readouterr().out.split())
        assert ("half the 20 teachers' votes" in shown) == warned, epsilon


def test_config_lists_every_key_from_the_models(capsys):
    """A pip user has no docs/: `dpsynth config` carries the reference."""
    main(["config", "data"])
    shown = " ".join(capsys.readouterr().out.split())
    from dpsynth.data.config import DataConfig

    assert all(key in shown for key in DataConfig.model_fields)
    assert "max_units" in shown and "a public upper bound on N" in shown
    main(["config", "recipe.params (pe)"])
    assert "n_output" in capsys.readouterr().out
    assert run_cli("config", "nonsense") == 2
    assert "no config section starts with 'nonsense'" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["pe", "kd_tutor"])
def test_plan_shows_the_length_histogram_of_recipes_that_ask_for_lengths(tmp_path, capsys,
                                                                         recipe):
    rows = ["text,label"] + [f"ticket {i},{'ab'[i % 2]}" for i in range(40)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    path = write_config(tmp_path, tmp_path / "d.csv", labels=["a", "b"])
    raw = yaml.safe_load(path.read_text())
    raw["recipe"] = {"name": recipe}
    path.write_text(yaml.safe_dump(raw))
    main(["plan", str(path)])
    assert "length_histogram" in capsys.readouterr().out
