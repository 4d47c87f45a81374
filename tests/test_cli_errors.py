"""Bad input a new user meets: each is exit 2 and one line naming the file (and the row and
field, or the line and column) — never a traceback."""

import pytest
import yaml

from dpsynth.cli import main


def run_cli(*argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    return info.value.code


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


def write_config(tmp_path, *, data=None, recipe=None, budget=None, output=None, rows=None):
    rows = rows or [("the parcel is late", "shipping"), ("refund my card", "billing")] * 4
    (tmp_path / "d.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    config = {"data": {"path": "d.csv", "label_column": "label",
                       "labels": sorted({y for _, y in rows}), **(data or {})},
              "budget": budget or {"epsilon": 2.0},
              "recipe": recipe or {"name": "pe", "params": {"iterations": 1}},
              "output": {"dir": str(output or tmp_path / "out")}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("where", ["a_file", "under_a_file", "proc"])
def test_an_output_folder_that_cannot_be_one_is_exit_2_in_one_line(tmp_path, capsys, where):
    (tmp_path / "taken").write_text("a file, not a folder")
    folder = {"a_file": tmp_path / "taken", "under_a_file": tmp_path / "taken" / "run",
              "proc": "/proc/dpsynth-cannot-be-here"}[where]
    config = write_config(tmp_path)
    assert run_cli("run", str(config), "--output", str(folder)) == 2
    line = one_line_error(capsys)
    assert f"output.dir {folder}:" in line
    assert (tmp_path / "taken").read_text() == "a file, not a folder"


def test_an_undeclared_label_names_file_row_and_field(tmp_path, capsys):
    rows = [("the parcel is late", "shipping"), ("refund my card", "billing")] * 3
    rows.insert(3, ("my wifi drops", "technical"))
    config = write_config(tmp_path, data={"labels": ["billing", "shipping"]}, rows=rows)
    assert run_cli("plan", str(config)) == 2
    line = one_line_error(capsys)
    assert "d.csv, row 4, field 'label': the label is not one of data.labels" in line
    assert "technical" not in line  # a label column set to a text column: a private text


def test_labelled_data_without_its_label_set_is_one_line_shown_as_written(tmp_path, capsys):
    """The message's `[negative, positive]` is text, not console markup to swallow."""
    config = write_config(tmp_path)
    raw = yaml.safe_load(config.read_text())
    del raw["data"]["labels"]
    config.write_text(yaml.safe_dump(raw))
    assert run_cli("plan", str(config)) == 2
    line = one_line_error(capsys)
    assert "data.labels: declare the label set column 'label' holds (for example labels: " \
           "[negative, positive])" in line


def test_an_unknown_recipe_param_names_the_config_before_the_data_is_read(tmp_path, capsys):
    config = write_config(tmp_path, recipe={"name": "pe", "params": {"iteratons": 3}})
    (tmp_path / "d.csv").unlink()  # were the data read first, this would be the error
    assert run_cli("plan", str(config)) == 2
    assert one_line_error(capsys) == (f"error: {config}: recipe.params.iteratons: "
                                      "unknown key")


def test_a_bad_recipe_param_value_is_located_too(tmp_path, capsys):
    config = write_config(tmp_path, recipe={"name": "eda", "params": {"n_parents": 50,
                                                                      "domain_size": 10}})
    assert run_cli("plan", str(config)) == 2
    line = one_line_error(capsys)
    assert f"{config}: recipe.params" in line and "n_parents=50 exceeds domain_size=10" in line


def test_a_yaml_syntax_error_is_one_line_with_its_position(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("data: {path: d.csv\nbudget: {epsilon: 1}\n")
    assert run_cli("plan", str(path)) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: {path}, line 2, column 7: not valid YAML (")


@pytest.mark.parametrize("epsilon", [1e12, 0, -1, float("inf")])
def test_epsilon_out_of_range_is_a_clear_error(tmp_path, capsys, epsilon):
    config = write_config(tmp_path, budget={"epsilon": epsilon})
    assert run_cli("plan", str(config)) == 2
    line = one_line_error(capsys)
    assert f"{config}: budget.epsilon:" in line and "outside (0, 100]" in line


@pytest.mark.parametrize("seed", ["5000000000", "-1"])
def test_a_command_line_seed_outside_31_bits_is_refused(tmp_path, capsys, seed):
    """The config's seed is checked by its model; --seed bypassed it, and scikit-learn
    refuses a seed of 2^32 or more half way through a kd_tutor run."""
    assert run_cli("plan", str(write_config(tmp_path)), "--seed", seed) == 2
    assert "--seed" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--seed", "-1"], ["--seed", "5000000000"],
                                    ["--next-token-steps", "0"]])
def test_eval_refuses_a_seed_or_step_count_out_of_range(tmp_path, capsys, option):
    (tmp_path / "s.csv").write_text("text,label\nthe parcel is late,shipping\n")
    code = run_cli("eval", "--synthetic", str(tmp_path / "s.csv"), "--real-test",
                   str(tmp_path / "s.csv"), *option)
    err = capsys.readouterr().err
    assert code == 2 and option[0] in err and "Traceback" not in err
    assert not (tmp_path / "eval").exists()


def test_eval_refuses_label_sets_with_nothing_in_common(tmp_path, capsys):
    """Names on one side and codes on the other would score 0 and say nothing; the test
    split's labels are private, so only the synthetic set's are named."""
    (tmp_path / "s.csv").write_text("text,label\nthe parcel is late,shipping\nrefund,billing\n")
    (tmp_path / "t.csv").write_text("text,label\nmy parcel,1\nmy refund,0\n")
    assert run_cli("eval", "--synthetic", str(tmp_path / "s.csv"), "--real-test",
                   str(tmp_path / "t.csv"), "--no-next-token", "--no-mauve") == 2
    line = one_line_error(capsys)
    assert "none of its labels (billing, shipping)" in line and "t.csv" in line
    assert "'1'" not in line and "(0" not in line


def test_declared_labels_may_be_numbers(tmp_path, capsys):
    rows = [("the parcel is late", 1), ("refund my card", 0)] * 4
    config = write_config(tmp_path, data={"labels": [0, 1]}, rows=rows)
    main(["plan", str(config)])  # YAML numbers; the data's labels are read as text
    assert "│ labels        │ 0, 1 " in capsys.readouterr().out


def test_a_negative_generator_seed_is_a_config_error():
    """numpy refuses a negative seed (the pool generator's) half way through a run."""
    from dpsynth.config import parse_config
    from dpsynth.errors import ConfigError

    with pytest.raises(ConfigError, match=r"backends\.generator\.seed"):
        parse_config({"data": {"path": "d.csv"}, "budget": {"epsilon": 1.0},
                      "recipe": {"name": "pe"},
                      "backends": {"generator": {"name": "pool", "seed": -1}}})


def test_a_run_refused_by_validation_leaves_no_output_folder(tmp_path, capsys):
    rows = [("the parcel is late", "shipping"), ("   ", "billing")] * 4
    config = write_config(tmp_path, rows=rows)
    assert run_cli("run", str(config)) == 2
    assert "row 2, field 'text'" in one_line_error(capsys)
    assert not (tmp_path / "out").exists()


def test_declared_labels_are_listed_as_declared_and_config_errors_name_their_key(tmp_path,
                                                                                 capsys):
    rows = [("the parcel is late", "0"), ("refund my card", "1"), ("hello", "7")] * 3
    config = write_config(tmp_path, rows=rows, data={"labels": [0, 1]})
    assert run_cli("plan", str(config)) == 2
    line = one_line_error(capsys)
    assert "data.labels [0, 1]" in line and "'0'" not in line
    raw = yaml.safe_load(config.read_text())
    del raw["data"]["labels"]
    config.write_text(yaml.safe_dump(raw))
    assert run_cli("plan", str(config)) == 2
    line = one_line_error(capsys)
    assert "data.labels: declare the label set" in line and "top level" not in line
