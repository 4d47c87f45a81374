"""Noise calibration: the analytic Gaussian (Balle & Wang 2018) and a verified generic solver.

`calibrate` finds the smallest noise scale whose event meets (ε, δ) under dpsynth's PLD
accountant: it brackets by doubling, lets dp_accounting's `calibrate_dp_mechanism` bisect
(it returns the safe end of its final interval), and re-checks the answer with a fresh
accountant, so an answer that misses the target is an error, never a silent overspend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import dp_accounting
from dp_accounting import dp_event
from scipy.stats import norm

from dpsynth.privacy.events import PldAccountant


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """δ(ε) of the Gaussian mechanism (dpga-textsyn Lemma B.3; Balle & Wang 2018, Thm. 8):
    Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ)."""
    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    first = norm.logcdf(a - b)
    second = epsilon + norm.logcdf(-a - b)
    return float(math.exp(first) * -math.expm1(second - first)) if second < first else 0.0


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0,
                            rel_tol: float = 1e-9) -> float:
    """Smallest σ with analytic δ(ε) ≤ δ, by bisection; returns the upper (safe) end."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
    lo, hi = 1e-3 * sensitivity, sensitivity
    while analytic_gaussian_delta(hi, epsilon, sensitivity) > delta:
        lo, hi = hi, 2 * hi
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if analytic_gaussian_delta(mid, epsilon, sensitivity) <= delta \
            else (mid, hi)
    return hi


def epsilon_of(event: dp_event.DpEvent, delta: float, discretization: float = 1e-4) -> float:
    """ε of one (possibly composed) event at δ, by dpsynth's PLD accountant."""
    return PldAccountant(discretization).compose(event).get_epsilon(delta)


def calibrate(make_event: Callable[[float], dp_event.DpEvent], epsilon: float, delta: float,
              *, discretization: float = 1e-4, start: float = 1.0, rel_tol: float = 1e-4,
              ) -> float:
    """Smallest noise scale s (larger s = more private) with ε(make_event(s)) ≤ ε at δ."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")

    def eps(scale: float) -> float:
        return epsilon_of(make_event(scale), delta, discretization)

    lo, hi = start, start
    while eps(hi) > epsilon:
        lo, hi = hi, 2 * hi
        if hi > 1e12:
            raise ValueError(f"no noise scale reaches ε={epsilon} at δ={delta}; the δ may be "
                             "used up by fixed-δ stages")
    while lo == hi or eps(lo) <= epsilon:
        if lo < 1e-9:
            return lo
        lo = lo / 2
    scale = dp_accounting.calibrate_dp_mechanism(
        lambda: PldAccountant(discretization), make_event, epsilon, delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi), tol=rel_tol * hi)
    if eps(scale) > epsilon:  # never expected; refuse rather than overspend
        raise RuntimeError(f"calibration returned scale {scale} with ε={eps(scale)} > {epsilon}")
    return float(scale)
