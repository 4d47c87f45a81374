"""A unit of k records moves a count histogram by k in total, in one bin or spread over
several. The histogram mechanisms charge one coordinate moving by k; these tests check,
against privacy loss distributions built by dp_accounting itself, that every spread of the k
counts costs no more than that, and that the old charge (k coordinates moving by one) was too
small."""

from __future__ import annotations

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpsynth.privacy import Gaussian, Laplace

FRACTIONS = [0.1, 0.3, 0.5, 0.7, 0.9]
"""Where δ(ε) is compared, as fractions of the worst case's largest loss: at that loss itself
both curves are zero and the PLD's pessimistic discretisation leaves noise of order 1e-5."""


def _splits(k: int) -> list[list[int]]:
    """The ways k records can fall into bins: the partitions of k."""
    if k == 0:
        return [[]]
    out = []

    def grow(rest: int, largest: int, parts: list[int]) -> None:
        if rest == 0:
            out.append(parts)
            return
        for part in range(min(rest, largest), 0, -1):
            grow(rest - part, part, [*parts, part])

    grow(k, k, [])
    return out


def _composed(make, shifts: list[int]) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's PLD of the coordinates moving by `shifts`, composed."""
    plds = [make(s) for s in shifts]
    total = plds[0]
    for pld in plds[1:]:
        total = total.compose(pld)
    return total


def _laplace_pld(scale: float, shifts: list[int]) -> pld_lib.PrivacyLossDistribution:
    return _composed(lambda s: pld_lib.from_discrete_laplace_mechanism(
        1 / scale, sensitivity=s, value_discretization_interval=1e-4), shifts)


def _gaussian_pld(sigma: float, shifts: list[int]) -> pld_lib.PrivacyLossDistribution:
    return _composed(lambda s: pld_lib.from_gaussian_mechanism(
        sigma, sensitivity=s, value_discretization_interval=1e-4), shifts)


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize(("pld", "scale", "epsilons"), [
    (_laplace_pld, 3.0, lambda k: [f * k / 3.0 for f in FRACTIONS]),
    (_gaussian_pld, 4.0, lambda k: [0.1, 0.5, 1.0, 2.0]),
], ids=["laplace", "gaussian"])
def test_one_bin_moving_by_k_is_the_worst_spread(k, pld, scale, epsilons):
    worst = pld(scale, [k])
    for split in _splits(k):
        spread = pld(scale, split)
        for eps in epsilons(k):
            assert spread.get_delta_for_epsilon(eps) <= worst.get_delta_for_epsilon(eps) + 1e-9


def _epsilon(event, delta: float) -> float:
    from dpsynth.privacy.events import PldAccountant

    accountant = PldAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def test_histogram_mechanisms_charge_k_in_one_bin():
    delta, k = 1e-5, 3
    # the charge the recipes plan now: sensitivity k in one coordinate
    laplace, gaussian = Laplace(10.0, linf_sensitivity=k), Gaussian(8.0, linf_sensitivity=k)
    reference_laplace = _laplace_pld(10.0, [k]).get_epsilon_for_delta(delta)
    reference_gaussian = _gaussian_pld(8.0, [k]).get_epsilon_for_delta(delta)
    assert _epsilon(laplace.event, delta) >= reference_laplace - 1e-3
    assert _epsilon(gaussian.event, delta) >= reference_gaussian - 1e-2
    # the charge before: k coordinates moving by one each, which all-in-one-bin exceeds
    assert _epsilon(Gaussian(8.0, max_changed=k).event, delta) < reference_gaussian
    assert _epsilon(Laplace(10.0, max_changed=k).event, delta) < reference_laplace
