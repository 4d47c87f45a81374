"""`dpsynth.synthesize`: the Python entry point runs the CLI's pipeline on a path or an
in-memory table, returns the synthetic set, the spend and the report, raises typed errors
that quote no private text, and writes an in-memory table nowhere."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from rich.console import Console

import dpsynth
from dpsynth.cli import main
from dpsynth.errors import ConfigError, DataError, InputError
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator, ticket_texts

PE = {"iterations": 2, "n_output": 12}
LABELS = ["account", "billing", "shipping", "technical"]


@pytest.fixture
def frame():
    texts, labels = ticket_texts(120)
    return pd.DataFrame({"text": texts, "label": labels})


def synth(data, **kwargs):
    options = {"epsilon": 2.0, "recipe": "pe", "params": PE, "labels": LABELS,
               "generator": RecordingGenerator(), "embedder": HashEmbedder(),
               "report": False, "log_level": None} | kwargs
    return dpsynth.synthesize(data, **options)


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_a_dataframe_in_gives_a_dataframe_the_spend_and_the_report(frame, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = synth(frame, report=True)
    assert isinstance(result.data, pd.DataFrame)
    assert list(result.data.columns) == ["text", "label"] and len(result.data) == 12
    assert set(result.data["label"]) <= set(LABELS)
    assert result.temporary and result.output_dir.parent == tmp_path
    assert result.report == result.output_dir / "report.html" and result.report.is_file()
    privacy = json.loads(result.files["privacy"].read_text())
    assert result.privacy["epsilon"] == pytest.approx(privacy["spent"]["epsilon"])
    assert 1.9 < result.privacy["epsilon"] <= result.privacy["epsilon_budget"] == 2.0
    assert result.privacy["private"] is True
    assert result.privacy["stages"]["voting"]["releases"] == 2
    assert "(temporary" in result.files["log"].read_text()
    assert "12 synthetic records" in repr(result) and "temporary" in repr(result)


def test_an_in_memory_frame_is_written_nowhere(frame, tmp_path, monkeypatch):
    """Only DP releases and synthetic text reach disk: no copy of the frame, in the temporary
    folder, the output folder or anywhere else under the temp root."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = synth(frame, output_dir=None, report=True)
    written = files_under(tmp_path)
    assert result.files["synthetic"] in written and len(written) > 5
    private = set(frame["text"]) - set(result.data["text"])
    for path in written:
        content = path.read_text(errors="ignore")
        assert CANARY not in content and "zqx-canary" not in content, path
        assert not any(text in content for text in private), path
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["data"]["path"] == "<DataFrame>"


def test_a_path_runs_exactly_what_dpsynth_run_runs(frame, tmp_path, monkeypatch):
    """Same data, seed and (seeded) noise through the CLI and through the API: the same
    synthetic set, the same spend."""
    frame.to_csv(tmp_path / "private.csv", index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": LABELS},
           "budget": {"epsilon": 2.0, "noise": "seeded_not_private"},
           "recipe": {"name": "pe", "params": PE},
           "output": {"dir": str(tmp_path / "cli")}, "seed": 11}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr("dpsynth.run.models.build_embedder", lambda *a, **k: HashEmbedder())
    monkeypatch.setattr("dpsynth.run.models.build_generator",
                        lambda *a, **k: RecordingGenerator())
    main(["run", str(tmp_path / "run.yaml")])
    result = dpsynth.synthesize(
        tmp_path / "private.csv", epsilon=2.0, recipe="pe", params=PE, labels=LABELS,
        seed=11, budget_options={"noise": "seeded_not_private"},
        output_dir=tmp_path / "api", report=False, log_level=None)
    assert not result.temporary and result.output_dir == tmp_path / "api"
    cli = pd.read_csv(tmp_path / "cli" / "synthetic.csv")
    pd.testing.assert_frame_equal(result.data, cli)
    assert result.privacy["private"] is False
    spent = json.loads((tmp_path / "cli" / "privacy.json").read_text())["spent"]["epsilon"]
    assert result.privacy["epsilon"] == pytest.approx(spent)


def test_a_hugging_face_dataset_in_gives_one_out(frame, tmp_path):
    datasets = pytest.importorskip("datasets")
    result = synth(datasets.Dataset.from_pandas(frame), output_dir=tmp_path / "out")
    assert isinstance(result.data, datasets.Dataset)
    assert result.data.column_names == ["text", "label"] and len(result.data) == 12
    with pytest.raises(InputError, match="DatasetDict"):
        synth(datasets.DatasetDict({"train": datasets.Dataset.from_pandas(frame)}))


def test_numeric_labels_come_back_as_numbers(frame, tmp_path):
    codes = {name: i for i, name in enumerate(LABELS)}
    numbered = frame.assign(label=frame["label"].map(codes))
    result = synth(numbered, labels=list(range(4)), output_dir=tmp_path / "declared")
    assert result.data["label"].dtype == numbered["label"].dtype
    assert set(result.data["label"]) <= set(range(4))
    with pytest.raises(ConfigError, match="data.labels: declare the label set"):
        synth(numbered, labels=None, output_dir=tmp_path / "undeclared")


def test_unlabelled_data(frame, tmp_path):
    result = synth(frame[["text"]], label=None, labels=None, output_dir=tmp_path / "out")
    assert list(result.data.columns) == ["text"] and len(result.data) == 12


def test_bad_arguments_are_config_errors_before_anything_is_written(frame, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cases = [({"params": {**PE, "n_samplez": 3}}, "recipe.params.n_samplez: unknown key"),
             ({"recipe": "nope"}, "unknown recipe 'nope'"),
             ({"epsilon": -1.0}, "budget.epsilon"),
             ({"data_options": {"max_charz": 3}}, "data.max_charz: unknown key"),
             ({"generator": {"name": "openai", "temperatur": 1}},
              "backends.generator.temperatur: unknown key")]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message) as info:
            synth(frame, **kwargs)
        assert str(info.value).startswith("dpsynth.synthesize: ")
    with pytest.raises(InputError, match="pandas DataFrame, a datasets.Dataset or a path"):
        synth(frame.to_dict())
    with pytest.raises(InputError, match="generator must be"):
        synth(frame, generator=3)
    with pytest.raises(ConfigError, match="log_level: 'loud'"):
        synth(frame, log_level="loud")
    assert list(tmp_path.iterdir()) == []


def test_bad_data_is_a_located_error_without_private_text(frame, tmp_path):
    broken = frame.copy()
    broken.loc[5, "text"] = None
    with pytest.raises(DataError) as info:
        synth(broken, output_dir=tmp_path / "a")
    assert str(info.value).startswith("<DataFrame>, row 6, field 'text': text is missing")
    unknown = frame.copy()
    unknown.loc[[3, 4], "label"] = "refunds"
    with pytest.raises(InputError, match="is not one of data.labels") as info:
        synth(unknown, output_dir=tmp_path / "b")
    assert "refunds" not in str(info.value)
    for text in frame["text"]:
        assert text not in str(info.value)
    with pytest.raises(DataError, match="missing column 'label'"):
        synth(frame[["text"]], output_dir=tmp_path / "c")
    na = frame.astype({"text": "string"})
    na.loc[2, "text"] = pd.NA
    with pytest.raises(DataError, match="row 3, field 'text': text is missing"):
        synth(na, output_dir=tmp_path / "d")


def test_logging_goes_to_run_log_and_is_put_back(frame, tmp_path, capfd):
    logger = logging.getLogger("dpsynth")
    mine = logging.NullHandler()
    logger.addHandler(mine)
    logger.setLevel(logging.WARNING)
    result = synth(frame, output_dir=tmp_path / "out", log_level=None)
    assert logger.handlers == [mine] and logger.level == logging.WARNING
    assert capfd.readouterr().err == ""
    assert "done: 12 synthetic records" in result.files["log"].read_text()
    synth(frame, output_dir=tmp_path / "loud", log_level="info")
    assert "done: 12 synthetic records" in capfd.readouterr().err
    assert logger.handlers == [mine]


def test_progress_bars_draw_in_a_notebook(monkeypatch):
    """rich draws live bars in Jupyter, whose output is no terminal: `track` must use them."""
    from dpsynth import progress

    drawn = []

    class Bars:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def add_task(self, description, total):
            drawn.append((description, total))
            return 0

        def advance(self, task, advance=1):
            drawn.append(advance)

    monkeypatch.setattr(progress, "Progress", Bars)
    monkeypatch.setattr(progress, "_console", Console(file=io.StringIO()))  # not a terminal
    assert list(progress.track(range(3), "work")) == [0, 1, 2] and drawn == []
    monkeypatch.setattr(progress._console, "is_jupyter", True)
    assert list(progress.track(range(3), "work")) == [0, 1, 2]
    assert drawn == [("work", 3), 1, 1, 1]
    drawn.clear()  # with costs, the bar counts the work
    assert list(progress.track([3, 1, 2], "work", cost=float)) == [3, 1, 2]
    assert drawn == [("work", 6.0), 3.0, 1.0, 2.0]


def test_a_pool_holding_the_frames_texts_is_refused_before_anything_is_written(frame,
                                                                               tmp_path):
    frame.to_csv(tmp_path / "private.csv", index=False)
    same_file = {"name": "pool", "path": str(tmp_path / "private.csv")}
    with pytest.raises(ConfigError, match="holds the private texts") as info:
        synth(frame, generator=same_file, output_dir=tmp_path / "out")
    assert CANARY not in str(info.value)
    assert not list(tmp_path.glob("*.npy")) and not (tmp_path / "out" / "checkpoints").exists()
    public = tmp_path / "public.txt"  # a few shared texts do not make a pool private
    public.write_text("\n".join([*frame["text"][:5], *(f"public text {i}" for i in range(50))]))
    from dpsynth.config import parse_config
    from dpsynth.preflight import make_plan

    raw = {"data": {"path": "<DataFrame>", "label_column": "label", "labels": LABELS},
           "budget": {"epsilon": 1}, "recipe": {"name": "pe"},
           "backends": {"generator": {"name": "pool", "path": str(public)}}}
    assert make_plan(parse_config(raw), frame).data.n_units == len(frame)


def test_a_copy_of_the_private_file_as_pool_is_refused_by_the_cli(frame, tmp_path, capsys):
    frame.to_csv(tmp_path / "private.csv", index=False)
    (tmp_path / "copy.txt").write_text("\n".join(frame["text"]) + "\n")
    config = {"data": {"path": "private.csv", "label_column": "label", "labels": LABELS},
              "budget": {"epsilon": 1}, "recipe": {"name": "pe"},
              "backends": {"generator": {"name": "pool", "path": "copy.txt"}},
              "output": {"dir": str(tmp_path / "out")}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as info:
        main(["plan", str(tmp_path / "run.yaml")])
    assert info.value.code == 2 and "holds the private texts" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["embedder", "generator"])
def test_a_copy_of_the_private_file_as_tfidf_fit_texts_is_refused(frame, tmp_path, capsys,
                                                                 where):
    """Fitted on private text, the TF-IDF vocabulary would make every vote depend on the whole
    private set: a copy is refused as a pool is, before anything is released."""
    frame.to_csv(tmp_path / "private.csv", index=False)
    (tmp_path / "copy.txt").write_text("\n".join(["public words"] * 3 + list(frame["text"])))
    (tmp_path / "public.txt").write_text("\n".join(f"public text {i}" for i in range(40)))
    tfidf = {"name": "tfidf", "fit_texts": "copy.txt"}
    backends = ({"embedder": tfidf} if where == "embedder" else
                {"generator": {"name": "pool", "path": "public.txt", "embedder": tfidf}})
    config = {"data": {"path": "private.csv", "label_column": "label", "labels": LABELS},
              "budget": {"epsilon": 1}, "recipe": {"name": "pe"}, "backends": backends,
              "output": {"dir": str(tmp_path / "out")}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as info:
        main(["run", str(tmp_path / "run.yaml")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "fit_texts" in err and "holds the private texts" in err
    assert CANARY not in err
    assert not (tmp_path / "out" / "privacy.json").exists()


def test_a_temporary_run_stopped_before_any_release_leaves_nothing_and_says_nothing(
        frame, tmp_path, monkeypatch, recwarn):
    """Bad data spends nothing: no warning that a spend is recorded, no folder left behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bad = frame.copy()
    bad.loc[3, "text"] = "   "
    with pytest.raises(DataError, match="row 4"):
        synth(bad)
    assert not [w for w in recwarn if "output_dir=" in str(w.message)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("dpsynth-run-")]


def test_a_stopped_temporary_run_says_where_its_releases_are(frame, tmp_path, monkeypatch):
    from tests.methods.test_recipes import CrashingGenerator

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    params = {"iterations": 3, "n_output": 12}
    with pytest.warns(UserWarning, match="output_dir=") as warned, pytest.raises(Exception) as info:
        synth(frame, generator=CrashingGenerator(3), params=params)
    note = " ".join(getattr(info.value, "__notes__", []))
    [folder] = [p for p in tmp_path.iterdir() if p.name.startswith("dpsynth-run-")]
    assert str(folder) in note and str(folder) in str(warned[0].message)
    spent = json.loads((folder / "privacy.json").read_text())
    assert spent["complete"] is False and spent["spent"]["epsilon"] > 0
    resumed = synth(frame, params=params, output_dir=folder)  # resumes: nothing spent twice
    assert resumed.privacy["epsilon"] <= 2.0 and not resumed.already_complete
    again = synth(frame, params=params, output_dir=folder)
    assert again.already_complete and again.data.equals(resumed.data)


def test_a_public_sized_step_logs_how_far_it_is_with_the_time_left(monkeypatch, caplog):
    """In run.log and a notebook's log, not only on a terminal's bar; never for a step whose
    size the private data sets."""
    from dpsynth import progress

    clock = iter(range(0, 1000, 20))  # each item takes 20 s
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(progress, "_console", Console(file=io.StringIO()))
    with caplog.at_level(logging.INFO, logger="dpsynth"):
        assert list(progress.track(range(6), "generating", log_progress=True)) == list(range(6))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "generating: 2/6 (33%), 0m40s elapsed, about 1m20s left"
    assert lines[-1] == "generating: done, 6 in 2m20s"  # the clock ticks once more
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dpsynth"):
        list(progress.track(range(6), "embedding"))
    assert not caplog.records


def test_the_time_left_follows_each_items_cost_where_items_differ_in_size(monkeypatch, caplog):
    """Generation batches sorted by length take longest last: counted in batches, the log
    promised 1m38s where 7 minutes were left (yelp, session 53)."""
    from dpsynth import progress

    costs = [1, 1, 2, 2, 4, 4, 8, 8]  # each item takes 10 s per unit of cost
    ticks = [0, *(10 * t for t in itertools.accumulate(costs)), 300]  # and the closing line
    monkeypatch.setattr(progress, "_console", Console(file=io.StringIO()))
    for cost, expected in ((costs.__getitem__, "3/8 (13%), 0m40s elapsed, about 4m20s left"),
                           (None, "3/8 (38%), 0m40s elapsed, about 1m07s left")):
        monkeypatch.setattr(progress.time, "monotonic", iter(ticks).__next__)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="dpsynth"):
            assert list(progress.track(range(8), "generating", log_progress=True,
                                       cost=cost)) == list(range(8))
        assert caplog.records[0].getMessage() == f"generating: {expected}"
    with pytest.raises(TypeError, match="sequence"):
        list(progress.track(iter(range(3)), "generating", cost=lambda i: 1))
    with pytest.raises(ValueError, match="non-negative"):
        list(progress.track(range(3), "generating", cost=lambda i: -i))

class SignalledGenerator(RecordingGenerator):
    """Gets SIGTERM while it rewrites (after the first vote) and swallows the interrupt, as
    a library callback can."""

    def rewrite(self, *args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            pass
        return super().rewrite(*args, **kwargs)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_stops_the_api_run_at_its_next_release_and_the_callers_handler_returns(
        frame, tmp_path):
    def callers(signum, stack):
        raise AssertionError("the run's own handler must be in place while it runs")

    before = signal.signal(signal.SIGTERM, callers)
    try:
        out = tmp_path / "out"
        with pytest.raises(KeyboardInterrupt):
            synth(frame, generator=SignalledGenerator(), output_dir=out)
        assert signal.getsignal(signal.SIGTERM) is callers
        spent = json.loads((out / "privacy.json").read_text())
        assert spent["complete"] is False
        assert [c["stage"] for c in spent["charges"]].count("voting") == 1
        resumed = synth(frame, output_dir=out)  # nothing charged twice
        assert signal.getsignal(signal.SIGTERM) is callers
        assert resumed.privacy["stages"]["voting"]["releases"] == PE["iterations"]
        assert synth(frame, output_dir=out).already_complete
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, before)
