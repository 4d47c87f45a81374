"""The utility benchmark's rows and outputs, on tiny generated data with fake backends."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth.backends import factory
from dpsynth.backends.base import Generator

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "utility.py"


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("utility_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class LabelEcho(Generator):
    """Writes a text about its condition's label: a stand-in for a generator."""

    def generate(self, conditions):
        return [f"a short text about {c.label} number {i}" for i, c in enumerate(conditions)]

    def rewrite(self, texts, conditions, strength=0.5):
        raise NotImplementedError

    def fill(self, masked_texts, conditions):
        raise NotImplementedError

    def crossover(self, parent_groups, conditions):
        raise NotImplementedError


def _dataset(root: Path) -> None:
    words = {"sport": "match goal team league coach", "money": "bank shares profit rate stock"}
    for split, n in (("train", 60), ("test", 40)):
        rows = [{"text": f"{split} {i} " + words[lab] * (1 + i % 2), "label": lab}
                for i, lab in enumerate(["sport", "money"] * (n // 2))]
        (root / "tiny").mkdir(exist_ok=True)
        pd.DataFrame(rows).to_csv(root / "tiny" / f"{split}.csv", index=False)


def _failed_run(command, **kwargs):
    assert command[1:4] == ["-m", "dpsynth", "run"]
    return subprocess.CompletedProcess(command, 1, "", "error: generator 'offline' missing\n")


def test_rows_bounds_and_unavailable_recipe(bench, tmp_path, monkeypatch, hashing_embedder):
    _dataset(tmp_path)
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: LabelEcho())
    monkeypatch.setattr(bench.subprocess, "run", _failed_run)
    bench.main(["tiny", "--data-root", str(tmp_path), "--recipes", "dpga", "--epsilons",
                "1", "--seeds", "0,1", "--n-synthetic", "20", "--test-size", "50",
                "--no-mauve", "--out", str(tmp_path / "out")])
    table = pd.read_csv(tmp_path / "out" / "utility-tiny.csv")
    upper, lower, recipe = (table.iloc[i] for i in range(3))
    assert upper["row"].startswith("real train") and upper["seeds"] == 2
    assert upper["accuracy_mean"] > 0.9 and upper["generator_calls_mean"] == 0
    assert lower["row"].startswith("generator") and lower["generator_calls_mean"] == 20
    assert lower["calls_per_kept_mean"] == 1.0
    assert recipe["seeds"] == 0
    assert recipe["note"] == "not available: error: generator 'offline' missing"
    assert pd.isna(recipe["accuracy_mean"])
    markdown = (tmp_path / "out" / "utility-tiny.md").read_text()
    assert "± " in markdown and "not available" in markdown
    assert "most common label (" in markdown
    assert "40 real test records" in markdown  # the split's 40, not the 50 asked for


def test_the_majority_class_floor(bench):
    from dpsynth.evaluate import TextTable

    floor = bench._majority(TextTable(["x", "y", "z", "w"], ["b", "a", "b", "b"], "test"))
    assert "(b)" in floor and "accuracy 0.750" in floor


def test_lower_bound_is_not_available_without_a_generator(bench, monkeypatch):
    monkeypatch.delitem(factory.GENERATORS, "offline", raising=False)
    table = bench.TextTable(["x", "y"], ["a", "b"], "t")
    args = bench._parse(["tiny", "--generator", "offline"])
    with pytest.raises(bench.NotAvailable, match="offline"):
        bench._lower_bound(table, 4, 0, args)


@pytest.mark.slow
def test_a_recipe_row_runs_dpsynth_run_in_a_subprocess(bench, tmp_path):
    _dataset(tmp_path)
    row = bench._recipe_runner("dpga", 1.0, tmp_path / "tiny", ["money", "sport"],
                               bench._parse(["tiny"]))
    try:
        produced = row(0)
    except bench.NotAvailable as exc:  # no generator registered under this name yet
        assert "generator" in str(exc)
    else:
        assert len(produced.table) > 0


def test_recipe_figures_come_from_the_last_diagnostics_row(bench, tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"student_queries": 100, "epsilon_spent": 1.0}\n'
        '{"student_queries": 300, "epsilon_spent": 3.9, "teachers": 15}\n', encoding="utf-8")
    assert bench._reported(tmp_path) == {"student_queries": 300.0}
    assert bench._reported(tmp_path / "missing") == {}


def test_tag_names_the_result_files(bench, tmp_path, monkeypatch, hashing_embedder):
    _dataset(tmp_path)
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: LabelEcho())
    bench.main(["tiny", "--data-root", str(tmp_path), "--epsilons", "1", "--seeds", "0",
                "--n-synthetic", "20", "--test-size", "30", "--no-mauve", "--out",
                str(tmp_path / "out"), "--tag", "n20"])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "utility-tiny-n20.csv", "utility-tiny-n20.md"]


def test_a_finished_kept_run_is_scored_again_not_rerun(bench, tmp_path, monkeypatch,
                                                       hashing_embedder):
    _dataset(tmp_path)
    kept = tmp_path / "runs" / "tiny-dpga-eps1-seed0"
    kept.mkdir(parents=True)
    pd.read_csv(tmp_path / "tiny" / "train.csv").head(20).to_csv(kept / "synthetic.csv",
                                                                  index=False)
    (kept / "bench.json").write_text('{"wall_s": 123.5}')
    (kept / "usage.json").write_text('{"generator": {"outputs": 77}}')
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    monkeypatch.setattr(bench.subprocess, "run", _failed_run)  # a rerun would fail the row
    bench.main(["tiny", "--data-root", str(tmp_path), "--recipes", "dpga", "--epsilons", "1",
                "--seeds", "0", "--n-synthetic", "20", "--test-size", "30", "--no-mauve",
                "--no-lower-bound", "--out", str(tmp_path / "out"), "--keep-runs",
                str(tmp_path / "runs")])
    table = pd.read_csv(tmp_path / "out" / "utility-tiny.csv")
    assert list(table["row"]) == ["real train (upper bound)", "dpga"]
    recipe = table.iloc[1]
    assert recipe["wall_s_mean"] == 123.5 and recipe["generator_calls_mean"] == 77
    assert recipe["calls_per_kept_mean"] == 77 / 20
    assert recipe["accuracy_mean"] > 0.9


class Evolving(LabelEcho):
    """LabelEcho with every operation pe needs."""

    def rewrite(self, texts, conditions, strength=0.5):
        return [f"{text} again" for text in texts]


def _in_process_grid(bench, root, monkeypatch, embedder) -> tuple[Path, list[str]]:
    """Two pe cells run in-process; returns the result CSV and the private texts embedded."""
    _dataset(root)
    private_calls = []
    inner_private = embedder.encode_private
    monkeypatch.setattr(embedder, "encode_private",
                        lambda texts: private_calls.append(list(texts)) or inner_private(texts))
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: embedder)
    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: Evolving())
    monkeypatch.setattr(bench.subprocess, "run", _failed_run)  # a subprocess would fail the row
    bench.main(["tiny", "--data-root", str(root), "--recipes", "pe", "--epsilons", "1,4",
                "--seeds", "0,1", "--n-synthetic", "20", "--test-size", "30", "--no-mauve",
                "--no-lower-bound", "--in-process", "--recipe-params",
                '{"iterations": 2, "n_output": 20}', "--out", str(root / "out")])
    return root / "out" / "utility-tiny.csv", [text for call in private_calls for text in call]


def test_in_process_runs_embed_each_private_text_once(bench, tmp_path, monkeypatch,
                                                      hashing_embedder):
    result, embedded = _in_process_grid(bench, tmp_path, monkeypatch, hashing_embedder)
    table = pd.read_csv(result)
    assert list(table["row"]) == ["real train (upper bound)", "pe", "pe"]
    assert (table["seeds"] == 2).all() and table["accuracy_mean"].notna().all()
    assert (table.iloc[1:]["generator_calls_mean"] > 0).all()
    assert len(embedded) == len(set(embedded)) == 60  # four runs, one embedding per record


def test_grid_metrics_gathers_every_recipe_row_with_its_file(bench, tmp_path, monkeypatch,
                                                             hashing_embedder, capsys):
    result, _ = _in_process_grid(bench, tmp_path, monkeypatch, hashing_embedder)
    spec = importlib.util.spec_from_file_location("grid_metrics",
                                                  SCRIPT.with_name("grid_metrics.py"))
    grid = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grid)
    monkeypatch.setattr(sys, "argv", ["grid_metrics.py", str(result)])
    capsys.readouterr()
    grid.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| set | recipe | ε | seeds | accuracy | macro_f1")
    body = [line.strip("| ").split(" | ") for line in lines[2:]]
    assert [row[:4] for row in body] == [["tiny", "pe", "1", "2"], ["tiny", "pe", "4", "2"]]
    table = pd.read_csv(result)
    for row, (_, expected) in zip(body, table.iloc[1:].iterrows(), strict=True):
        assert row[4] == f"{expected['accuracy_mean']:.3f} ± {expected['accuracy_std']:.3f}"
        assert row[-1] == "utility-tiny.csv"


def test_every_recipe_row_is_made_at_the_benchmarks_n_unless_its_params_say(bench):
    """A recipe's own default output size is the private set's; the benchmark compares rows
    at one n."""
    assert bench._params_for("pe", '{"iterations": 1}', 150) == {"n_output": 150,
                                                                  "iterations": 1}
    assert bench._params_for("pe", '{"pe": {"n_output": 40}, "dpga": {}}', 150) == {
        "n_output": 40}
    assert bench._params_for("dpga", '{"pe": {"n_output": 40}, "dpga": {}}', 150) == {
        "n_output": 150}


def test_the_grid_file_holds_a_line_per_seed_and_a_second_invocation_reads_it_back(
        bench, tmp_path, monkeypatch, hashing_embedder, capsys):
    _dataset(tmp_path)
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: Evolving())
    grid_file = tmp_path / "grid.csv"
    argv = ["tiny", "--data-root", str(tmp_path), "--recipes", "pe", "--epsilons", "1",
            "--seeds", "0,1", "--n-synthetic", "20", "--test-size", "30", "--no-mauve",
            "--in-process", "--recipe-params", '{"iterations": 2}', "--out",
            str(tmp_path / "out"), "--grid", str(grid_file)]
    bench.main(argv)
    grid = pd.read_csv(grid_file, dtype=str, keep_default_na=False)
    assert list(grid.columns) == list(bench.Grid.COLUMNS)
    assert list(grid["recipe"]) == ["real", "real", "generator_only", "generator_only",
                                    "pe", "pe"]
    assert list(grid["seed"]) == ["0", "1"] * 3
    (majority,) = set(grid["majority"])  # the test sample's, as the result file states it
    assert set(grid["n"]) == {"20"}
    assert f"accuracy {float(majority):.3f}" in (tmp_path / "out" / "utility-tiny.md").read_text()
    pe = grid[grid["recipe"] == "pe"]
    assert set(pe["params"]) == {'{"iterations": 2, "n_output": 20}'}
    assert set(pe["generator"]) == {"offline"} and set(pe["epsilon"]) == {"1"}
    assert (grid[grid["recipe"] == "real"]["generator"] == "").all()
    first = pd.read_csv(tmp_path / "out" / "utility-tiny.csv")

    def no_generator(cfg):
        raise AssertionError("a cell in the grid was made again")

    monkeypatch.setitem(factory.GENERATORS, "offline", no_generator)
    bench.main(argv)
    assert len(pd.read_csv(grid_file)) == 6  # nothing appended twice
    again = pd.read_csv(tmp_path / "out" / "utility-tiny.csv")
    for column in ("accuracy_mean", "macro_f1_mean"):  # read back at the grid's 4 decimals
        assert np.allclose(again[column], first[column], rtol=0, atol=1e-4), column

    spec = importlib.util.spec_from_file_location("grid_metrics",
                                                  SCRIPT.with_name("grid_metrics.py"))
    metrics = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metrics)
    monkeypatch.setattr(sys, "argv", ["grid_metrics.py", "--grid", str(grid_file)])
    capsys.readouterr()
    metrics.main()
    body = [line.strip("| ").split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[1] for row in body] == ["real", "generator_only", "pe"]
    assert all(row[5] == "2" and " ± " in row[6] for row in body)


def test_label_names_reach_the_generator_and_the_runs_and_key_their_cells(
        bench, tmp_path, monkeypatch, hashing_embedder):
    """Labels that are codes get their public names in every row, as data.label_names does
    in a run config; a cell with names is another cell than one without."""
    _dataset(tmp_path)
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: LabelEcho())
    runs = _recorded_runs(bench, monkeypatch)
    names = {"money": "a text about finance", "sport": "a text about a match"}
    grid_file = tmp_path / "grid.csv"
    argv = _one_pe_cell(tmp_path, grid_file)
    bench.main([*argv, "--label-names", json.dumps(names)])
    assert runs and runs[0]["data"]["label_names"] == names
    produced = bench._lower_bound(bench.read_text_table(tmp_path / "tiny" / "train.csv"), 4,
                                  0, bench._parse([*argv, "--label-names", json.dumps(names)]))
    assert all("a text about" in text for text in produced.table.texts)
    grid = pd.read_csv(grid_file, dtype=str, keep_default_na=False)
    floor = grid[grid["recipe"] == "generator_only"]
    assert json.loads(floor["params"].iloc[0]) == {"label_names": names}
    assert (grid[grid["recipe"] == "real"]["params"] == "{}").all()
    bench.main(argv)  # without names: the floor is measured again, the real row is not
    grid = pd.read_csv(grid_file, dtype=str, keep_default_na=False)
    assert list(grid["recipe"]).count("generator_only") == 2
    assert list(grid["recipe"]).count("real") == 1


def test_the_document_kind_and_generator_options_reach_every_row_and_key_their_cells(
        bench, tmp_path, monkeypatch, hashing_embedder):
    _dataset(tmp_path)
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    asked = []

    class Recording(LabelEcho):
        def generate(self, conditions):
            asked.extend(c.text for c in conditions)
            return super().generate(conditions)

    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: Recording())
    runs = _recorded_runs(bench, monkeypatch)
    grid_file = tmp_path / "grid.csv"
    argv = [*_one_pe_cell(tmp_path, grid_file), "--document", "match report",
            "--generator-options", '{"temperature": 0.9}']
    bench.main(argv)
    assert runs and runs[0]["data"]["document"] == "match report"
    assert runs[0]["backends"]["generator"]["temperature"] == 0.9
    assert asked and set(asked) == {"match report"}  # the floor asks for the kind too
    floor = pd.read_csv(grid_file, dtype=str, keep_default_na=False)
    key = json.loads(floor[floor["recipe"] == "generator_only"]["params"].iloc[0])
    assert key == {"document": "match report", "generator_options": {"temperature": 0.9}}


def test_the_floor_at_the_train_prior_follows_its_label_shares_and_is_a_cell_of_its_own(
        bench, tmp_path, monkeypatch, hashing_embedder):
    """`--floor-labels train`: the generator-only row's labels in the train split's shares
    (the like-for-like macro-F1 reference for a recipe whose output follows them), keyed
    apart from the balanced floor."""
    _dataset(tmp_path)
    train_csv = tmp_path / "tiny" / "train.csv"
    frame = pd.read_csv(train_csv)
    frame["label"] = ["sport"] * 45 + ["money"] * 15
    frame.to_csv(train_csv, index=False)
    monkeypatch.setattr(bench, "build_embedder", lambda cfg: hashing_embedder)
    monkeypatch.setitem(factory.GENERATORS, "offline", lambda cfg: LabelEcho())
    argv = ["tiny", "--data-root", str(tmp_path), "--recipes", "", "--seeds", "0",
            "--n-synthetic", "20", "--test-size", "30", "--no-mauve", "--out",
            str(tmp_path / "out"), "--grid", str(tmp_path / "grid.csv")]
    train = bench.read_text_table(train_csv)
    prior = bench._lower_bound(train, 20, 0, bench._parse([*argv, "--floor-labels", "train"]))
    balanced = bench._lower_bound(train, 20, 0, bench._parse(argv))
    assert sorted(prior.table.labels).count("sport") == 15  # 3/4 of 20
    assert sorted(balanced.table.labels).count("sport") == 10
    bench.main([*argv, "--floor-labels", "train"])
    bench.main(argv)
    grid = pd.read_csv(tmp_path / "grid.csv", dtype=str, keep_default_na=False)
    floors = sorted(grid[grid["recipe"] == "generator_only"]["params"])
    assert floors == ["{\"floor_labels\": \"train\"}", "{}"]


def _recorded_runs(bench, monkeypatch) -> list[dict]:
    """The run configs the benchmark makes, recorded instead of run."""
    runs: list[dict] = []

    def synthesize(config, memo):
        runs.append(config)
        raise bench.NotAvailable("recorded, not run")

    monkeypatch.setattr(bench, "_synthesize", synthesize)
    return runs


def _one_pe_cell(tmp_path, grid_file) -> list[str]:
    return ["tiny", "--data-root", str(tmp_path), "--recipes", "pe", "--epsilons", "1",
            "--seeds", "0", "--n-synthetic", "20", "--test-size", "30", "--no-mauve",
            "--in-process", "--out", str(tmp_path / "out"), "--grid", str(grid_file)]
