"""A seed fixes public randomness only. DP noise comes from a CSPRNG unless the config says
`budget.noise: seeded_not_private`, and such a run says NOT PRIVATE in every output."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsynth
from dpsynth.cli import main
from dpsynth.data import read_table
from dpsynth.evaluate import read_text_table
from dpsynth.privacy.journal import Journal
from dpsynth.privacy.noise import NoiseSource
from dpsynth.report import write_report
from dpsynth.report.inputs import load_run
from dpsynth.run import NOT_PRIVATE_COLUMN
from tests.methods.fakes import HashEmbedder, RecordingGenerator, ticket_texts
from tests.methods.test_recipes import PARAMS


def _config(folder: Path, recipe: str, seed: int, noise: str, users: bool,
            fmt: str = "csv") -> Path:
    texts, labels = ticket_texts(80)
    frame = pd.DataFrame({"text": texts, "label": labels})
    data = {"path": str(folder / "private.csv"), "label_column": "label",
            "labels": sorted(set(labels))}
    if users:
        frame["user"] = [f"u{i % 50}" for i in range(len(frame))]
        data |= {"user_column": "user"}
    frame.to_csv(folder / "private.csv", index=False)
    params = {**PARAMS[recipe], **({"label_fraction": 0.2} if recipe == "pe" else {})}
    raw = {"data": data, "budget": {"epsilon": 2.0, "noise": noise},
           "recipe": {"name": recipe, "params": params},
           "output": {"dir": str(folder / "out"), "format": fmt}, "seed": seed}
    path = folder / "run.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.fixture
def fake_backends(monkeypatch):
    monkeypatch.setattr("dpsynth.run.models.build_embedder", lambda *a, **k: HashEmbedder())
    monkeypatch.setattr("dpsynth.run.models.build_generator", lambda *a, **k: RecordingGenerator())


def _stop_after_the_first_answer(journal: Journal, index: int, value, draws: int) -> None:
    """Ctrl-C once the run's first release is journaled."""
    _append_output(journal, index, value, draws)
    raise KeyboardInterrupt


_append_output = Journal.append_output


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recipe=st.sampled_from(sorted(PARAMS)), seed=st.integers(0, 2**31 - 1),
       noise=st.sampled_from(["cryptographic", "seeded_not_private"]), users=st.booleans(),
       fmt=st.sampled_from(["csv", "tsv", "jsonl", "parquet"]))
def test_every_output_says_not_private_exactly_when_the_noise_was_seeded(
        fake_backends, capsys, recipe, seed, noise, users, fmt):
    """Text outputs say NOT PRIVATE; the synthetic set and metrics.jsonl, which travel without
    the rest, carry a `not_private` column true in every row. A private run has neither."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = _config(folder, recipe, seed, noise, users, fmt)
        with patch.object(Journal, "append_output", _stop_after_the_first_answer):
            assert _cli(["run", str(config)]) == 130
        stopped = next(line for line in capsys.readouterr().err.splitlines()
                       if line.startswith("interrupted:"))  # not the log's lines
        assert _cli(["run", str(config)]) == 0  # resumes and finishes
        shown = capsys.readouterr().out
        out = folder / "out"
        result = dpsynth.synthesize(  # the finished run's outputs, nothing run again
            folder / "private.csv", epsilon=2.0, user="user" if users else None,
            labels=json.loads(config.read_text())["data"]["labels"], recipe=recipe,
            params=json.loads(config.read_text())["recipe"]["params"],
            budget_options={"noise": noise}, seed=seed, output_dir=out, output_format=fmt,
            report=False, log_level=None)
        assert result.already_complete
        outputs = {"interrupted message": stopped, "CLI summary": shown,
                   "privacy.json": (out / "privacy.json").read_text(),
                   "run.log": (out / "run.log").read_text(),
                   "report": write_report(out).read_text(),
                   "SynthesisResult repr": repr(result), "SynthesisResult str": str(result)}
        seeded = noise == "seeded_not_private"
        for name, text in outputs.items():
            assert (("NOT PRIVATE" in text) or ("NOT_PRIVATE" in text)) == seeded, name
        assert json.loads(outputs["privacy.json"])["private"] is not seeded
        assert repr(result).startswith("SynthesisResult(NOT PRIVATE") == seeded

        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text()
                   .splitlines()]
        rows = {"synthetic file": read_table(out / f"synthetic.{fmt}").to_dict("records"),
                "metrics.jsonl": metrics,
                "SynthesisResult.data": result.data.to_dict("records")}
        mark = "True" if seeded else "absent"  # a CSV reads back text
        for name, table in rows.items():
            assert table, name
            assert all(str(row.get(NOT_PRIVATE_COLUMN, "absent")) == mark for row in table), name

        readers = {"eval": read_text_table(out / f"synthetic.{fmt}").texts,
                   "report": load_run(out).synthetic.texts}
        for name, texts in readers.items():
            assert texts == result.data["text"].tolist(), name


def _cli(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as done:
        return done.code or 0
    return 0


def _released_label_histogram(out: Path) -> np.ndarray:
    lines = [json.loads(x) for x in (out / "checkpoints" / "releases.jsonl").read_text()
             .splitlines()]
    charges = [e["charge"]["stage"] for e in lines if "charge" in e]
    index = charges.index("label_histogram")
    answer = next(e["value"] for e in lines if e.get("output") == index)
    return np.asarray(answer["ndarray"])


@pytest.mark.parametrize("noise", ["cryptographic", "seeded_not_private"])
def test_the_seed_regenerates_the_noise_only_in_a_non_private_run(tmp_path, fake_backends,
                                                                   noise):
    """The attack of issue 15: regenerate the seeded stream, subtract it from the released
    label histogram, read off the private counts."""
    assert _cli(["run", str(_config(tmp_path, "pe", 0, noise, False))]) == 0
    released = _released_label_histogram(tmp_path / "out")
    counts = np.bincount(pd.Series(ticket_texts(80)[1]).astype("category").cat.codes,
                         minlength=4)
    privacy = json.loads((tmp_path / "out" / "privacy.json").read_text())
    scale = next(c["noise_scale"] for c in privacy["charges"] if c["stage"] == "label_histogram")
    regenerated = counts + NoiseSource(0).discrete_laplace(scale, 4)
    recovered = np.array_equal(released, regenerated)
    assert recovered == (noise == "seeded_not_private")


def test_a_remote_embedding_of_private_text_is_stated_as_an_assumption(
        fake_backends, tmp_path):
    """With `allow_remote_on_private` the one-record, one-vote argument rests on a server we
    cannot see: privacy.json and the report say so; a local embedder's run says nothing."""
    for remote in (False, True):
        folder = tmp_path / str(remote)
        folder.mkdir()
        path = _config(folder, "pe", 0, "cryptographic", users=False)
        if remote:
            raw = json.loads(path.read_text())
            raw["backends"] = {"embedder": {"name": "openai", "base_url": "http://127.0.0.1:9",
                                            "allow_remote_on_private": True}}
            path.write_text(json.dumps(raw))
        try:
            main(["run", str(path)])
        except SystemExit as done:
            assert done.code in (0, None)
        privacy = json.loads((folder / "out" / "privacy.json").read_text())
        assert ("assumes" in privacy) == remote
        assert ("Assumption" in write_report(folder / "out").read_text()) == remote
