"""Neighbouring datasets, end to end through `dpsynth run`'s pipeline (reading, cleaning,
bounding, the recipe): a run on D and a run on D' = D plus one privacy unit must see
pre-noise statistics that differ, release by release, by at most the sensitivity the ledger
charged for that release.

Noise is switched off at the mechanism boundary, and the run on D' is handed D's answers, so
both runs take the same public path and only the private data differs. The added unit sits
at the start or the end of the file, copies other units' texts with other labels, or (with a
user column) holds k records of one label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpsynth.config import parse_config
from dpsynth.privacy import mechanisms as m
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder, RecordingGenerator, ticket_texts
from tests.methods.test_recipes import PARAMS

N_BASE = 159  # D' has 160 units: a bucket count of N // 4 would move between them


class ZeroNoise(NoiseSource):
    """Every draw is zero, every unit is sampled, every key is the same: the mechanisms
    return their exact answers."""

    def __init__(self, seed: int | None = None, **_: Any) -> None:
        super().__init__(0)

    def discrete_laplace(self, scale, size):
        return np.zeros(size, dtype=np.int64)

    discrete_gaussian = discrete_laplace

    def laplace(self, scale, size):
        return np.zeros(size)

    gumbel = laplace

    def random_key(self, nbytes=16):
        return b"\x01" * nbytes

    def poisson_sample(self, n, rate):
        return np.ones(n, dtype=bool)


@dataclass
class Seen:
    stage: str
    mechanism: m.Mechanism
    values: Any


class Recorder:
    """Stands in for `PrivacyLedger.release`: charges as usual, keeps what the mechanism was
    given, and answers exactly (on D) or with D's answers (on D')."""

    def __init__(self, answers: list | None = None) -> None:
        self.seen: list[Seen] = []
        self.answers: list = []
        self.given = answers

    def __call__(self, ledger: PrivacyLedger, stage, mechanism, values, noise):
        ledger.charge(stage, mechanism.event, mechanism=mechanism.kind,
                      sensitivity=mechanism.sensitivity, noise_scale=mechanism.noise_scale)
        self.seen.append(Seen(stage, mechanism, _copy(values)))
        if self.given is None:
            answer = mechanism._release(values, noise)
        else:
            assert len(self.seen) <= len(self.given), (
                f"stage '{stage}': D' made a release D did not: the control flow read the data")
            answer = self.given[len(self.seen) - 1]
        self.answers.append(answer)
        return answer


def _copy(values):
    if isinstance(values, m.GroupedSequences):  # DP decoding's sources: scored again
        return values  # along D's tokens, in assert_within_sensitivity
    if isinstance(values, m.Votes):
        return m.Votes(np.array(values.targets), values.n_bins)
    if isinstance(values, list):
        return [np.array(v, dtype=float) for v in values]
    return np.array(values, dtype=float)


def assert_within_sensitivity(d: Seen, d2: Seen, answer: Any = None) -> None:
    """D and D' saw statistics no further apart than the mechanism's charged sensitivity."""
    assert (d.stage, type(d.mechanism)) == (d2.stage, type(d2.mechanism))
    mech, a, b = d.mechanism, d.values, d2.values
    where = f"stage '{d.stage}' ({mech.kind})"
    if isinstance(mech, m.DisjointSequences):  # DP decoding: scores along D's tokens
        assert len(a) == len(b) == len(answer), f"{where}: the number of texts moved"
        assert list(a.groups(0)) == list(b.groups(0)), f"{where}: the groups moved"
        moved_texts: set[int] = set()
        for start, stop in a.groups(0):  # each group in lockstep, as it was drawn
            x, y = a.together(start, stop), b.together(start, stop)
            for t in range(mech.length + 1):
                drawn = [tokens[:t] for tokens in answer[start:stop]]
                for i, (sx, sy) in enumerate(zip(x.next_scores(drawn), y.next_scores(drawn),
                                                 strict=True), start):
                    if sx is None or sy is None:
                        assert sx is None and sy is None, f"{where}: the stop moved"
                        continue
                    assert np.array_equal(sx[0], sy[0]), f"{where}: the candidates moved"
                    diff = sy[1] - sx[1]
                    if np.any(diff != 0):
                        moved_texts.add(i)
                    assert diff.max() - diff.min() <= mech.step.score_range + 1e-9, \
                        f"{where}: scores moved over a range {diff.max() - diff.min()}"
        moved = len(moved_texts)
        assert moved <= 1, f"{where}: one unit moved {moved} texts"
        TEXTS_MOVED.append(moved)
        return
    if isinstance(mech, m.Disjoint):  # parallel composition: one part may move
        moved = [i for i, (x, y) in enumerate(zip(a, b, strict=True))
                 if not np.array_equal(x, y)]
        assert len(moved) <= 1, f"{where}: one unit moved {len(moved)} parts"
        for i in moved:
            assert_within_sensitivity(Seen(d.stage, mech.inner, a[i]),
                                      Seen(d.stage, mech.inner, b[i]))
        return
    if isinstance(mech, m.SubsampledGaussianHistogram):  # one vote per unit: L2 ≤ 1
        assert a.n_bins == b.n_bins, f"{where}: the number of bins depends on the data"
        a = np.bincount(a.targets.astype(int), minlength=a.n_bins)
        b = np.bincount(b.targets.astype(int), minlength=b.n_bins)
        assert np.linalg.norm(a - b) <= 1, f"{where}: votes moved by L2 {np.linalg.norm(a - b)}"
        return
    if isinstance(mech, m.NoisyMean):
        sums = [np.sum(np.clip(v, mech.lower, mech.upper) - (mech.lower + mech.upper) / 2)
                for v in (a, b)]
        assert abs(sums[0] - sums[1]) <= mech.sensitivity + 1e-9, f"{where}: sum moved"
        assert abs(a.size - b.size) <= 1, f"{where}: count moved by {abs(a.size - b.size)}"
        return
    assert a.shape == b.shape, f"{where}: the statistic's shape depends on the data"
    diff = np.abs(a - b).ravel()
    if isinstance(mech, m.Laplace | m.Gaussian):  # each coordinate, as the event charges it
        assert diff.max(initial=0) <= mech.linf_sensitivity + 1e-9, f"{where}: a coordinate " \
            f"moved by {diff.max()} > {mech.linf_sensitivity}"
    if isinstance(mech, m.Laplace):
        assert diff.sum() <= mech.sensitivity, f"{where}: L1 {diff.sum()} > {mech.sensitivity}"
    elif isinstance(mech, m.Gaussian):
        norm = np.linalg.norm(diff)
        assert norm <= mech.sensitivity + 1e-9, f"{where}: L2 {norm} > {mech.sensitivity}"
    elif isinstance(mech, m.LimitedDomainTopK):
        assert diff.max(initial=0) <= 1 and (diff > 0).sum() <= mech.l0_sensitivity, where
        if mech.monotonic:  # charged as monotone: D' (one unit more) lowers no count
            assert (b >= a).all(), f"{where}: a count fell on D'"
    else:  # AboveThreshold, ExponentialTopK: each query or score moves by the sensitivity
        assert diff.max(initial=0) <= mech.sensitivity, f"{where}: L∞ {diff.max()}"


TEXTS_MOVED: list[int] = []
"""How many texts each DP decoding comparison found moved (0 or 1)."""


def base_rows(users: bool) -> pd.DataFrame:
    texts, labels = ticket_texts(N_BASE)
    frame = pd.DataFrame({"text": texts, "label": labels})
    if users:  # 60 users of a few records each, scattered over the file
        rng = np.random.default_rng(1)
        frame["user"] = [f"u{u}" for u in rng.integers(0, 60, size=N_BASE)]
    return frame


def neighbour(frame: pd.DataFrame, kind: str, k: int) -> pd.DataFrame:
    """D plus one unit of `k` records (one record without a user column)."""
    users = "user" in frame
    n = k if users else 1
    if kind == "copies":  # other units' texts, each under another label
        rows = frame.iloc[[3, 10, 17][:n]].copy()
        rows["label"] = ["billing" if y != "billing" else "account" for y in rows["label"]]
    else:
        rows = pd.DataFrame({"text": [f"refund invoice charge card fee {i}" for i in range(n)],
                             "label": ["billing"] * n})
    if users:
        rows["user"] = "newcomer"
    parts = [rows, frame] if kind in ("start", "copies") else [frame, rows]
    return pd.concat(parts, ignore_index=True)


def config(tmp_path, name, frame, recipe, params, k):
    frame.to_csv(tmp_path / f"{name}.csv", index=False)
    data = {"path": f"{name}.csv", "label_column": "label",
            "labels": ["account", "billing", "shipping", "technical"]}
    if "user" in frame:
        data |= {"user_column": "user", "max_records_per_user": k}
    raw = {"data": data, "budget": {"epsilon": 4.0, "delta": 1e-4},
           "recipe": {"name": recipe, "params": params},
           "output": {"dir": str(tmp_path / f"out-{name}")}, "seed": 5}
    return parse_config(raw, base_dir=tmp_path)


def check_neighbours(tmp_path, monkeypatch, recipe, params, kind, users, k,
                     embedder=HashEmbedder) -> list[Seen]:
    monkeypatch.setattr("dpsynth.run.resume.NoiseSource", ZeroNoise)
    frame = base_rows(users)
    on_d = Recorder()
    monkeypatch.setattr(PrivacyLedger, "release", lambda self, *args: on_d(self, *args))
    run(config(tmp_path, "d", frame, recipe, params, k), embedder=embedder(),
        generator=RecordingGenerator())
    on_d2 = Recorder(on_d.answers)
    monkeypatch.setattr(PrivacyLedger, "release", lambda self, *args: on_d2(self, *args))
    run(config(tmp_path, "d2", neighbour(frame, kind, k), recipe, params, k),
        embedder=embedder(), generator=RecordingGenerator())
    assert len(on_d2.seen) == len(on_d.seen), "the number of releases depends on the data"
    for d, d2, answer in zip(on_d.seen, on_d2.seen, on_d.answers, strict=True):
        assert_within_sensitivity(d, d2, answer)
    return on_d.seen


KINDS = ["start", "end", "copies"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("recipe", sorted(PARAMS))
def test_one_record_more_moves_each_release_within_its_charge(tmp_path, monkeypatch, recipe,
                                                              kind):
    seen = check_neighbours(tmp_path, monkeypatch, recipe, PARAMS[recipe], kind, False, 1)
    if recipe == "dp_decoding":  # no lengths: the LM writes them, token by token
        assert [s.stage for s in seen] == ["label_histogram", "decoding"]
    else:
        assert "length_histogram" in {s.stage for s in seen}  # every recipe here asks lengths


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("recipe", ["pe", "dpga"])
def test_one_record_more_moves_votes_by_label_within_their_charge(tmp_path, monkeypatch,
                                                                  recipe, kind):
    params = PARAMS[recipe] | {"labels_from": "votes"}
    seen = check_neighbours(tmp_path, monkeypatch, recipe, params, kind, False, 1)
    assert sum(s.stage == "voting" for s in seen) == params["iterations"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("recipe", [pytest.param("dpga", marks=pytest.mark.slow), "pe"])
def test_one_user_more_at_k1_moves_each_release_within_its_charge(tmp_path, monkeypatch,
                                                                  recipe, kind):
    check_neighbours(tmp_path, monkeypatch, recipe, PARAMS[recipe], kind, True, 1)


@pytest.mark.parametrize("votes", ["hard", "soft"])
@pytest.mark.parametrize("kind", KINDS)
def test_one_user_of_three_records_moves_kd_tutor_within_its_charge(tmp_path, monkeypatch,
                                                                     kind, votes):
    params = {**PARAMS["kd_tutor"], "discriminator": "binary", "votes": votes}
    seen = check_neighbours(tmp_path, monkeypatch, "kd_tutor", params, kind, True, 3)
    tutor = next(s for s in seen if s.stage == "tutor")
    assert tutor.mechanism.sensitivity == 3  # k records may all carry one label
    _assert_votes_are(votes, seen)


@pytest.mark.parametrize("votes", ["hard", "soft"])
@pytest.mark.parametrize("kind", KINDS)
def test_labelled_kd_tutor_moves_each_release_within_its_charge(tmp_path, monkeypatch, kind,
                                                                votes):
    params = {**PARAMS["kd_tutor"], "discriminator": "labelled", "votes": votes}
    seen = check_neighbours(tmp_path, monkeypatch, "kd_tutor", params, kind, True, 3)
    queries = next(s for s in seen if s.stage == "student_queries")
    assert queries.values.shape[1] == 5  # public and the four labels
    _assert_votes_are(votes, seen)


def _assert_votes_are(votes: str, seen: list[Seen]) -> None:
    """Hard and sampled soft votes alike: one class per teacher, counted (the same key on D
    and D', as the run's noise source gives both)."""
    values = np.concatenate([s.values for s in seen if s.stage == "student_queries"])
    assert np.array_equal(values, np.rint(values)), votes
    assert (values.sum(axis=1) == PARAMS["kd_tutor"]["teachers"]).all()


@pytest.mark.parametrize("recipe", ["dpga", "pe", "eda", "ctcl", "dpft"])
def test_recipes_that_count_one_vote_per_unit_refuse_k_above_one_before_releasing(
        tmp_path, recipe):
    from dpsynth.errors import ConfigError
    from dpsynth.preflight import make_plan

    params = PARAMS.get(recipe, {})
    with pytest.raises(ConfigError, match="max_records_per_user: recipe .* needs 1 record"):
        make_plan(config(tmp_path, "d", base_rows(True), recipe, params, 3))
    assert not (tmp_path / "out-d").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_one_record_more_moves_eda_within_its_charge(tmp_path, monkeypatch, tiny_inversion,
                                                     kind):
    """eda's selections are charged as monotone LimitedDomain: on D' no count falls; its
    label histogram moves by one record's count."""
    from functools import partial

    from tests.methods.test_eda import PARAMS as EDA
    from tests.tiny_lm import INVERSION_DIM, one_torch_thread

    with one_torch_thread():
        seen = check_neighbours(tmp_path, monkeypatch, "eda",
                                {**EDA, "decoder": str(tiny_inversion[1])}, kind, False, 1,
                                embedder=partial(HashEmbedder, INVERSION_DIM))
    selections = [s for s in seen if s.stage == "selection"]
    assert selections and all(s.mechanism.inner.monotonic for s in selections)
    assert [s.stage for s in seen].count("label_histogram") == 1


@pytest.mark.parametrize("kind", KINDS)
def test_one_record_more_moves_one_decoded_text_within_its_charge(tmp_path, monkeypatch, kind):
    """Every bucket feeds a text (10 texts a label, ~40 records a label, B = 4), so the added
    record is in some text's batch: that text's scores move, along D's tokens, within the
    charged range 2C/B at every token, and no other text's do."""
    from tests.tiny_lm import one_torch_thread

    TEXTS_MOVED.clear()
    params = {**PARAMS["dp_decoding"], "n_output": 40}
    with one_torch_thread():
        check_neighbours(tmp_path, monkeypatch, "dp_decoding", params, kind, False, 1)
    assert TEXTS_MOVED == [1]
