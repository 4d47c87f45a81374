"""The ledger refuses over-budget releases before any noise, round-trips through JSON with
figures recomputed, and no sequence of charges leaves it over budget."""

from __future__ import annotations

import json

import numpy as np
import pytest
from dp_accounting import dp_event
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsynth.errors import BudgetExceededError
from dpsynth.privacy import (
    AboveThreshold,
    Gaussian,
    Laplace,
    LimitedDomainTopK,
    PrivacyLedger,
    SubsampledGaussianHistogram,
    Votes,
    epsilon_of,
    make_rng,
)
from dpsynth.privacy.events import PureDpEvent
from dpsynth.privacy.ledger import Charge
from dpsynth.privacy.noise import NoiseSource

COARSE = 1e-3


class CountingSource:
    """A noise source that records every draw."""

    def __init__(self) -> None:
        self.inner, self.calls = make_rng(0), 0

    def __getattr__(self, name):
        def draw(*args, **kwargs):
            self.calls += 1
            return getattr(self.inner, name)(*args, **kwargs)
        return draw


def test_over_budget_release_raises_before_any_noise_is_drawn():
    ledger = PrivacyLedger(1.0, 1e-5, discretization=COARSE)
    noise = CountingSource()
    ledger.release("hist", Laplace(2.0), [1, 2, 3], noise)
    calls, spent, n = noise.calls, ledger.spent(), len(ledger.charges)
    with pytest.raises(BudgetExceededError, match=r"stage 'too much'.*nothing was released"):
        ledger.release("too much", Laplace(1.0), [1, 2, 3], noise)
    assert noise.calls == calls
    assert ledger.spent() == spent and len(ledger.charges) == n


def test_charges_are_recorded_with_stage_sensitivity_and_scale():
    ledger = PrivacyLedger(2.0, 1e-5, discretization=COARSE)
    ledger.release("votes", SubsampledGaussianHistogram(8.0, 0.5), Votes([0, 1, 2, 2], 3),
                   make_rng(1))
    charge = ledger.charges[0]
    assert (charge.stage, charge.mechanism, charge.sensitivity, charge.noise_scale) == (
        "votes", "subsampled_gaussian", 1.0, 8.0)
    assert 0 < ledger.spent() == pytest.approx(ledger.breakdown()["votes"]["epsilon_alone"])
    assert ledger.remaining() == pytest.approx(2.0 - ledger.spent())
    before = ledger.spent()
    preview = ledger.would_spend(Laplace(4.0).event)
    assert ledger.spent() == before and len(ledger.charges) == 1  # a preview charges nothing
    ledger.charge("more", Laplace(4.0).event)
    assert before < ledger.spent() == pytest.approx(preview)


def _busy_ledger() -> PrivacyLedger:
    ledger = PrivacyLedger(3.0, 1e-5, discretization=COARSE)
    rng = make_rng(3)
    ledger.release("svt", AboveThreshold(0.2, 0.0), [-3.0, 5.0], rng)
    ledger.release("hist", Laplace(10.0), [4, 5], rng)
    for _ in range(3):
        ledger.release("votes", SubsampledGaussianHistogram(6.0, 0.8), Votes([0, 3, 3], 4), rng)
    ledger.release("select", LimitedDomainTopK(0.1, 1e-6, 5, 2), np.arange(20), rng)
    ledger.release("pate", Gaussian(30.0, max_changed=2), [1, 2], rng)
    return ledger


def test_json_round_trip_recomputes_the_total_from_events():
    ledger = _busy_ledger()
    data = json.loads(ledger.to_json())
    assert data["spent"]["epsilon"] == pytest.approx(ledger.spent())
    data["spent"]["epsilon"] = 0.0  # a stored figure is never trusted
    data["breakdown"] = {}
    loaded = PrivacyLedger.from_dict(data)  # equal events self-composed: another summing order
    assert loaded.spent() == pytest.approx(ledger.spent(), rel=1e-9)
    assert loaded.breakdown() == ledger.breakdown()
    assert [c.event for c in loaded.charges] == [c.event for c in ledger.charges]
    assert ledger.spent() <= loaded.spent_rdp()


def test_a_rebuilt_training_ledger_agrees_with_an_independent_accountant():
    """Rebuilding self-composes equal events (a training run's steps) instead of composing
    them one by one; the total must still be dp_accounting's own for the same events."""
    from dp_accounting.pld import pld_privacy_accountant

    step = dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0))
    histogram = dp_event.GaussianDpEvent(5.0)
    events = [histogram] + [step] * 240 + [histogram] * 3
    ledger = PrivacyLedger(8.0, 1e-5, charges=[Charge("s", e) for e in events])
    independent = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    independent.compose(dp_event.ComposedDpEvent(
        [dp_event.SelfComposedDpEvent(step, 240), dp_event.SelfComposedDpEvent(histogram, 4)]))
    assert ledger.spent() == pytest.approx(independent.get_epsilon(1e-5), rel=1e-5)
    assert len(ledger.charges) == 244


def test_loading_a_ledger_over_its_budget_fails():
    data = json.loads(_busy_ledger().to_json())
    data["budget"]["epsilon"] = 0.5
    with pytest.raises(BudgetExceededError, match="over the budget"):
        PrivacyLedger.from_dict(data)


def test_loading_refuses_unknown_event_types():
    data = json.loads(_busy_ledger().to_json())
    data["charges"][0]["event"]["type"] = "os.system"
    with pytest.raises(ValueError, match="unknown privacy event type"):
        PrivacyLedger.from_dict(data)


def test_fixed_delta_events_use_up_the_delta():
    ledger = PrivacyLedger(10.0, 1e-5, discretization=COARSE)
    ledger.charge("ld", LimitedDomainTopK(0.1, 6e-6, 5, 1).event)
    with pytest.raises(BudgetExceededError, match="over the budget"):
        ledger.charge("ld", LimitedDomainTopK(0.1, 6e-6, 5, 1).event)


def test_non_private_events_are_refused():
    ledger = PrivacyLedger(10.0, 1e-5, discretization=COARSE)
    with pytest.raises(BudgetExceededError, match="over the budget"):
        ledger.charge("leak", dp_event.NonPrivateDpEvent())
    with pytest.raises(ValueError, match="cannot account"):
        ledger.charge("odd", dp_event.UnsupportedDpEvent())


_events = st.one_of(
    st.floats(0.5, 20).map(lambda b: Laplace(b).event),
    st.floats(0.5, 40).map(lambda s: Gaussian(s).event),
    st.tuples(st.floats(1, 30), st.floats(0.05, 1)).map(
        lambda p: SubsampledGaussianHistogram(p[0], p[1]).event),
    st.floats(0.01, 1.5).map(PureDpEvent),
    st.floats(0.01, 0.5).map(lambda e: LimitedDomainTopK(e, 2e-7, 4, 2).event),
    st.floats(0.01, 0.3).map(lambda e: LimitedDomainTopK(e, 2e-7, 40, 30, monotonic=True).event),
)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.2, 4), st.lists(_events, min_size=1, max_size=8))
def test_no_sequence_of_charges_leaves_the_ledger_over_budget(epsilon, events):
    ledger = PrivacyLedger(epsilon, 1e-5, discretization=1e-2)
    for event in events:
        before = ledger.spent()
        try:
            ledger.charge("s", event)
        except BudgetExceededError:
            assert ledger.spent() == before
        assert ledger.spent() <= epsilon
    # the committed events, composed afresh, agree with the ledger
    committed = dp_event.ComposedDpEvent([c.event for c in ledger.charges])
    assert epsilon_of(committed, 1e-5, 1e-2) == pytest.approx(ledger.spent(), abs=1e-9)


def _held_ledger():
    """A plan of two stages, the first used up to its compositions, the second not at all:
    the total has room left, so only the per-stage hold can refuse what follows."""
    from dpsynth.privacy import StageSpec, plan_budget

    plan = plan_budget(2.0, 1e-5, [StageSpec("histogram", "laplace", 0.5, compositions=2),
                                   StageSpec("votes", "gaussian", 0.5)],
                       discretization=1e-3)
    ledger = PrivacyLedger(2.0, 1e-5)
    ledger.hold_to({s.spec.name: s.epsilon_alone for s in plan.stages})
    histogram = plan.stage("histogram").mechanism
    for _ in range(2):
        ledger.release("histogram", histogram, [3.0, 4.0], NoiseSource())
    return ledger, plan


def test_a_stage_released_more_often_than_planned_is_refused_though_the_total_has_room():
    ledger, plan = _held_ledger()
    extra = plan.stage("histogram").mechanism
    assert ledger.would_spend(extra.event) < 2.0  # the total alone would let it through
    with pytest.raises(BudgetExceededError, match="stage 'histogram'.*over the ε=.* its plan"):
        ledger.release("histogram", extra, [3.0, 4.0], NoiseSource())
    assert len(ledger.charges) == 2


def test_a_release_with_more_sensitivity_than_planned_or_an_unplanned_stage_is_refused():
    ledger, plan = _held_ledger()
    planned = plan.stage("votes").mechanism
    doubled = Gaussian(planned.sigma, linf_sensitivity=2 * planned.linf_sensitivity)
    with pytest.raises(BudgetExceededError, match="stage 'votes'"):
        ledger.release("votes", doubled, [1.0], NoiseSource())
    with pytest.raises(BudgetExceededError, match="'extra' is not in the run's budget plan"):
        ledger.release("extra", planned, [1.0], NoiseSource())
    ledger.release("votes", planned, [1.0], NoiseSource())  # the planned one still goes
    assert [c.stage for c in ledger.charges] == ["histogram", "histogram", "votes"]


def test_a_replay_that_ends_early_is_held_to_the_budget_not_the_plan():
    """A resumed run that draws again what an earlier one drew charges it again, by design:
    its stage passes the plan while the total has room, and that must not be refused, then
    or in any later resume of the folder."""
    ledger, plan = _held_ledger()
    recorded = list(ledger.charges)
    ledger.end_replay("a partly written training state was found")
    extra = plan.stage("histogram").mechanism
    ledger.release("histogram", extra, [3.0, 4.0], NoiseSource())  # charged again
    assert len(ledger.charges) == 3
    resumed = PrivacyLedger(2.0, 1e-5, charges=[*recorded, ledger.charges[-1]])
    resumed.hold_to({s.spec.name: s.epsilon_alone for s in plan.stages})
    quieter = Laplace(4 * extra.scale)  # its stage is past the plan, the total is not
    resumed.release("histogram", quieter, [3.0, 4.0], NoiseSource())
    assert len(resumed.charges) == 4 and resumed.spent() <= 2.0
