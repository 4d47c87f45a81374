"""Vote noise σ for the DPGA default schedule: the seed's own accounting beside dpsynth's.

Schedule (dpga-textsyn §4, App. D.3): ε ∈ {1, 2, 4}, N = 8,000, δ = 1/(N ln N), T = 10 vote
rounds, Poisson rate q = 0.8, half the budget to voting (0.2 to SVT, 0.3 to three Laplace
histograms).

seed (§4.2 as written): the T Gaussian votes compose into one Gaussian of multiplier σ/√T
(Lemma B.4); that Gaussian is calibrated analytically (Lemma B.3) to the *pre-amplification*
(ε', δ') with ε_vote = ln(1 + q(e^ε' − 1)) and δ_vote = qδ' (Lemma B.5), i.e. amplification
applied once, after composition; the stages then add up (Lemma B.6), so ε_vote = ε/2, δ_vote = δ.
seed, basic: the same, but the T votes composed by basic composition of (ε'/T, δ'/T).
ours, votes alone: σ of T Poisson-subsampled discrete Gaussians (the mechanism dpsynth runs)
composed step by step with PLD, at (ε/2, δ).
ours, whole plan: σ of the votes when all three stages are planned together and composed by PLD.

Run: python benchmarks/privacy_accounting.py
"""

from __future__ import annotations

import math
import time

from dp_accounting import dp_event
from rich.console import Console
from rich.table import Table

from dpsynth.privacy import StageSpec, analytic_gaussian_sigma, calibrate, plan_budget
from dpsynth.privacy.mechanisms import SubsampledGaussianHistogram

N, T, Q, VOTE_FRACTION = 8000, 10, 0.8, 0.5
DELTA = 1 / (N * math.log(N))


def seed_sigma(epsilon: float, basic: bool = False) -> float:
    eps_vote, delta_vote = VOTE_FRACTION * epsilon, DELTA
    eps_pre = math.log1p(math.expm1(eps_vote) / Q)  # invert ε_vote = ln(1 + q(e^ε' − 1))
    delta_pre = delta_vote / Q
    if basic:
        return analytic_gaussian_sigma(eps_pre / T, delta_pre / T)
    return math.sqrt(T) * analytic_gaussian_sigma(eps_pre, delta_pre)


def ours_votes_alone(epsilon: float) -> float:
    def event(sigma: float) -> dp_event.DpEvent:
        return dp_event.SelfComposedDpEvent(SubsampledGaussianHistogram(sigma, Q).event, T)
    return calibrate(event, VOTE_FRACTION * epsilon, DELTA)


def ours_whole_plan(epsilon: float) -> float:
    stages = [StageSpec("svt", "svt", 0.2, compositions=2),
              StageSpec("histograms", "laplace", 0.3, compositions=3),
              StageSpec("votes", "subsampled_gaussian", VOTE_FRACTION, compositions=T,
                        sampling_rate=Q)]
    return plan_budget(epsilon, DELTA, stages).stage("votes").noise_scale


def main() -> None:
    table = Table(title=f"DPGA vote σ: N={N}, δ={DELTA:.3g}, T={T}, q={Q}, votes get ε/2")
    for column in ("ε", "seed §4.2", "seed, basic", "ours, votes alone", "ours, whole plan",
                   "alone / seed", "whole / seed"):
        table.add_column(column, justify="right")
    start = time.perf_counter()
    for epsilon in (1.0, 2.0, 4.0):
        seed, basic = seed_sigma(epsilon), seed_sigma(epsilon, basic=True)
        alone, whole = ours_votes_alone(epsilon), ours_whole_plan(epsilon)
        assert alone <= seed and whole <= alone, "dpsynth must need no more noise than the seed"
        table.add_row(f"{epsilon:g}", f"{seed:.3f}", f"{basic:.3f}", f"{alone:.3f}",
                      f"{whole:.3f}", f"{alone / seed:.3f}", f"{whole / seed:.3f}")
    console = Console(width=120)
    console.print(table)
    console.print(f"computed in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
