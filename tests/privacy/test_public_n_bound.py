"""`data.max_units`: when N itself is sensitive, a declared public bound stands in for it
wherever the plan needs N (δ, sampling rates), and the data's own count is shown nowhere."""

import json
import math

import pandas as pd
import pytest
import yaml

from dpsynth.cli import main
from dpsynth.config import parse_config
from dpsynth.data import DataConfig, load_private
from dpsynth.errors import DataError
from dpsynth.preflight import make_plan
from tests.methods.fakes import ticket_texts

N = 83  # the data's count: an odd number to look for in the outputs
BOUND = 500


def write_data(tmp_path):
    texts, labels = ticket_texts(N)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "d.csv", index=False)
    return sorted(set(labels))


def raw_config(tmp_path, labels, recipe="pe", params=None, **data):
    return {"data": {"path": "d.csv", "label_column": "label", "labels": labels,
                     "max_units": BOUND, **data},
            "budget": {"epsilon": 2.0},
            "recipe": {"name": recipe, "params": params or {"iterations": 1, "n_output": 8}},
            "output": {"dir": str(tmp_path / "out")}}


def test_the_bound_stands_in_for_n_in_delta_and_sampling_rates(tmp_path):
    labels = write_data(tmp_path)
    plan = make_plan(parse_config(raw_config(tmp_path, labels), base_dir=tmp_path))
    assert plan.data.n_units == BOUND
    assert plan.delta == pytest.approx(1 / (BOUND * math.log(BOUND)))
    ctcl = make_plan(parse_config(raw_config(tmp_path, labels, "dpft", {"batch_size": 50}),
                                  base_dir=tmp_path))
    assert ctcl.budget.stage("training").spec.sampling_rate == pytest.approx(50 / BOUND)


def test_a_set_above_its_bound_is_refused_before_anything(tmp_path):
    labels = write_data(tmp_path)
    spec = DataConfig(path=tmp_path / "d.csv", label_column="label", labels=labels,
                      max_units=N - 1)
    with pytest.raises(DataError, match=r"d.csv: .*more privacy units than .*max_units=82"):
        load_private(spec)
    assert load_private(spec.model_copy(update={"max_units": N})).n_units == N


def test_with_a_bound_the_count_appears_in_no_output(tmp_path, capsys):
    labels = write_data(tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw_config(tmp_path, labels)))
    main(["plan", str(tmp_path / "run.yaml")])
    shown = capsys.readouterr()
    assert "N ≤ 500 (data.max_units)" in shown.out
    for text in (shown.out, shown.err):
        assert f"N = {N}" not in text and f"{N} privacy units" not in text


def test_a_run_with_a_bound_states_it_as_the_public_fact(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="dpsynth")
    from dpsynth.run import run
    from tests.methods.fakes import HashEmbedder, RecordingGenerator

    labels = write_data(tmp_path)
    outputs = run(parse_config(raw_config(tmp_path, labels), base_dir=tmp_path),
                  embedder=HashEmbedder(), generator=RecordingGenerator())
    privacy = json.loads(outputs.privacy.read_text())
    assert "max_units = 500" in privacy["public_facts"]["units"]
    assert privacy["budget"]["delta"] == pytest.approx(1 / (BOUND * math.log(BOUND)))
    assert "N ≤ 500 (data.max_units) privacy units" in caplog.text
    assert f"{N} privacy units" not in caplog.text


def test_under_a_bound_dp_training_averages_over_the_public_batch_size(tmp_path, request,
                                                                        monkeypatch):
    """The divisor of every DP-Adam update is q·B, the same for N and N + 1 units."""
    pytest.importorskip("opacus")
    from dpsynth.private.training import dp_training
    from dpsynth.run import run
    from tests.methods.fakes import RecordingGenerator
    from tests.methods.test_unseeded import tiny_stand_ins
    from tests.tiny_lm import one_torch_thread

    seen = []
    original = dp_training.expected_batch_size
    def recorded(loader, config):
        seen.append((loader.sample_rate, original(loader, config)))
        return seen[-1][1]

    monkeypatch.setattr(dp_training, "expected_batch_size", recorded)
    params, embedder = tiny_stand_ins("dpft", tmp_path, request.getfixturevalue)
    params |= {"batch_size": 40, "steps": 1}
    for n in (N, N + 1):
        texts, labels = ticket_texts(n)
        pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "d.csv", index=False)
        raw = raw_config(tmp_path, sorted(set(labels)), "dpft", params)
        raw["output"]["dir"] = str(tmp_path / f"out-{n}")
        with one_torch_thread():
            run(parse_config(raw, base_dir=tmp_path), embedder=embedder,
                generator=RecordingGenerator())
    # the worst-chunk trial before the first release takes its one chunk at rate 1
    assert [divisor for rate, divisor in seen if rate < 1] == [40, 40]
    assert len(seen) == 4
