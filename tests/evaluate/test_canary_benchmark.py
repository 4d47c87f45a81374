"""The canary benchmark's power figures: the random scorer's AUC band and DP's AUC bound."""

import argparse
import importlib.util
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
