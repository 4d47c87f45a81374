"""The budget planner: every answer meets the budget, and PLD tightening helps."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from dpsynth.privacy import PrivacyLedger, StageSpec, plan_budget, plan_table
from dpsynth.privacy.calibration import calibrate, epsilon_of

COARSE = 1e-3
DELTA = 1 / (8000 * math.log(8000))


def _dpga(eps_fraction_vote: float = 0.5) -> list[StageSpec]:
    return [StageSpec("svt", "svt", 0.2, compositions=2),
            StageSpec("histograms", "laplace", 0.3, compositions=3),
            StageSpec("votes", "subsampled_gaussian", eps_fraction_vote, compositions=10,
                      sampling_rate=0.8)]


def test_plan_meets_the_budget_and_tightening_lowers_every_scale():
    tight = plan_budget(1.0, DELTA, _dpga(), discretization=COARSE)
    loose = plan_budget(1.0, DELTA, _dpga(), tighten=False, discretization=COARSE)
    assert 0.99 <= tight.epsilon_composed <= 1.0
    assert loose.epsilon_composed < 1.0
    for a, b in zip(tight.stages, loose.stages, strict=True):
        assert a.noise_scale < b.noise_scale
    # the planned events, charged one by one, fit the ledger
    ledger = PrivacyLedger(1.0, DELTA, discretization=COARSE)
    for stage in tight.stages:
        for _ in range(stage.spec.compositions):
            ledger.charge(stage.spec.name, stage.mechanism.event)
    assert ledger.spent() <= 1.0
    assert tight.epsilon_composed <= tight.epsilon_rdp


def test_plan_with_limited_domain_reserves_its_delta():
    stages = [StageSpec("select", "limited_domain", 1.0, compositions=5, selections=3,
                        delta=1e-6)]
    plan = plan_budget(2.0, 1e-5, stages, discretization=COARSE)
    assert plan.epsilon_composed <= 2.0
    eps_each = plan.stage("select").mechanism.epsilon
    assert eps_each > 2.0 / 15  # optimal composition beats the basic split
    with pytest.raises(ValueError, match="fixed-δ stages"):
        plan_budget(2.0, 4e-6, stages, discretization=COARSE)


@pytest.mark.parametrize("tighten", [True, False])
def test_stages_that_compose_past_a_large_budget_get_more_noise_not_a_refusal(tighten):
    """At ε = 40 a histogram and a LimitedDomain selection, each calibrated to its share,
    compose to ε ≈ 41: the plan raises their noise until the ledger fits them."""
    stages = [StageSpec("histogram", "laplace", 0.05),
              StageSpec("select", "limited_domain", 0.95, compositions=3, selections=4,
                        domain_size=20, delta=6.26e-4, monotonic=True)]
    plan = plan_budget(40.0, 3.756e-3, stages, tighten=tighten, discretization=COARSE)
    calibrated_alone = plan_budget(40.0 * 0.05, 3.756e-3 * 0.05, stages[:1],
                                   discretization=COARSE).stages[0].noise_scale
    assert plan.stage("histogram").noise_scale > calibrated_alone
    ledger = PrivacyLedger(40.0, 3.756e-3, discretization=COARSE)
    for stage in plan.stages:
        for _ in range(stage.spec.compositions):
            ledger.charge(stage.spec.name, stage.mechanism.event)
    assert 39.0 < ledger.spent() <= 40.0


def test_plan_rejects_bad_fractions_and_names():
    with pytest.raises(ValueError, match="sum to"):
        plan_budget(1.0, 1e-5, [StageSpec("a", "laplace", 0.7), StageSpec("b", "laplace", 0.7)])
    with pytest.raises(ValueError, match="unique"):
        plan_budget(1.0, 1e-5, [StageSpec("a", "laplace", 0.3), StageSpec("a", "laplace", 0.3)])
    with pytest.raises(ValueError, match="fraction"):
        StageSpec("a", "laplace", 0.0)


def test_the_halved_noise_of_monotone_counts_is_refused_where_counts_may_fall():
    StageSpec("select", "limited_domain", 1.0, selections=3, domain_size=30, delta=1e-6,
              monotonic=True)
    with pytest.raises(ValueError, match="monotonic"):
        StageSpec("votes", "subsampled_gaussian", 1.0, sampling_rate=0.5, monotonic=True)
    with pytest.raises(ValueError, match="monotonic"):
        StageSpec("select", "limited_domain", 1.0, selections=3, domain_size=30, delta=1e-6,
                  sampling_rate=0.5, monotonic=True)


def test_plan_table_lists_every_stage_and_the_total():
    plan = plan_budget(2.0, DELTA, _dpga(), discretization=COARSE)
    console = Console(width=160, record=True)
    console.print(plan_table(plan))
    text = console.export_text()
    for name in ("svt", "histograms", "votes", "total", "RDP cross-check"):
        assert name in text
    assert f"{plan.stage('votes').noise_scale:.4g}" in text


def test_plan_table_says_when_a_release_moves_several_counts():
    """A PATE vote moves one count up and one down (L2 √2): "1" alone would understate it."""
    plan = plan_budget(2.0, DELTA, [StageSpec("votes", "gaussian", 1.0, max_changed=2)],
                       discretization=COARSE)
    console = Console(width=160, record=True)
    console.print(plan_table(plan))
    assert "1 on 2 counts" in console.export_text()


def test_calibrate_returns_the_smallest_safe_scale():
    from dpsynth.privacy import Laplace
    scale = calibrate(lambda b: Laplace(b).event, 0.5, 1e-9, discretization=COARSE)
    assert epsilon_of(Laplace(scale).event, 1e-9, COARSE) <= 0.5
    assert epsilon_of(Laplace(scale * 0.99).event, 1e-9, COARSE) > 0.5


def test_votes_need_less_noise_than_the_seed_accounting_allows():
    """dpga-textsyn §4.2 at ε=1: σ/√T composition, amplification after it, ε_vote = ε/2."""
    from dp_accounting import dp_event

    from dpsynth.privacy import SubsampledGaussianHistogram, analytic_gaussian_sigma

    eps_pre = math.log1p(math.expm1(0.5) / 0.8)
    seed_sigma = math.sqrt(10) * analytic_gaussian_sigma(eps_pre, DELTA / 0.8)
    ours = calibrate(lambda s: dp_event.SelfComposedDpEvent(
        SubsampledGaussianHistogram(s, 0.8).event, 10), 0.5, DELTA, discretization=COARSE)
    assert seed_sigma == pytest.approx(18.30, abs=0.01)
    assert ours < 0.97 * seed_sigma


def test_dp_sgd_stage_plans_a_noise_multiplier_beside_a_histogram():
    """CTCL: a σ-histogram and DP-Adam share one PLD; the step event is continuous Gaussian."""
    from dp_accounting import dp_event

    stages = [StageSpec("topics", "gaussian", 0.1),
              StageSpec("dp-adam", "dp_sgd", 0.9, compositions=200, sampling_rate=0.01)]
    plan = plan_budget(4.0, 1e-6, stages, discretization=COARSE)
    step = plan.stage("dp-adam").release_event
    assert isinstance(step, dp_event.PoissonSampledDpEvent)
    assert step.event.noise_multiplier == plan.stage("dp-adam").noise_scale
    assert plan.epsilon_composed <= 4.0
    with pytest.raises(ValueError, match="drawn by the trainer"):
        plan.stage("dp-adam").mechanism  # noqa: B018


def test_apply_split_overrides_fractions_and_names_bad_keys():
    from dpsynth.errors import ConfigError
    from dpsynth.privacy import apply_split

    stages = _dpga()
    split = apply_split(stages, {"votes": 0.4, "svt": 0.3})
    assert [s.fraction for s in split] == [0.3, 0.3, 0.4]
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['vote'\]"):
        apply_split(stages, {"vote": 0.5})
    with pytest.raises(ConfigError, match="sum to"):
        apply_split(stages, {"votes": 0.9})


def test_fixed_noise_is_kept_and_the_rest_fills_the_budget():
    stages = [StageSpec("histogram", "gaussian", 0.1),
              StageSpec("training", "subsampled_gaussian", 0.9, compositions=50,
                        sampling_rate=0.05)]
    plan = plan_budget(2.0, 1e-5, stages, fixed={"histogram": 10.0}, discretization=1e-3)
    assert plan.stage("histogram").noise_scale == 10.0
    assert plan.epsilon_composed <= 2.0
    assert plan.epsilon_composed > 1.97
    free = plan_budget(2.0, 1e-5, stages, discretization=1e-3)
    # σ = 10 costs more than the histogram's free share (σ ≈ 18): training pays for it
    assert free.stage("histogram").noise_scale > 10.0
    assert plan.stage("training").noise_scale > free.stage("training").noise_scale


def test_fixed_noise_that_costs_more_than_its_share_takes_it_from_the_others():
    stages = [StageSpec("histogram", "gaussian", 0.1),
              StageSpec("votes", "gaussian", 0.9, compositions=4)]
    loose = plan_budget(1.0, 1e-5, stages, discretization=1e-3)
    pinned = plan_budget(1.0, 1e-5, stages, fixed={"histogram": 8.0}, discretization=1e-3)
    assert pinned.stage("votes").noise_scale > loose.stage("votes").noise_scale
    assert pinned.epsilon_composed <= 1.0
    with pytest.raises(ValueError, match="alone spends the whole budget"):
        plan_budget(1.0, 1e-5, stages, fixed={"histogram": 2.0}, discretization=1e-3)
