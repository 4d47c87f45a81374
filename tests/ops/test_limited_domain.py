"""DP parent selection: votes stay within a label, one charge covers all labels, and an
empirical audit on neighbouring data stays below the claimed ε."""

import math

import numpy as np
import pytest

from dpsynth.privacy import Disjoint, LimitedDomainTopK, PrivacyLedger, epsilon_of, make_rng
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.releases.limited_domain import dp_select_parents
from tests.privacy.test_audit import epsilon_lower_bound


def _unit(rows):
    x = np.asarray(rows, dtype=float)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_votes_stay_within_a_label_and_one_charge_covers_all_labels():
    candidates = _unit([[1, 0, 0], [0, 1, 0], [1, 0.1, 0], [0, 0, 1]])
    groups = np.array([0, 0, 1, 1])
    # 60 records of label 0 near candidate 0; 60 of label 1 also near candidate 0's
    # direction, which belongs to label 0: they must vote for candidate 2, their label's
    private = _unit([[1, 0.01, 0]] * 120)
    labels = np.array([0] * 60 + [1] * 60)
    ledger = PrivacyLedger(10.0, 1e-5)
    mech = LimitedDomainTopK(5.0, 1e-6, domain_size=2, k=1)
    picked = dp_select_parents(Voters(private, labels), candidates, groups, mech, ledger,
                               make_rng(0), "selection")
    assert picked == {0: [0], 1: [2]}
    assert ledger.breakdown()["selection"]["releases"] == 1
    assert ledger.charges[0].mechanism == "disjoint_limited_domain"
    # one charge = one LimitedDomain: k=1 selection of 5-DP plus its δ, whatever the labels
    assert ledger.spent() == pytest.approx(epsilon_of(mech.event, 1e-5), abs=1e-3)
    assert ledger.spent() <= 5.0 + 1e-3


def test_the_plan_carries_the_recipes_domain_size():
    from dpsynth.privacy.planning import StageSpec

    spec = StageSpec("selection", "limited_domain", 1.0, selections=30, domain_size=300,
                     delta=1e-6)
    assert spec.mechanism_for(4.0).domain_size == 300
    assert spec.mechanism_for(4.0).k == 30


def test_audit_of_one_label_on_neighbouring_data_stays_below_the_claim():
    """D' adds one record to label 0 (a vote for its bin 1). Over many releases, the test
    'bin 1 of label 0 is selected' gives an ε lower bound below the claim at δ₀, and label 1's
    selections are distributed alike on both (parallel composition)."""
    mech = Disjoint(LimitedDomainTopK(1.0, 1e-3, domain_size=2, k=1))
    base0 = np.array([22.0, 21.0, 0.0, 0.0, 0.0])
    other = np.array([20.0, 5.0, 0.0, 0.0, 0.0])
    neighbour0 = base0 + np.array([0, 1, 0, 0, 0])
    n = 40_000
    rng = make_rng(5)
    runs = {name: [mech._release([h0, other], rng) for _ in range(n)]
            for name, h0 in (("d", base0), ("d2", neighbour0))}
    hits = {name: sum(1 in r[0] for r in out) for name, out in runs.items()}
    claimed = epsilon_of(mech.event, 1e-3)
    found = epsilon_lower_bound(hits["d"], hits["d2"], n, delta=1e-3)
    assert 0 < hits["d"] < hits["d2"]  # the added vote shows ...
    assert found <= claimed  # ... but no more than the claim allows
    share = {name: sum(0 in r[1] for r in out) / n for name, out in runs.items()}
    assert abs(share["d"] - share["d2"]) < 4 * math.sqrt(0.25 / n)
