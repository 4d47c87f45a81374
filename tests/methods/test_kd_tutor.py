"""KD-Tutor specifics: the budget bounds the student's queries, more teachers make the noisy
vote agree with the clean one, duplicates never reach two partitions, a labelled vote moves
like a binary one when a unit joins, and so does a sampled soft one (at the same key), whose
mean is the soft sum and which ranks where hard votes cannot."""

import functools
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from dpsynth.data import Access, PrivateDataset
from dpsynth.errors import DpsynthError
from dpsynth.methods.base import RunContext
from dpsynth.methods.kd_tutor import KdTutor
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import Gaussian, Laplace
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private import Private
from dpsynth.private.engine.local import LocalEngine
from dpsynth.private.engine.teachers import (
    SOFT_GRID,
    Teachers,
    draw_uniforms,
    first_per_unit,
    partition_units,
    query_digests,
    soft_vote,
    teacher_votes,
    train_classifier,
    train_on_shares,
    train_teachers,
)
from dpsynth.private.releases.pate import label_within_budget, noisy_votes
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
    noisy = noisy_votes(votes, Gaussian(sigma, 1.0, 2 * len(queries)), ledger, NoiseSource(1),
                        "student_queries")
    return float(np.mean(noisy.argmax(axis=1) == clean))


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
    private = PrivateDataset(texts, labels=["x", "y"] * 30, label_names=["x", "y"])
    recipe = KdTutor.from_config({"n_output": 10, "n_negatives": 20, "teachers": 3,
                                  "n_queries": 40, "query_batch": 8})
    ledger = PrivacyLedger(1.0, 1e-5)
    plan = recipe.budget_plan(private, ledger.epsilon, ledger.delta)
    ledger.charge("spent elsewhere", Gaussian(8.0).event)  # part of the budget is gone
    embedder = HashEmbedder()
    ctx = RunContext(Private(private, ledger, NoiseSource(0), LocalEngine(embedder)), embedder,
                     RecordingGenerator(), CheckpointStore(tmp_path), seed=0, plan=plan)
    embeddings = embedder.encode([f"candidate {i}" for i in range(80)])
    done, labels = recipe._query(ctx, plan, embeddings[:20], embeddings, np.arange(20, 80))
    assert 0 < len(done) < 40
    assert len(labels) == len(done)
    assert ledger.spent() <= 1.0
    assert ledger.would_spend(Gaussian(plan.stage("student_queries").noise_scale, 1.0,
                                       2).event) > 1.0
    with pytest.raises(DpsynthError, match="kd_tutor's teachers"):  # never embedded again
        ctx.private.embed_records()


@pytest.mark.parametrize("discriminator", ["binary", "labelled"])
@pytest.mark.parametrize("mode", ["tutor", "uniform", "none"])
def test_label_modes_shape_the_output(tmp_path, tickets, mode, discriminator):
    from dpsynth.run import run
    from tests.methods.test_recipes import make_config

    outputs = run(make_config(tmp_path, tickets, "kd_tutor", label_mode=mode,
                              discriminator=discriminator),
                  embedder=HashEmbedder(), generator=RecordingGenerator())
    stages = outputs.ledger.breakdown()
    assert ("tutor" in stages) == (mode == "tutor")
    assert len(outputs.result.texts) == 12
    assert len(set(outputs.result.texts)) == 12  # each candidate used once
    if mode == "uniform":
        counts = np.unique(outputs.result.labels, return_counts=True)[1]
        assert counts.max() - counts.min() <= 1


def _cluster(rng, centre, n):
    return [centre + 0.1 * rng.normal(size=2) for _ in range(n)]


def test_a_unit_joining_moves_one_labelled_teacher_and_two_counts_by_one():
    """Labelled teachers (public, a, b) on D and on D plus one unit of three records labelled
    b where D's a records sit: only the newcomer's teacher may vote otherwise, so each query's
    K+1 counts move in two places by one (L2 √2, L1 2: the charged Gaussian and Laplace)."""
    rng = np.random.default_rng(0)
    points = {f"private {i}": v for i, v in enumerate(
        _cluster(rng, np.array([2.0, 0.0]), 30) + _cluster(rng, np.array([0.0, 2.0]), 30))}
    labels = ["a"] * 30 + ["b"] * 30
    newcomer = {f"newcomer {i}": v for i, v in enumerate(_cluster(rng, np.array([2, 0.]), 3))}
    negatives = np.array(_cluster(rng, np.array([-2.0, -2.0]), 40))
    queries = np.vstack([_cluster(rng, np.array([2.0, 0.0]), 50), rng.normal(size=(50, 2))])
    vectors = points | newcomer

    def embed(private):
        return np.array([vectors[t] for t in private.texts(Access.LEDGERED_OP)])

    d = PrivateDataset(list(points), labels=labels, label_names=["a", "b"], units=range(60),
                       records_per_unit=3)
    d2 = PrivateDataset([*points, *newcomer], labels=labels + ["b"] * 3,
                        label_names=["a", "b"], units=[*range(60), 60, 60, 60],
                        records_per_unit=3)
    teachers = [train_teachers(data, embed, negatives, 5, b"k" * 16, 0, labelled=True)
                for data in (d, d2)]
    moved = [m for m in range(5) if not np.array_equal(teachers[0][m].predict(queries),
                                                       teachers[1][m].predict(queries))]
    assert len(moved) == 1  # the newcomer's teacher, and it did change its mind
    diff = np.abs(teacher_votes(teachers[1], queries, 3) - teacher_votes(teachers[0], queries, 3))
    assert diff.any()
    assert diff.sum(axis=1).max() == 2 and (diff.max() == 1)
    assert (diff > 0).sum(axis=1).max() == 2
    per_query = [Gaussian(5.0, 1.0, 2), Laplace(8.0, 1.0, 2)]
    assert np.linalg.norm(diff, axis=1).max() <= per_query[0].sensitivity + 1e-12
    assert diff.sum(axis=1).max() <= per_query[1].sensitivity


def _neighbouring_labelled_teachers() -> tuple[list, np.ndarray]:
    """Labelled teachers (public, a, b) on D and on D plus one unit, and queries."""
    rng = np.random.default_rng(1)
    points = {f"private {i}": v for i, v in enumerate(
        _cluster(rng, np.array([1.0, 0.0]), 20) + _cluster(rng, np.array([0.0, 1.0]), 20))}
    newcomer = {"newcomer": np.array([0.5, 0.5])}
    negatives = np.array(_cluster(rng, np.array([-1.0, -1.0]), 30))
    queries = rng.normal(size=(200, 2))
    vectors = points | newcomer

    def embed(private):
        return np.array([vectors[t] for t in private.texts(Access.LEDGERED_OP)])

    labels = ["a"] * 20 + ["b"] * 20
    d = PrivateDataset(list(points), labels=labels, label_names=["a", "b"])
    d2 = PrivateDataset([*points, *newcomer], labels=[*labels, "b"], label_names=["a", "b"])
    return [train_teachers(data, embed, negatives, 4, b"k" * 16, 0, labelled=True)
            for data in (d, d2)], queries


def test_a_unit_joining_moves_the_sampled_soft_votes_as_it_moves_hard_ones():
    """Soft votes of labelled teachers on D and on D plus one unit: the newcomer's teacher's
    probability vector moves every class on some queries (summed, as the seed's Eq. 4, its
    change spreads over three counts), but sampled at the same key each teacher casts one
    class, so per query at most two counts move, by one each: the hard-vote event."""
    teachers, queries = _neighbouring_labelled_teachers()
    one = soft_vote(teachers[0][0], queries, 3)
    assert (one >= 0).all() and np.array_equal(one.sum(axis=1), np.ones(len(queries)))
    summed = [sum(soft_vote(t, queries, 3) for t in ts) for ts in teachers]
    assert (np.count_nonzero(summed[1] - summed[0], axis=1) == 3).any()
    for key in (b"s" * 16, b"t" * 16, b"u" * 16):
        votes = [teacher_votes(t, queries, 3, soft_key=key) for t in teachers]
        for v in votes:
            assert v.dtype == np.int64 and (v.sum(axis=1) == 4).all()
        diff = votes[1] - votes[0]
        assert (np.count_nonzero(diff, axis=1) <= 2).all() and np.abs(diff).max() <= 1
        assert (diff.sum(axis=1) == 0).all()  # one vote moved from one class to another
        assert np.linalg.norm(diff, axis=1).max() <= Gaussian(5.0, 1.0, 2).sensitivity
        assert np.abs(diff).sum(axis=1).max() <= Laplace(8.0, 1.0, 2).sensitivity


def test_sampled_soft_votes_average_to_the_soft_sum():
    """Over many keys, each query's sampled counts average to the teachers' summed soft
    votes: within five standard errors (each count's variance is Σ_m p_m (1 - p_m))."""
    teachers, queries = _neighbouring_labelled_teachers()
    teachers, queries = teachers[0], queries[:20]
    probs = np.stack([soft_vote(t, queries, 3) for t in teachers])
    keys = 1000
    mean = sum(teacher_votes(teachers, queries, 3, soft_key=i.to_bytes(16, "big"))
               for i in range(keys)) / keys
    error = np.sqrt((probs * (1 - probs)).sum(axis=0) / keys)
    assert np.all(np.abs(mean - probs.sum(axis=0)) <= 5 * error + 1e-12)
    assert (error > 0).any()  # the votes did vary


def test_a_teachers_draw_is_keyed_by_its_id_and_the_query_alone():
    """The uniforms depend on the key, the teacher's global id and the query's values (any
    dtype, any copy), and nothing else."""
    queries = np.random.default_rng(0).normal(size=(5, 3))
    u = draw_uniforms(b"k" * 16, 7, query_digests(queries))
    assert ((u >= 0) & (u < 1)).all() and len(set(u.tolist())) == 5
    assert np.array_equal(u, draw_uniforms(b"k" * 16, 7, query_digests(queries.copy())))
    assert np.array_equal(draw_uniforms(b"k" * 16, 7, query_digests(queries[2:3])), u[2:3])
    assert not np.array_equal(u, draw_uniforms(b"k" * 16, 8, query_digests(queries)))
    assert not np.array_equal(u, draw_uniforms(b"j" * 16, 7, query_digests(queries)))


class _Shy:
    """A teacher whose P(private) grows with the first coordinate but stays below a half:
    it votes public on every query, hard."""

    classes_ = np.array([0, 1])

    def predict(self, x):
        return np.zeros(len(x), dtype=np.int64)

    def predict_proba(self, x):
        private = 0.4 / (1 + np.exp(-3 * x[:, 0]))
        return np.c_[1 - private, private]


@pytest.mark.parametrize("sigma", [0.5, 3.0])
def test_soft_votes_rank_candidates_that_hard_votes_all_call_public(sigma):
    """The student ranks test candidates by P(private); the truth is the first coordinate.
    Hard votes say public on every query, so the student has nothing to rank by; sampled
    soft ones carry the teachers' graded doubt, in expectation, through the same noise."""
    from types import SimpleNamespace

    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    queries, test = rng.normal(size=(100, 2)), rng.normal(size=(400, 2))
    recipe = KdTutor.from_config({"discriminator": "binary"})
    ctx = SimpleNamespace(private=PrivateDataset(["a", "b"]), seed=0)
    auc = {}
    for soft_key in (None, b"s" * 16):
        shares = label_within_budget(Teachers([_Shy()] * 20), queries,
                                     Gaussian(sigma, 1.0, 2), 50,
                                     PrivacyLedger(1e4, 1e-6), NoiseSource(0),
                                     "student_queries", soft_key=soft_key)
        proba = recipe._student(ctx, queries, shares, test)
        auc[soft_key is not None] = roc_auc_score(test[:, 0] > 0, proba[:, 1])
    assert auc[False] == 0.5  # every candidate alike
    assert auc[True] > 0.9


def test_soft_and_hard_votes_plan_the_same_release_with_either_noise():
    """A sampled soft vote moves as a hard one: the same stages, Laplace allowed."""
    data = PrivateDataset(["a", "b"], labels=["x", "y"], label_names=["x", "y"])
    for noise in ("gaussian", "laplace"):
        soft, hard = (KdTutor.from_config({"votes": votes, "noise": noise}).stages(data, 1e-6)
                      for votes in ("soft", "hard"))
        assert soft == hard and soft[-1].mechanism == noise


def test_labelled_without_labels_votes_private_or_public():
    recipe = KdTutor.from_config({"discriminator": "labelled"})
    assert recipe._classes(PrivateDataset(["a", "b"])) == 2
    labelled = PrivateDataset(["a", "b"], labels=["x", "y"], label_names=["x", "y"])
    assert recipe._classes(labelled) == 3


def test_a_k_plus_one_vote_batch_takes_the_same_charge_as_a_binary_one():
    """noisy_votes accepts K+1 counts per row under 2 × rows changed coordinates."""
    ledger = PrivacyLedger(1e4, 1e-6)
    votes = np.array([[0, 9, 1, 0, 0], [10, 0, 0, 0, 0]])
    out = noisy_votes(votes, Gaussian(0.1, 1.0, 4), ledger, NoiseSource(0), "student_queries")
    np.testing.assert_array_equal(out.argmax(axis=1), [1, 0])
    with pytest.raises(ValueError, match="changed coordinates"):
        noisy_votes(votes, Gaussian(0.1, 1.0, 3), ledger, NoiseSource(0), "student_queries")


@pytest.mark.parametrize("per_query", [Gaussian(5.0, 1.0, 2), Laplace(8.0, 1.0, 2)])
def test_a_batch_of_queries_costs_what_its_queries_cost_one_by_one(per_query):
    from dp_accounting import dp_event

    from dpsynth.privacy.calibration import epsilon_of
    from dpsynth.private.releases.pate import _batch

    together = epsilon_of(_batch(per_query, 10).event, 1e-5)
    apart = epsilon_of(dp_event.ComposedDpEvent([per_query.event] * 10), 1e-5)
    assert together == pytest.approx(apart, rel=1e-3)


@pytest.mark.parametrize("relabel", [False, True])
def test_relabel_decides_whether_a_candidate_may_leave_its_label(relabel):
    """Candidates generated (a, b, b); the student finds the first most like a private b and
    the second most like a private a. Without relabel each keeps its own label; with it, the
    best candidate-label pairs win whatever the candidates were generated under."""
    private = PrivateDataset(["x", "y"], labels=["a", "b"], label_names=["a", "b"])
    recipe = KdTutor.from_config({"discriminator": "labelled", "relabel": relabel,
                                  "n_output": 2, "label_mode": "uniform"})
    proba = np.array([[0.1, 0.2, 0.7], [0.1, 0.8, 0.1], [0.3, 0.1, 0.6]])
    picked = recipe._select(recipe._scores(private, proba, np.array([0, 1, 1])),
                            np.array([0.5, 0.5]), np.random.default_rng(0))
    assert sorted(picked) == ([(0, 1), (1, 0)] if relabel else [(0, 0), (2, 1)])


def test_sampled_selection_draws_each_label_in_proportion_to_its_scores():
    """selection: sample draws a label's candidates without replacement in proportion to the
    student's scores (the seed's P_discr · P_LLM): a candidate scored twice another's is
    picked about twice as often, one scored 0 only when nothing else is left, and the
    quotas hold as with top."""
    private = PrivateDataset(["x", "y"], labels=["a", "b"], label_names=["a", "b"])
    recipe = KdTutor.from_config({"n_output": 2, "label_mode": "uniform",
                                  "selection": "sample"})
    proba = np.array([[0.0, 0.6, 0.0], [0.0, 0.3, 0.0], [0.0, 0.1, 0.0], [1.0, 0.0, 0.0],
                      [0.0, 0.0, 0.5]])
    scores = recipe._scores(private, proba, np.array([0, 0, 0, 0, 1]))
    rng = np.random.default_rng(0)
    counts = np.zeros(5)
    for _ in range(4_000):
        picked = recipe._select(scores, np.array([0.5, 0.5]), rng)
        assert sorted(g for _, g in picked) == [0, 1]
        counts[[i for i, _ in picked]] += 1
    assert counts[4] == 4_000 and counts[3] == 0
    assert counts[0] / 4_000 == pytest.approx(0.6, abs=0.03)
    assert counts[1] / counts[2] == pytest.approx(3.0, rel=0.15)
    top = KdTutor.from_config({"n_output": 2, "label_mode": "uniform"})
    assert sorted(top._select(scores, np.array([0.5, 0.5]), rng)) == [(0, 0), (4, 1)]


def test_the_plan_note_weighs_the_vote_noise_against_the_teachers():
    private = PrivateDataset([f"t{i}" for i in range(3_000)],
                             labels=["ab"[i % 2] for i in range(3_000)],
                             label_names=["a", "b"])
    recipe = KdTutor.from_config({"teachers": 60, "n_queries": 100})
    low, high = (recipe.budget_plan(private, eps, 1e-5) for eps in (1.0, 8.0))
    assert low.stage("student_queries").noise_scale >= 30  # half of 60
    assert "half the 60 teachers' votes" in recipe.plan_notes(private, low)[0]
    assert high.stage("student_queries").noise_scale < 30
    assert recipe.plan_notes(private, high) == []
    few = PrivateDataset([f"t{i}" for i in range(8)], labels=["ab"[i % 2] for i in range(8)],
                         label_names=["a", "b"])
    assert "the 8 teachers" in recipe.plan_notes(few, recipe.budget_plan(few, 1.0, 1e-2))[0]


def test_teachers_read_in_place_embeddings_as_they_would_embed_their_partitions():
    """kd_tutor's teachers read the run's eagerly embedded records (`embedded`, row for row,
    repeats within a unit included) and fit exactly the teachers that embedding the kept
    records afresh would."""
    rng = np.random.default_rng(1)
    texts = [f"record {i}" for i in range(40)] + ["record 3"]  # a repeat within unit 3
    vectors = {t: rng.normal(size=4) for t in texts}
    data = PrivateDataset(texts, labels=["a", "b"] * 20 + ["b"], label_names=["a", "b"],
                          units=[*range(40), 3], records_per_unit=2)

    def embed(private):
        return np.array([vectors[t] for t in private.texts(Access.LEDGERED_OP)])

    negatives, queries = rng.normal(size=(30, 4)) - 1.0, rng.normal(size=(50, 4))
    fresh = train_teachers(data, embed, negatives, 4, b"k" * 16, 0, labelled=True)
    in_place = train_teachers(data, lambda _: pytest.fail("embedded again"), negatives, 4,
                              b"k" * 16, 0, labelled=True, embedded=embed(data))
    for a, b in zip(fresh, in_place, strict=True):
        assert np.array_equal(a.predict_proba(queries), b.predict_proba(queries))


def test_a_teacher_that_saw_one_class_votes_it_instead_of_failing():
    """No public negatives and a partition of one label (an audit's finding: sklearn refused
    to fit, after the tutor's release): the teacher always answers that label."""
    data = PrivateDataset(["x one", "x two"], labels=["b", "b"], label_names=["a", "b"])
    teachers = train_teachers(data, lambda p: np.ones((len(p.texts(Access.LEDGERED_OP)), 3)),
                              np.zeros((0, 3)), 1, b"k" * 16, 0, labelled=True)
    queries = np.zeros((4, 3))
    assert teacher_votes(teachers, queries, 3).tolist() == [[0, 0, 1]] * 4
    assert soft_vote(teachers[0], queries, 3).tolist() == [[0.0, 0.0, 1.0]] * 4
    assert teacher_votes(teachers, queries, 3, soft_key=b"s" * 16).tolist() == [[0, 0, 1]] * 4


class _Unsound:
    """A classifier whose probabilities are NaN or do not sum to one."""

    classes_ = np.array([0, 1, 2])

    def predict_proba(self, x):
        return np.array([[np.nan, 0.7, 0.7], [0.0, 0.0, 0.0], [-0.1, 0.6, 0.6]])[: len(x)]


def test_a_soft_vote_is_a_probability_vector_on_the_grid_whatever_the_classifier_says():
    votes = soft_vote(_Unsound(), np.zeros((3, 2)), 3)
    assert (votes >= 0).all() and (votes.sum(axis=1) == 1.0).all()
    assert (votes / SOFT_GRID == np.round(votes / SOFT_GRID)).all()
    assert votes[1].tolist() == [1.0, 0.0, 0.0]  # no probability at all: public


def test_a_teacher_that_does_not_converge_writes_no_warning(monkeypatch):
    """Whether a partition's fit converges depends on its private records: sklearn's
    ConvergenceWarning would put that bit on stderr after the first release."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16)) * 50
    y = (x[:, 0] + rng.normal(size=200) > 0).astype(int)
    one_step = functools.partial(LogisticRegression, max_iter=1)
    with pytest.warns(ConvergenceWarning):  # what the teachers' fits must keep quiet
        one_step().fit(x, y)
    monkeypatch.setattr("dpsynth.private.engine.teachers.LogisticRegression",
                        lambda **kw: one_step(**{**kw, "max_iter": 1}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert train_classifier(x, y, seed=0).n_iter_[0] == 1
        assert train_on_shares(x, np.eye(2)[y], seed=0).n_iter_[0] == 1
