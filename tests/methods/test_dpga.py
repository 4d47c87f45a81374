"""DPGA end to end on a small labelled set with local fake backends."""

import json

import pandas as pd
import pytest

from dpsynth.config import parse_config
from dpsynth.runner import run
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator

PARAMS = {"iterations": 3, "n_init": 40, "n_elite": 12, "n_rewrite": 8, "n_fill": 8,
          "n_crossover": 8, "n_generate": 8, "length_bins": 10, "max_words": 60,
          "keyword_probe_samples": 5}


def make_config(tmp_path, tickets, out="out", epsilon=2.0, **params):
    texts, labels = tickets
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label"},
           "budget": {"epsilon": epsilon}, "recipe": {"name": "dpga",
                                                      "params": {**PARAMS, **params}},
           "output": {"dir": str(tmp_path / out)}, "seed": 7}
    return parse_config(raw, base_dir=tmp_path)


def test_dpga_runs_and_spends_its_budget(tmp_path, tickets):
    generator = RecordingGenerator()
    outputs = run(make_config(tmp_path, tickets), embedder=HashEmbedder(),
                  generator=generator)
    synthetic = pd.read_csv(outputs.synthetic)
    assert len(synthetic) == 12
    assert set(synthetic["label"]) <= {"billing", "shipping", "technical", "account"}
    privacy = json.loads(outputs.privacy.read_text())
    assert privacy["spent"]["epsilon"] <= 2.0
    assert privacy["recomputed_epsilon"] == pytest.approx(privacy["spent"]["epsilon"])
    assert privacy["spent"]["epsilon"] > 1.9  # the plan fills the budget
    stages = privacy["breakdown"]
    assert stages["voting"]["releases"] == 3
    assert stages["length range (SVT)"]["releases"] == 2
    rows = [json.loads(line) for line in outputs.metrics.read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_no_private_text_reaches_the_generator(tmp_path, tickets):
    generator = RecordingGenerator()
    outputs = run(make_config(tmp_path, tickets), embedder=HashEmbedder(),
                  generator=generator)
    sent = "\n".join(generator.inputs)
    assert generator.calls > 0
    for text in tickets[0]:
        assert text not in sent
    assert "zqx-canary" not in sent
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert "zqx-canary" not in path.read_text(errors="ignore"), path
    assert CANARY not in outputs.result.texts


class _Crash(RuntimeError):
    pass


class CrashingGenerator(RecordingGenerator):
    def __init__(self, crash_at: int) -> None:
        super().__init__()
        self.crash_at = crash_at

    def _record(self, *items):
        super()._record(*items)
        if self.calls == self.crash_at:
            raise _Crash


def test_kill_and_resume_gives_the_uninterrupted_output(tmp_path, tickets):
    whole = run(make_config(tmp_path, tickets, out="whole"), embedder=HashEmbedder(),
                generator=RecordingGenerator())
    calls_to_second_expansion = 4 + 1 + 4 + 2  # probes+init, expansion 1, expansion 2 part
    with pytest.raises(_Crash):
        run(make_config(tmp_path, tickets, out="resumed"), embedder=HashEmbedder(),
            generator=CrashingGenerator(calls_to_second_expansion))
    resumed = run(make_config(tmp_path, tickets, out="resumed"), embedder=HashEmbedder(),
                  generator=RecordingGenerator())
    assert resumed.result.texts == whole.result.texts
    assert resumed.result.labels == whole.result.labels
    assert resumed.ledger.to_dict()["charges"] == whole.ledger.to_dict()["charges"]


def test_unknown_param_is_a_located_error(tmp_path, tickets):
    from dpsynth.errors import ConfigError

    with pytest.raises(ConfigError, match=r"recipe\.params\.iteratons: unknown key"):
        run(make_config(tmp_path, tickets, iteratons=3), embedder=HashEmbedder(),
            generator=RecordingGenerator())
