"""LimitedDomain's claim checked against its exact output distribution on neighbouring
histograms, computed without the accountant.

The one-shot Gumbel top-k with a ⊥ bar releases, in noisy order, the candidates above the
bar, at most k: the same law as peeling the exponential mechanism over the domain and ⊥,
stopping at ⊥ (Durfee & Rogers 2019, Thm. 1). On small histograms that law is a finite sum,
so the hockey-stick divergence δ(ε) between neighbours is exact. It must stay below the
claim: δ₀ plus the optimal k-fold composition of ε-DP (Kairouz et al.'s closed form), in both
directions, for every histogram and every neighbour that adds one vote.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.privacy import LimitedDomainTopK, make_rng


def output_law(mech: LimitedDomainTopK, hist: np.ndarray) -> dict[tuple[int, ...], float]:
    """Probability of each ordered release, by peeling (⊥ stops the release)."""
    order = np.argsort(-hist, kind="stable")
    domain = [int(i) for i in order[: mech.domain_size]]
    weights = {i: hist[i] / mech.noise_scale for i in domain}
    if hist.size > mech.domain_size:
        weights[-1] = (hist[order[mech.domain_size]] + mech.bar_margin(hist.size)) \
            / mech.noise_scale
    law: dict[tuple[int, ...], float] = {}

    def peel(picked: tuple[int, ...], p: float) -> None:
        left = [i for i in weights if i not in picked]
        if len(picked) == mech.k or not left:
            law[picked] = law.get(picked, 0.0) + p
            return
        top = max(weights[i] for i in left)
        z = sum(math.exp(weights[i] - top) for i in left)
        for i in left:
            q = p * math.exp(weights[i] - top) / z
            if i == -1:
                law[picked] = law.get(picked, 0.0) + q
            else:
                peel((*picked, i), q)

    peel((), 1.0)
    return law


def hockey_stick(p: dict, q: dict, eps: float) -> float:
    return sum(max(0.0, pv - math.exp(eps) * q.get(o, 0.0)) for o, pv in p.items())


def composed_pure_delta(eps_each: float, k: int, eps: float) -> float:
    """δ(ε) of k-fold ε_each-DP, optimal (randomized response composed k times)."""
    up = math.exp(eps_each) / (1 + math.exp(eps_each))
    return sum(math.comb(k, i) * up ** (k - i) * (1 - up) ** i
               * max(0.0, 1 - math.exp(eps - (k - 2 * i) * eps_each)) for i in range(k + 1))


def histograms(rng, n: int):
    for _ in range(n):
        d = int(rng.integers(2, 7))
        yield rng.integers(0, 6, d).astype(float)


@pytest.mark.parametrize(("eps_each", "k", "domain"), [(1.0, 1, 3), (0.7, 2, 3), (1.5, 3, 4)])
def test_monotone_limited_domain_keeps_its_claim_exactly(eps_each, k, domain):
    delta0 = 0.02
    mech = LimitedDomainTopK(eps_each, delta0, domain, min(k, domain), monotonic=True)
    worst = tightest = 0.0
    for hist in histograms(np.random.default_rng(0), 60):
        law = output_law(mech, hist)
        assert sum(law.values()) == pytest.approx(1.0)
        for j in range(hist.size):  # D' = D plus one vote for bin j
            added = hist.copy()
            added[j] += 1
            law2 = output_law(mech, added)
            for eps in (0.0, 0.5 * eps_each, eps_each, 2 * eps_each):
                claim = delta0 + composed_pure_delta(eps_each, mech.k, eps)
                exact = max(hockey_stick(law, law2, eps), hockey_stick(law2, law, eps))
                assert exact <= claim + 1e-12, (hist, j, eps, exact, claim)
                tightest = max(tightest, exact / claim)
            worst = max(worst, max(math.log(law2.get(o, 0) / p) for o, p in law.items()
                                   if p > 0 and o in law2))
    # the check has teeth: some release's odds move by most of the ε per selection, and
    # some neighbour comes close to the claimed δ(ε)
    assert worst > 0.5 * eps_each and tightest > 0.5


def test_half_the_noise_breaks_the_claim_when_counts_move_both_ways():
    """Without monotone counts (a vote moved between bins), scale 1/ε is not ε-DP: the
    exact law exceeds the claim; the general scale 2/ε keeps it."""
    hist, moved = np.array([9.0, 0.0, 0.0]), np.array([8.0, 1.0, 0.0])
    eps_each = 1.0
    for monotonic, breaks in ((True, True), (False, False)):
        mech = LimitedDomainTopK(eps_each, 0.01, 3, 1, monotonic=monotonic)
        a, b = output_law(mech, hist), output_law(mech, moved)
        exact = hockey_stick(b, a, eps_each)
        assert (exact > composed_pure_delta(eps_each, 1, eps_each)) == breaks


def test_the_law_is_the_mechanisms():
    """The peeling law above is what `_release` samples (Monte Carlo, one histogram whose
    domain excludes a bin, so the ⊥ bar takes part)."""
    mech = LimitedDomainTopK(1.0, 0.05, 3, 2, monotonic=True)
    hist = np.array([5.0, 4.0, 4.0, 1.0, 0.0])
    law = output_law(mech, hist)
    rng, n = make_rng(3), 20_000
    seen: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        out = tuple(mech._release(hist, rng))
        seen[out] = seen.get(out, 0) + 1
    for out in set(law) | set(seen):
        p = law.get(out, 0.0)
        assert abs(seen.get(out, 0) / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-3, out
    assert set(seen) <= set(law)
    assert not any(i in (3, 4) for o in law for i in o)  # outside the domain: never
    assert sum(p for o, p in law.items() if len(o) < 2) > 0.01  # ⊥ does stop releases
