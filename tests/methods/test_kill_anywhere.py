"""SIGKILL at random moments, restart, repeat: the journal only grows, every release it ever
recorded stays on the ledger, the composed spend never passes the budget, and the finished
run's privacy.json holds exactly the journal's charges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth.privacy.ledger import Charge, PrivacyLedger
from tests.methods.fakes import ticket_texts
from tests.methods.test_recipes import PARAMS

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 2.0

# one process per attempt; the generator sleeps so that kills land inside the recipe too
DRIVER = """
import sys, time
from dpsynth.config import load_config
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder, RecordingGenerator

class Slow(RecordingGenerator):
    def _record(self, *items):
        super()._record(*items)
        time.sleep(0.15)

run(load_config(sys.argv[1]), embedder=HashEmbedder(), generator=Slow())
"""


def _config(tmp_path: Path, recipe: str, params: dict) -> Path:
    texts, labels = ticket_texts(120)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv", index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": sorted(set(labels))},
           "budget": {"epsilon": BUDGET}, "recipe": {"name": recipe, "params": params},
           "output": {"dir": str(tmp_path / "out")}}
    path = tmp_path / "run.json"  # JSON is YAML
    path.write_text(json.dumps(raw))
    return path


def _journal_charges(tmp_path: Path) -> list[dict]:
    path = tmp_path / "out" / "checkpoints" / "releases.jsonl"
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().split("\n"):
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:  # a line torn by the kill
            break
    return [e["charge"] for e in lines if "charge" in e]


def kill_until_finished(tmp_path: Path, recipe: str, kills: int, seed: int,
                        params: dict | None = None) -> list[list[dict]]:
    """Kill the run `kills` times, each soon after the journal reaches a random length (so
    kills land before the first checkpoint, between a charge and its answer, mid-iteration),
    then let it finish; the journal's charges after every attempt."""
    config = _config(tmp_path, recipe, params or PARAMS[recipe])
    rng = np.random.default_rng(seed)
    # this checkout's code, even where the environment installed another checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    snapshots = []
    for attempt in range(kills + 1):
        process = subprocess.Popen([sys.executable, "-c", DRIVER, str(config)], cwd=ROOT,
                                   env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        if attempt < kills:
            target = len(_journal_charges(tmp_path)) + int(rng.integers(1, 3))
            deadline = time.monotonic() + 120
            while process.poll() is None and len(_journal_charges(tmp_path)) < target \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.4))
            process.kill()
        _, err = process.communicate(timeout=300)
        snapshots.append(_journal_charges(tmp_path))
        if process.returncode == 0:
            return snapshots
        assert attempt < kills, err.decode()[-2000:]
    raise AssertionError("unreachable")


def _assert_every_release_kept(tmp_path: Path, snapshots: list[list[dict]]) -> None:
    final = snapshots[-1]
    for before in snapshots:
        assert final[: len(before)] == before  # nothing recorded was ever forgotten
    ledger = PrivacyLedger(BUDGET, json.loads((tmp_path / "out" / "privacy.json").read_text())
                           ["budget"]["delta"], charges=[Charge.from_json(c) for c in final])
    assert ledger.spent() <= BUDGET
    privacy = json.loads((tmp_path / "out" / "privacy.json").read_text())
    assert privacy["charges"] == final
    assert privacy["spent"]["epsilon"] == pytest.approx(ledger.spent())


@pytest.mark.parametrize("recipe", ["pe", pytest.param("dpga", marks=pytest.mark.slow)])
def test_killed_at_random_moments_the_spend_stays_true(tmp_path, recipe):
    snapshots = kill_until_finished(tmp_path, recipe, kills=3, seed=1)
    _assert_every_release_kept(tmp_path, snapshots)
    assert any(0 < len(s) < len(snapshots[-1]) for s in snapshots[:-1])  # killed mid-run


@pytest.mark.parametrize("seed", [2, pytest.param(3, marks=pytest.mark.slow),
                                  pytest.param(4, marks=pytest.mark.slow)])
def test_dp_decoding_killed_while_it_decodes_charges_its_tokens_once(tmp_path, seed):
    """DP decoding makes two releases: the label histogram, then one release for all texts
    (long: 40 texts here). Kills land before, between and inside them; a decoding killed
    before its answer reached the journal is replayed (its charge kept, not made again) and
    decoded afresh, since no token of it left the process."""
    params = {**PARAMS["dp_decoding"], "n_output": 40, "max_tokens": 20}
    snapshots = kill_until_finished(tmp_path, "dp_decoding", kills=3, seed=seed,
                                    params=params)
    _assert_every_release_kept(tmp_path, snapshots)
    assert [c["stage"] for c in snapshots[-1]] == ["label_histogram", "decoding"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("recipe", ["pe", "dpga", "kd_tutor", "dp_decoding"])
def test_killed_many_times_the_spend_stays_true(tmp_path, recipe, seed):
    snapshots = kill_until_finished(tmp_path, recipe, kills=10, seed=seed)
    _assert_every_release_kept(tmp_path, snapshots)


@pytest.mark.slow
@pytest.mark.parametrize("votes", ["hard", "soft"])
def test_kd_tutor_killed_many_times_the_spend_stays_true_with_either_vote(tmp_path, votes):
    snapshots = kill_until_finished(tmp_path, "kd_tutor", kills=10, seed=0,
                                    params={**PARAMS["kd_tutor"], "votes": votes})
    _assert_every_release_kept(tmp_path, snapshots)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_dp_finetuning_killed_many_times_the_spend_stays_true(tmp_path, tiny_lm, seed):
    """Kills land between DP-Adam steps and around the training states written every two
    steps (a state written but not committed is adopted on restart): each step is charged
    once, and the run still finishes inside its budget."""
    params = {"n_output": 12, "model": str(tiny_lm), "steps": 24, "batch_size": 32,
              "max_length": 32, "checkpoint_every": 2}
    snapshots = kill_until_finished(tmp_path, "dpft", kills=8, seed=seed, params=params)
    _assert_every_release_kept(tmp_path, snapshots)
    assert [c["stage"] for c in snapshots[-1]].count("training") == params["steps"]
