"""KD-Tutor specifics: the budget bounds the student's queries, more teachers make the noisy
vote agree with the clean one, and duplicates never reach two partitions."""

import numpy as np
import pytest

from dpsynth.data import PrivateDataset
from dpsynth.methods.base import RunContext
from dpsynth.methods.kd_tutor import KdTutor
from dpsynth.ops.pate import first_per_unit, noisy_argmax, partition_units, teacher_votes
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import Gaussian, Laplace
from dpsynth.privacy.noise import NoiseSource
from tests.methods.fakes import HashEmbedder, RecordingGenerator


class _Voter:
    """A teacher that says 'private' for queries whose first coordinate is positive, and is
    wrong with probability `error`."""

    def __init__(self, error: float, seed: int) -> None:
        self.error, self.rng = error, np.random.default_rng(seed)

    def predict(self, x):
        truth = (x[:, 0] > 0).astype(np.int64)
        flip = self.rng.random(len(x)) < self.error
        return np.where(flip, 1 - truth, truth)


def agreement(n_teachers: int, sigma: float = 3.0) -> float:
    queries = np.random.default_rng(0).normal(size=(400, 2))
    votes = teacher_votes([_Voter(0.3, s) for s in range(n_teachers)], queries)
    clean = (queries[:, 0] > 0).astype(np.int64)
    ledger = PrivacyLedger(1e4, 1e-6, discretization=0.1)
    noisy = noisy_argmax(votes, Gaussian(sigma, 1.0, 2 * len(queries)), ledger, NoiseSource(1))
    return float(np.mean(noisy == clean))


def test_more_teachers_agree_more_with_the_clean_vote():
    one, five, fifteen = agreement(1), agreement(5), agreement(15)
    assert one < five < fifteen
    assert fifteen > 0.85


def test_teacher_votes_count_each_teacher_once():
    votes = teacher_votes([_Voter(0.0, s) for s in range(7)], np.array([[1.0, 0], [-1.0, 0]]))
    np.testing.assert_array_equal(votes, [[0, 7], [7, 0]])


def test_repeats_within_a_unit_are_dropped_copies_across_units_kept():
    texts = ["a", "b", "a", "c", "b"]
    np.testing.assert_array_equal(first_per_unit(texts, np.array([0, 0, 0, 1, 1])),
                                  [0, 1, 3, 4])
    np.testing.assert_array_equal(first_per_unit(texts, np.arange(5)), np.arange(5))
    parts = partition_units(texts, 5, b"k" * 16)
    assert parts[0] == parts[2] and parts[1] == parts[4]


def test_partitions_do_not_move_when_a_unit_joins():
    texts = [f"unit {i}" for i in range(100)]
    before = partition_units(texts, 15, b"k" * 16)
    after = partition_units(["a newcomer", *texts], 15, b"k" * 16)[1:]
    np.testing.assert_array_equal(before, after)
    assert len(np.unique(before)) == 15


def test_the_budget_stops_the_students_labelling(tmp_path):
    from dpsynth.checkpoint import CheckpointStore

    texts = [f"private record number {i} with words" for i in range(60)]
    private = PrivateDataset(texts, labels=["x", "y"] * 30)
    recipe = KdTutor.from_config({"n_output": 10, "n_negatives": 20, "teachers": 3,
                                  "n_queries": 40, "query_batch": 8})
    ledger = PrivacyLedger(1.0, 1e-5)
    plan = recipe.budget_plan(private, ledger.epsilon, ledger.delta)
    ledger.charge("spent elsewhere", Gaussian(8.0).event)  # part of the budget is gone
    ctx = RunContext(private, ledger, NoiseSource(0), HashEmbedder(), RecordingGenerator(),
                     CheckpointStore(tmp_path), seed=0, plan=plan)
    embeddings = HashEmbedder().encode([f"candidate {i}" for i in range(80)])
    teachers = recipe._teachers(ctx, embeddings[:20])
    done, labels = recipe._query(ctx, plan, teachers, embeddings, np.arange(20, 80))
    assert 0 < len(done) < 40
    assert len(labels) == len(done)
    assert ledger.spent() <= 1.0
    assert ledger.would_spend(Gaussian(plan.stage("student_queries").noise_scale, 1.0,
                                       2).event) > 1.0


@pytest.mark.parametrize("mode", ["tutor", "uniform", "none"])
def test_label_modes_shape_the_output(tmp_path, tickets, mode):
    from dpsynth.synthesis import run
    from tests.methods.test_recipes import make_config

    outputs = run(make_config(tmp_path, tickets, "kd_tutor", label_mode=mode),
                  embedder=HashEmbedder(), generator=RecordingGenerator())
    stages = outputs.ledger.breakdown()
    assert ("tutor" in stages) == (mode == "tutor")
    if mode == "uniform":
        counts = np.unique(outputs.result.labels, return_counts=True)[1]
        assert counts.max() - counts.min() <= 1


@pytest.mark.parametrize("per_query", [Gaussian(5.0, 1.0, 2), Laplace(8.0, 1.0, 2)])
def test_a_batch_of_queries_costs_what_its_queries_cost_one_by_one(per_query):
    from dp_accounting import dp_event

    from dpsynth.ops.pate import _batch
    from dpsynth.privacy.calibration import epsilon_of

    together = epsilon_of(_batch(per_query, 10).event, 1e-5)
    apart = epsilon_of(dp_event.ComposedDpEvent([per_query.event] * 10), 1e-5)
    assert together == pytest.approx(apart, rel=1e-3)
