"""`dpsynth plan --estimate-time`: a measured rate, public conditions only, no cache."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from dpsynth.backends.base import Condition
from dpsynth.backends.config import SmolLMConfig
from dpsynth.cli import main
from dpsynth.timing import Throughput, describe, measure
from tests.methods.fakes import RecordingGenerator, ticket_texts


class SlowGenerator(RecordingGenerator):
    """Takes 20 ms per output; remembers the configs it was built from."""

    built: ClassVar[list] = []

    def generate(self, conditions):
        time.sleep(0.02 * len(conditions))
        return super().generate(conditions)


@pytest.fixture
def slow(monkeypatch):
    SlowGenerator.built = []

    def build(cfg, base_dir=None):
        SlowGenerator.built.append(cfg)
        return SlowGenerator()

    monkeypatch.setattr("dpsynth.timing.build_generator", build)
    return SlowGenerator


def test_the_rate_is_measured_on_one_batch_without_the_cache(slow, tmp_path):
    cfg = SmolLMConfig(cache=tmp_path / "gen.sqlite", batch_size=16)
    rate = measure(cfg, None, Condition(label="billing", length=30))
    assert rate.batch == 16 and rate.words == 30
    assert 0.02 <= rate.seconds_per_output < 0.06
    assert slow.built[0].cache is None  # a cache hit would time the disk, not the model
    line = describe(10_000, rate)
    assert line.startswith("time estimate: about ") and "per 30-word output" in line


def test_durations_read_naturally():
    assert "about 50 s" in describe(100, Throughput(0.5, 8, 1.0, 30))
    assert "about 25 min" in describe(3_000, Throughput(0.5, 8, 1.0, 30))
    assert "about 11.4 h" in describe(82_100, Throughput(0.5, 8, 1.0, 30))


def _config(tmp_path, **generator):
    texts, labels = ticket_texts(60)
    lines = ["text,label"] + [f'"{t}",{y}' for t, y in zip(texts, labels, strict=True)]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    raw = {"data": {"path": "d.csv", "label_column": "label",
                    "labels": ["account", "billing", "shipping", "technical"]},
           "budget": {"epsilon": 2.0}, "recipe": {"name": "pe", "params": {"n_output": 50}},
           "backends": {"generator": generator}, "output": {"dir": str(tmp_path / "out")}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    return str(tmp_path / "run.yaml")


def test_plan_estimates_only_when_asked(slow, tmp_path, capsys):
    path = _config(tmp_path)
    main(["plan", path])
    assert "--estimate-time" in capsys.readouterr().out and not slow.built
    main(["plan", path, "--estimate-time"])
    out = capsys.readouterr().out
    assert "time estimate: about" in out and len(slow.built) == 1


def test_the_timed_conditions_are_public(slow, tmp_path, capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(SlowGenerator, "generate",
                        lambda self, conditions: seen.extend(conditions) or
                        ["x"] * len(conditions))
    main(["plan", _config(tmp_path), "--estimate-time"])
    assert seen and {(c.label, c.keywords, c.text, c.length) for c in seen} == {
        ("account", (), None, 30)}  # a declared label name, nothing read from a record


def test_a_dry_run_gets_no_estimate(slow, tmp_path, capsys):
    main(["plan", _config(tmp_path, name="openai", model="m", dry_run=True), "--estimate-time"])
    assert "dry run" in capsys.readouterr().out and not slow.built


def test_the_timed_label_is_asked_by_its_declared_name(slow, tmp_path, capsys, monkeypatch):
    seen = []
    monkeypatch.setattr(SlowGenerator, "generate",
                        lambda self, conditions: seen.extend(conditions) or
                        ["x"] * len(conditions))
    raw = yaml.safe_load(Path(_config(tmp_path)).read_text())
    raw["data"]["label_names"] = {"account": "a question about an account"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    main(["plan", str(tmp_path / "run.yaml"), "--estimate-time"])
    assert {c.label for c in seen} == {"a question about an account"}


def test_the_timed_condition_asks_for_the_kind_of_document(slow, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(SlowGenerator, "generate",
                        lambda self, conditions: seen.extend(conditions) or
                        ["x"] * len(conditions))
    raw = yaml.safe_load(Path(_config(tmp_path)).read_text())
    raw["data"]["document"] = "support ticket"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    main(["plan", str(tmp_path / "run.yaml"), "--estimate-time"])
    assert seen and {(c.label, c.text) for c in seen} == {("account", "support ticket")}


def test_recipes_that_sample_their_own_lm_time_nothing(slow, tmp_path, capsys):
    raw = yaml.safe_load(Path(_config(tmp_path)).read_text())
    raw["recipe"] = {"name": "dpft", "params": {"steps": 2}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    main(["plan", str(tmp_path / "run.yaml"), "--estimate-time"])
    out = capsys.readouterr().out
    assert "time estimate: none; dpft's time is its DP training" in out and not slow.built
    assert "backends.generator is not used" in out
    import torch

    where = "cuda" if torch.cuda.is_available() else "cpu"  # auto, book-keeping clipping
    assert f"(recipe.params.model) on {where};" in " ".join(out.split())
