"""Accounting checked against closed forms and independent accountants (dp_accounting's own
PLD/RDP on continuous events, opacus), never against the formula under test."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpsynth.privacy import (
    Gaussian,
    Laplace,
    SubsampledGaussianHistogram,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    epsilon_of,
)
from dpsynth.privacy.events import ApproximateDpEvent, PureDpEvent, rdp_epsilon


@pytest.mark.parametrize(("scale", "sensitivity"), [(1.0, 1.0), (4.0, 1.0), (10.0, 3.0)])
def test_laplace_epsilon_is_sensitivity_over_scale(scale, sensitivity):
    event = Laplace(scale, linf_sensitivity=sensitivity).event
    eps = epsilon_of(event, 1e-15, discretization=1e-4)
    assert eps == pytest.approx(sensitivity / scale, abs=2e-4)
    assert eps <= sensitivity / scale + 2e-4


def test_laplace_on_a_rounded_grid_pays_for_the_rounding():
    mech = Laplace(8.0, linf_sensitivity=1.0, integer_valued=False, granularity=2.0**-4)
    assert mech.epsilon == pytest.approx((1 + 2.0**-4) / 8.0)
    assert epsilon_of(mech.event, 1e-15) == pytest.approx(mech.epsilon, abs=2e-4)


@pytest.mark.parametrize(("sigma", "eps"), [(0.8, 0.5), (2.0, 1.0), (5.0, 0.2), (20.0, 0.05)])
def test_analytic_gaussian_delta_matches_an_independent_pld(sigma, eps):
    """dpga-textsyn Lemma B.3 against dp_accounting's PLD for the continuous Gaussian."""
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    reference = pld.compose(dp_event.GaussianDpEvent(sigma)).get_delta(eps)
    assert analytic_gaussian_delta(sigma, eps) == pytest.approx(reference, rel=1e-6)
    # sensitivity scales like σ
    assert analytic_gaussian_delta(3 * sigma, eps, 3.0) == pytest.approx(
        analytic_gaussian_delta(sigma, eps), rel=1e-9)


def test_analytic_gaussian_sigma_is_the_safe_side_of_the_calibration():
    sigma = analytic_gaussian_sigma(1.0, 1e-5)
    assert analytic_gaussian_delta(sigma, 1.0) <= 1e-5
    assert analytic_gaussian_delta(sigma * 0.999, 1.0) > 1e-5
    assert sigma == pytest.approx(dp_accounting.get_sigma_gaussian(1.0, 1e-5), rel=1e-6)


def test_subsampled_gaussian_pld_rdp_and_opacus_agree():
    """σ=1, q=0.01, 1000 steps, δ=1e-5: ≈1.83 by PLD, ≈2.10 by RDP."""
    opacus = pytest.importorskip("opacus.accountants")
    event = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)), 1000)
    ours = epsilon_of(event, 1e-5, discretization=1e-3)
    rdp = rdp_privacy_accountant.RdpAccountant().compose(event).get_epsilon(1e-5)
    prv, rdp_op = opacus.PRVAccountant(), opacus.RDPAccountant()
    for _ in range(1000):
        prv.step(noise_multiplier=1.0, sample_rate=0.01)
        rdp_op.step(noise_multiplier=1.0, sample_rate=0.01)
    assert ours == pytest.approx(1.83, abs=0.01)
    assert rdp == pytest.approx(2.10, abs=0.01)
    assert ours == pytest.approx(prv.get_epsilon(1e-5), abs=0.02)
    assert rdp == pytest.approx(rdp_op.get_epsilon(1e-5), abs=0.01)
    assert ours < rdp


def test_discrete_subsampled_histogram_accounts_like_the_continuous_gaussian():
    """The discrete Gaussian dpsynth samples costs what the continuous one would (±1%)."""
    ours = dp_event.SelfComposedDpEvent(SubsampledGaussianHistogram(2.0, 0.05).event, 300)
    continuous = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(2.0)), 300)
    reference = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=1e-3).compose(continuous).get_epsilon(1e-5)
    assert epsilon_of(ours, 1e-5, 1e-3) == pytest.approx(reference, rel=0.01)


def test_pate_histogram_has_l2_sensitivity_root_two():
    mech = Gaussian(6.0, linf_sensitivity=1, max_changed=2)
    assert mech.sensitivity == pytest.approx(math.sqrt(2))
    reference = pld_privacy_accountant.PLDAccountant().compose(
        dp_event.GaussianDpEvent(6.0 / math.sqrt(2))).get_epsilon(1e-6)
    assert epsilon_of(mech.event, 1e-6) == pytest.approx(reference, rel=0.01)


def test_pure_events_compose_beside_gaussians_between_max_and_sum():
    pure, gauss = PureDpEvent(0.3), dp_event.GaussianDpEvent(4.0)
    delta = 1e-5
    both = dp_event.ComposedDpEvent([pure, pure, gauss])
    eps_both = epsilon_of(both, delta)
    eps_gauss = epsilon_of(gauss, delta)
    assert max(eps_gauss, 0.6) < eps_both < 0.6 + eps_gauss
    # an ε-DP event never costs more than ε, and two cost at most 2ε (basic composition)
    assert epsilon_of(pure, 1e-12) <= 0.3 + 1e-4
    # RDP cross-check is an upper bound of the same order
    assert eps_both <= rdp_epsilon([both], delta) < 3 * eps_both


def test_pld_of_pure_events_beats_basic_composition_and_matches_advanced_bound():
    """100 compositions of 0.05-DP: optimal composition is far below 5 and below the
    advanced-composition bound kε(e^ε-1)/(e^ε+1) + ε√(2k ln 1/δ)."""
    k, eps, delta = 100, 0.05, 1e-6
    ours = epsilon_of(dp_event.SelfComposedDpEvent(PureDpEvent(eps), k), delta)
    advanced = k * eps * math.expm1(eps) / (math.exp(eps) + 1) + eps * math.sqrt(
        2 * k * math.log(1 / delta))
    assert ours < advanced < k * eps


def test_approximate_event_spends_its_delta_outside_the_pld():
    inner = dp_event.SelfComposedDpEvent(PureDpEvent(0.1), 5)
    assert epsilon_of(ApproximateDpEvent(inner, 4e-6), 1e-5) == pytest.approx(
        epsilon_of(inner, 6e-6), abs=1e-9)
    assert epsilon_of(ApproximateDpEvent(inner, 1e-5), 1e-5) == math.inf


def test_sampling_rate_a_hair_below_one_accounts_as_rate_one():
    """dp_accounting's subsampled discrete-Gaussian PLD fails at q = 1 - 2⁻⁵³; rate 1 bounds it."""
    almost = SubsampledGaussianHistogram(1.0, 1 - 2**-53).event
    full = SubsampledGaussianHistogram(1.0, 1.0).event
    assert epsilon_of(almost, 1e-5, 1e-3) == epsilon_of(full, 1e-5, 1e-3)
