"""Empirical privacy audits: from many runs on two neighbouring inputs, a Clopper–Pearson
lower bound on ε for a threshold test must stay below the claimed ε — and the same audit must
catch a mechanism that draws half the noise it claims."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from dpsynth.privacy import (
    AboveThreshold,
    ExponentialTopK,
    Gaussian,
    Laplace,
    Mechanism,
    epsilon_of,
    make_rng,
)

CONFIDENCE = 1 - 1e-4  # per interval: a false alarm needs a 1-in-10,000 draw


def epsilon_lower_bound(hits_d: int, hits_d2: int, n: int, delta: float = 0.0) -> float:
    """Lower bound on ε from P[M(D') ∈ S] ≤ e^ε P[M(D) ∈ S] + δ, with exact binomial CIs."""
    low = stats.binomtest(hits_d2, n).proportion_ci(CONFIDENCE, "exact").low
    high = stats.binomtest(hits_d, n).proportion_ci(CONFIDENCE, "exact").high
    return math.log((low - delta) / high) if low > delta and high > 0 else 0.0


def audit(draw: Callable[[float, int], np.ndarray], neighbours: tuple[float, float],
          threshold: float, n: int, delta: float = 0.0) -> float:
    """ε lower bound for the test 'output ≥ threshold' over n runs on each neighbour."""
    d, d2 = neighbours
    hits_d = int(np.sum(draw(d, n) >= threshold))
    hits_d2 = int(np.sum(draw(d2, n) >= threshold))
    return epsilon_lower_bound(hits_d, hits_d2, n, delta)


def _values(mech: Mechanism, seed: int) -> Callable[[float, int], np.ndarray]:
    # one run = one release of the count; n runs are n independent noise draws
    source = make_rng(seed)
    return lambda value, n: mech._release(np.full(n, value), source)


def test_laplace_audit_stays_below_the_claim_and_catches_half_noise():
    honest = Laplace(1.0)
    claimed = epsilon_of(honest.event, 1e-12)
    found = audit(_values(honest, 1), (0, 1), 1, 50_000)
    assert 0.8 * claimed < found <= claimed
    broken = Laplace(0.5)  # draws half the noise the honest event claims
    assert audit(_values(broken, 2), (0, 1), 1, 50_000) > claimed


def test_gaussian_audit_stays_below_the_claim_and_catches_half_noise():
    grid = 2.0**-4
    honest = Gaussian(1.0, granularity=grid)
    delta = 1e-3
    claimed = epsilon_of(honest.event, delta)
    found = audit(_values(honest, 3), (0, 1), 2.5, 200_000, delta)
    assert 0 < found <= claimed
    broken = Gaussian(0.5, granularity=grid)
    assert audit(_values(broken, 4), (0, 1), 2.25, 200_000, delta) > claimed


@pytest.mark.slow
def test_svt_audit_stays_below_the_claim():
    """One query of sensitivity 1 against threshold 0: D answers 0, D' answers 1."""
    def draw(mech: AboveThreshold, seed: int):
        source = make_rng(seed)

        def run(value: float, n: int) -> np.ndarray:
            return np.array([mech._release([value], source) == 0 for _ in range(n)], float)
        return run

    honest = AboveThreshold(1.0, 0.0)
    found = audit(draw(honest, 5), (0, 1), 1, 60_000)
    assert 0 < found <= honest.epsilon


@pytest.mark.slow
def test_exponential_mechanism_audit_stays_below_the_claim():
    """Two candidates; D scores (0, 0), D' scores (1, 0) (sensitivity 1); test: picks 0."""
    def draw(mech: ExponentialTopK, seed: int):
        source = make_rng(seed)

        def run(value: float, n: int) -> np.ndarray:
            return np.array([mech._release([value, 0.0], source)[0] == 0 for _ in range(n)],
                            float)
        return run

    honest = ExponentialTopK(1.0)
    found = audit(draw(honest, 7), (0, 1), 1, 60_000)
    assert 0 < found <= honest.epsilon
