"""The canary benchmark's power figures: the random scorer's AUC band and DP's AUC bound."""

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth.evaluate.canaries import make_canaries
from dpsynth.evaluate.privacy import membership_auc

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "canary_exposure.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("canary_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_scorers_stay_within_the_band_95_percent_of_the_time(bench):
    k, rng = 20, np.random.default_rng(0)
    aucs = np.array([membership_auc(rng.normal(size=k), rng.normal(size=k))
                     for _ in range(2000)])
    inside = np.mean(np.abs(aucs - 0.5) <= bench.random_auc_halfwidth(k))
    assert inside == pytest.approx(0.95, abs=0.015)


def test_randomized_response_meets_the_dp_auc_bound(bench):
    """Randomized response at ε is the most revealing ε-DP release: its AUC is the bound."""
    eps, n, rng = 1.0, 200_000, np.random.default_rng(0)
    keep = np.exp(eps) / (1 + np.exp(eps))
    planted = (rng.random(n) < keep).astype(float)
    reference = (rng.random(n) >= keep).astype(float)
    assert membership_auc(planted, reference) == pytest.approx(bench.dp_auc_bound(eps),
                                                               abs=0.005)
    assert bench.dp_auc_bound(0.0) == 0.5
    assert bench.dp_auc_bound(bench.parse_epsilon("none")) == 1.0


def test_each_copy_of_a_canary_gets_its_own_user(bench, tmp_path):
    canaries = make_canaries(2, seed=0)
    path = tmp_path / "planted.csv"
    pd.DataFrame({"text": ["hello", *canaries.planted, canaries.planted[0]],
                  "user": ["u1", "c0", "c1", "c0"]}).to_csv(path, index=False)
    bench._one_user_per_copy(path, "text", "user", canaries)
    users = pd.read_csv(path)["user"].tolist()
    assert users[0] == "u1" and len(set(users[1:])) == 3


def test_a_copy_of_the_input_is_caught_by_the_test(bench, tmp_path):
    """The control row: the planted file scored as the output shows every canary."""
    texts = [f"my order {i} arrived late and the box was damaged" for i in range(30)]
    pd.DataFrame({"text": texts, "label": ["a", "b"] * 15}).to_csv(tmp_path / "d.csv",
                                                                     index=False)
    config = {"data": {"path": "d.csv", "label_column": "label", "labels": ["a", "b"]}}
    args = argparse.Namespace(k=5, seed=0)
    row = bench._copy_control(config, tmp_path / "c.yaml", args)
    assert (row["auc"], row["verbatim"], row["private records"]) == (1.0, 5, 35)


def test_paths_beside_the_config_still_resolve_from_the_temporary_folder(bench, tmp_path):
    """The planted run's config is written elsewhere: a pool, fit texts, a decoder and the
    held-out split named relative to the original config are made absolute."""
    for name in ("pool.txt", "fit.txt", "head", "held.csv"):
        (tmp_path / name).write_text("x")
    config = {"backends": {"generator": {"name": "pool", "path": "pool.txt",
                                         "embedder": {"name": "tfidf", "fit_texts": "fit.txt"}},
                           "embedder": {"name": "minilm"}},
              "recipe": {"name": "eda", "params": {"decoder": "head", "model": "gpt2"}},
              "held_out": {"path": "held.csv"}, "data": {"path": "d.csv"}}
    bench._absolute_paths(config, tmp_path)
    generator = config["backends"]["generator"]
    assert generator["path"] == str(tmp_path / "pool.txt")
    assert generator["embedder"]["fit_texts"] == str(tmp_path / "fit.txt")
    assert config["recipe"]["params"] == {"decoder": str(tmp_path / "head"), "model": "gpt2"}
    assert config["held_out"]["path"] == str(tmp_path / "held.csv")
    assert config["data"]["path"] == "d.csv"  # data is planted in a copy, not resolved here


@pytest.mark.slow
def test_a_cell_plants_runs_and_scores_the_bundled_example(bench, tmp_path):
    from dpsynth.examples import EXAMPLE_CONFIG

    assert bench.main([str(EXAMPLE_CONFIG), "--epsilons", "4", "--repeats", "1", "--k", "5",
                       "--out", str(tmp_path)]) == 0
    rows = json.loads(next(tmp_path.glob("canary-exposure-*.json")).read_text())
    cell = rows[1]
    assert "note" not in cell, cell.get("note")
    assert cell["synthetic"] == 100 and 0 <= cell["auc"] <= 1
    assert cell["verbatim"] == 0  # a pool's texts are public: no canary comes back verbatim
