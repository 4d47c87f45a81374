"""Bounded-range charges: the monotone LimitedDomain selection is ε₀-BR, and the ledger's spend
for BR selections lies between bounds computed here without the ledger's code: above the
exact composition of worst-case ε₀-BR pairs, below hand-made zCDP composition and the
pure-DP figure; beside Gaussians it is dp_accounting's RDP accountant plus α·Σε₀²/8."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from dpsynth.privacy import (
    ExponentialTopK,
    Gaussian,
    LimitedDomainTopK,
    PrivacyLedger,
    SubsampledGaussianHistogram,
    epsilon_of,
)
from dpsynth.privacy.events import holds_bounded_range
from dpsynth.privacy.journal import Journal, JournalHeader
from dpsynth.privacy.planning import StageSpec, plan_budget
from tests.privacy.test_limited_domain_exact import histograms, output_law

DELTA, DELTA0, K = 1e-5, 1e-6, 300


def _selection(eps0: float, k: int, monotonic: bool = True) -> LimitedDomainTopK:
    return LimitedDomainTopK(eps0, DELTA0, K, k, monotonic=monotonic)


def _ledger(releases, budget: float = 1000.0) -> PrivacyLedger:
    """A ledger holding each (stage, mechanism) release's charge."""
    ledger = PrivacyLedger(budget, DELTA)
    for stage, mech in releases:
        ledger.charge(stage, mech.event)
    return ledger


def _pure_twin(releases) -> PrivacyLedger:
    """The same releases with every selection booked as pure ε₀-DP (the ledger before BR)."""
    return _ledger([(s, _selection(m.epsilon, m.k, False) if isinstance(m, LimitedDomainTopK)
                     else m) for s, m in releases])


def br_pair_delta(eps0: float, t: float, n: int, eps: float) -> float:
    """δ(ε) of n-fold composition of one ε₀-BR pair, exactly: the generalised randomized
    response whose privacy loss is t or t − ε₀ (Dong, Durfee & Rogers 2020, the worst case
    of an ε₀-BR mechanism). Any ε₀-BR accountant must claim at least its ε."""
    q_prime = -math.expm1(t - eps0) / (math.exp(t) - math.exp(t - eps0))
    q = math.exp(t) * q_prime
    return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i)
               * max(0.0, -math.expm1(eps - (i * t + (n - i) * (t - eps0))))
               for i in range(n + 1))


def br_lower_bound(eps0: float, n: int, delta: float) -> float:
    """The largest ε at δ over a grid of such pairs (t ∈ (0, ε₀)), by bisection."""
    best = 0.0
    for t in np.linspace(0.02, 0.98, 25) * eps0:
        lo, hi = 0.0, n * eps0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if br_pair_delta(eps0, t, n, mid) > delta else (lo, mid)
        best = max(best, lo)
    return best


@pytest.mark.parametrize(("eps0", "k", "rounds"), [(0.04, 30, 5), (0.14, 30, 5), (0.24, 10, 5),
                                                   (0.5, 10, 3)])
def test_a_bounded_range_ledger_lies_between_independent_bounds(eps0, k, rounds):
    releases = [("selection", _selection(eps0, k))] * rounds
    spent = _ledger(releases).spent()
    left = DELTA - rounds * DELTA0
    rho = rounds * k * eps0**2 / 8
    zcdp = rho + 2 * math.sqrt(rho * math.log(1 / left))  # Bun & Steinke's conversion
    lower = br_lower_bound(eps0, rounds * k, left)
    assert lower <= spent <= zcdp
    assert spent < _pure_twin(releases).spent()  # the BR charge buys something here
    assert spent < 1.25 * lower  # and is not far from optimal BR composition
    assert spent > epsilon_of(_selection(eps0, k).event, DELTA)  # more than one release


def test_a_single_selection_keeps_the_pure_figure():
    """Few selections: the PLD of pure ε₀-DP is tighter than any zCDP conversion."""
    releases = [("selection", _selection(1.0, 1))]
    assert _ledger(releases).spent() == _pure_twin(releases).spent()


def test_beside_gaussians_the_spend_is_the_rdp_accountant_plus_the_br_term():
    gauss, steps = Gaussian(20.0), dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(
        1.1))
    releases = [("hist", gauss)] * 3 + [("selection", _selection(0.14, 30))] * 5
    ledger = _ledger(releases)
    ledger.charge("train", dp_event.SelfComposedDpEvent(steps, 500))
    pure = _pure_twin(releases)
    pure.charge("train", dp_event.SelfComposedDpEvent(steps, 500))
    # by hand: the discrete Gaussian has the continuous one's Rényi divergences (CKS 2020)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(dp_event.GaussianDpEvent(20.0), 3).compose(steps, 500)
    curve = rdp.rdp + rdp.orders * 5 * 30 * 0.14**2 / 8
    hand = rdp_privacy_accountant.compute_epsilon(rdp.orders, curve, DELTA - 5 * DELTA0)[0]
    assert hand < pure.spent()
    assert ledger.spent() == pytest.approx(hand, rel=1e-9)
    assert ledger.breakdown()["selection"]["epsilon_alone"] < pure.breakdown()["selection"][
        "epsilon_alone"]


def test_an_event_rdp_cannot_bound_leaves_the_pld_figure():
    """A Poisson-sampled discrete Gaussian's RDP is the continuous one's only at integer
    orders: with one on the ledger there is no second bound, the spend is the PLD's."""
    releases = [("votes", SubsampledGaussianHistogram(10.0, 0.5))] \
        + [("selection", _selection(0.14, 30))] * 5
    assert _ledger(releases).spent() == pytest.approx(_pure_twin(releases).spent(), rel=1e-12)


@pytest.mark.parametrize("eps0", [0.02, 0.1, 0.3, 1.0])
def test_the_spend_never_exceeds_the_pure_dp_figure(eps0):
    for k, rounds in ((1, 1), (3, 2), (30, 5)):
        releases = [("hist", Gaussian(5.0))] + [("selection", _selection(eps0, k))] * rounds
        assert _ledger(releases).spent() <= _pure_twin(releases).spent()


def test_only_the_monotone_limited_domain_selection_claims_bounded_range():
    assert holds_bounded_range(_selection(0.1, 5).event)
    assert not holds_bounded_range(_selection(0.1, 5, monotonic=False).event)
    assert not holds_bounded_range(ExponentialTopK(0.1, 5, monotonic=True).event)
    with pytest.raises(ValueError, match="monotonic"):
        StageSpec("pick", "svt", 1.0, monotonic=True)


def test_a_monotone_selection_is_bounded_range_on_its_exact_law():
    """Each peel is ε₀-BR: over every output of a k = 1 selection, ln P[o | D+1] / P[o | D]
    lies in an interval of width ε₀ whenever the added vote leaves the domain as it was
    (a changed domain is the δ₀ the charge adds)."""
    widest = 0.0
    for eps0, domain in ((1.0, 3), (0.5, 2), (2.0, 4)):
        mech = LimitedDomainTopK(eps0, 0.02, domain, 1, monotonic=True)
        for hist in histograms(np.random.default_rng(1), 80):
            law = output_law(mech, hist)
            top = set(np.argsort(-hist, kind="stable")[:domain].tolist())
            for j in range(hist.size):
                added = hist.copy()
                added[j] += 1
                if set(np.argsort(-added, kind="stable")[:domain].tolist()) != top:
                    continue
                law2 = output_law(mech, added)
                ratios = [math.log(law2[o] / p) for o, p in law.items()]
                width = max(ratios) - min(ratios)
                assert width <= eps0 + 1e-9, (hist, j, width)
                widest = max(widest, width / eps0)
    assert widest > 0.9  # the check has teeth: some neighbour uses nearly all of ε₀


def test_a_rebuilt_ledger_and_a_resumed_journal_spend_the_same(tmp_path):
    releases = [("hist", Gaussian(20.0))] + [("selection", _selection(0.14, 30))] * 5
    ledger = _ledger(releases, budget=5.0)
    loaded = PrivacyLedger.from_json(ledger.to_json())
    assert loaded.spent() == pytest.approx(ledger.spent(), rel=1e-9)
    assert loaded.to_dict()["spent"]["accountant"] == "min(pld, rdp)"
    header = JournalHeader(5.0, DELTA, 0, "cryptographic", "record")
    journal = Journal.open(tmp_path / "releases.jsonl", header)
    for charge in ledger.charges:
        journal.append_charge(charge)
    journal.close()
    journal = Journal.open(tmp_path / "releases.jsonl", header)
    journal.close()
    rebuilt = PrivacyLedger(5.0, DELTA, charges=[r.charge for r in journal.releases])
    assert rebuilt.spent() == pytest.approx(ledger.spent(), rel=1e-9)


def test_the_plan_calibrates_eda_against_the_bounded_range_spend():
    """T planned selections spend the whole ε on the ledger; booked as pure ε₀-DP, the same
    noise would overspend it."""
    spec = StageSpec("selection", "limited_domain", 1.0, compositions=5, selections=30,
                     domain_size=K, delta=DELTA0, monotonic=True)
    plan = plan_budget(1.0, DELTA, [spec])
    mech = plan.stage("selection").mechanism
    ledger = PrivacyLedger(1.0, DELTA)
    for _ in range(5):
        ledger.charge("selection", mech.event)
    assert 0.99 < ledger.spent() <= 1.0
    assert plan.epsilon_composed == pytest.approx(ledger.spent(), rel=1e-6)
    assert _pure_twin([("selection", mech)] * 5).spent() > 1.5
