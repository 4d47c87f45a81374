"""A complete fake run folder: synthetic set, ledger, per-iteration metrics, evaluation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import HashingVectorizer

from dpsynth.backends.base import Embedder
from dpsynth.evaluate import EvalConfig, evaluate

WORDS = {
    "billing": ["invoice", "charge", "refund", "payment", "card", "billed", "twice", "amount"],
    "delivery": ["parcel", "courier", "shipped", "arrived", "late", "tracking", "box", "damaged"],
}


class _Hashing(Embedder):
    def __init__(self) -> None:
        self._v = HashingVectorizer(n_features=32, alternate_sign=False, norm="l2")

    @property
    def dim(self) -> int:
        return 32

    def encode(self, texts):
        return self._v.transform(list(texts)).toarray().astype(np.float32)


def _frame(n: int, seed: int, prefix: str) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = list(WORDS)[i % 2]
        words = " ".join(rng.choice(WORDS[label], size=int(rng.integers(3, 10))))
        rows.append({"text": f"{prefix} {i}: {words} <b>&", "label": label})
    return pd.DataFrame(rows)


STORED_LEDGER = {
    "format": "dpsynth.privacy-ledger/1",
    "budget": {"epsilon": 4.0, "delta": 1e-5},
    "spent": {"epsilon": 3.91, "accountant": "pld"},
    "breakdown": {
        "metadata": {"releases": 3, "mechanisms": ["laplace", "svt"], "epsilon_alone": 0.4},
        "votes": {"releases": 10, "mechanisms": ["gaussian"], "epsilon_alone": 3.7},
    },
}


@pytest.fixture
def stored_ledger() -> dict:
    return json.loads(json.dumps(STORED_LEDGER))


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _frame(40, 1, "synthetic").to_csv(run / "synthetic.csv", index=False)
    _frame(40, 2, "test").to_csv(tmp_path / "test.csv", index=False)
    _frame(40, 3, "private").to_csv(tmp_path / "train.csv", index=False)
    (run / "privacy.json").write_text(json.dumps(STORED_LEDGER))
    (run / "config.json").write_text(json.dumps({
        "recipe": {"name": "dpga", "params": {"iterations": 3}}, "budget": {"epsilon": 4.0},
        "backends": {"generator": {"name": "hf", "model": "tiny-lm"},
                     "embedder": {"name": "minilm"}}, "seed": 0}))
    (run / "usage.json").write_text(json.dumps({"generator": {"calls": 1234.0},
                                                "embedder": {}}))
    lines = [json.dumps({"iteration": i, "mean_vote": 10.0 - i, "self_similarity": 0.5 - i / 50,
                         "note": "text fields are ignored"}) for i in range(6)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    evaluate(run / "synthetic.csv", tmp_path / "test.csv", tmp_path / "train.csv",
             EvalConfig(next_token=None, mauve=False, max_samples=100, attack_records=20),
             embedder=_Hashing(), output=run / "eval")
    return run
