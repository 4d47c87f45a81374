"""Privacy events dp_accounting lacks, the accountants that compose them, and their JSON form.

A release is described by an immutable `dp_accounting.DpEvent` computed from the mechanism's
parameters alone. Four mechanism families need events dp_accounting does not ship:

* `PureDpEvent(epsilon)` — any ε-DP mechanism (SVT, the exponential mechanism). Its PLD is the
  dominating pair of a generic ε-DP mechanism (`from_privacy_parameters(ε, 0)`): sound for
  every ε-DP mechanism and tight for the worst of them, so PLD composition of these events is
  the optimal composition of ε-DP mechanisms (Kairouz et al. 2015).
* `BoundedRangeDpEvent(epsilon)` — an ε-bounded-range selection (Durfee & Rogers 2019): for
  neighbours, ln(P[y|x]/P[y|x']) varies by at most ε over the outputs y. It is ε-DP, and its
  PLD is `PureDpEvent`'s; it is also ε²/8-zCDP (Cesar & Rogers 2021), which composes far
  better over many selections. `PldAccountant` therefore keeps a second bound beside the PLD
  whenever such an event is composed: the RDP of every event, ε²/8·α for these, converted by
  dp_accounting's RDP conversion. Both are valid upper bounds, so the smaller is (`spend`).
* `ApproximateDpEvent(event, delta)` — a mechanism whose privacy profile is at most
  `delta + δ_event(ε)` for every ε (LimitedDomain: the domain restriction fails with
  probability at most δ, outside of which it is `event`). The δ is added outside the PLD,
  exactly as Durfee & Rogers (2019) state the guarantee.
* `DiscreteGaussianDpEvent(sigma, sensitivity)` — the discrete Gaussian on the integers that
  dpsynth actually samples; dp_accounting has its PLD (also Poisson-subsampled) but no event.
  Its PLD is built with the connect-the-dots discretisation (Doroshenko et al. 2022), the one
  dp_accounting uses for the continuous Gaussian: also a pessimistic bound, and tighter than
  privacy buckets (≈8% in ε for 300 subsampled steps at σ=2).

All accounting is under add-or-remove-one-unit neighbouring (one record or one user).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import attr
import dp_accounting
import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

NeighborRel = dp_accounting.NeighboringRelation


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PureDpEvent(dp_event.DpEvent):
    """An ε-DP mechanism known only by its ε (SVT, exponential mechanism, report-noisy-max)."""

    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class BoundedRangeDpEvent(dp_event.DpEvent):
    """An ε-bounded-range mechanism: ε-DP and ε²/8-zCDP. Only a selection whose every
    output's log-odds between neighbours lie in one interval of width ε may claim it (the
    monotone LimitedDomain selection: Gumbel scale 1/ε over counts that only rise)."""

    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ApproximateDpEvent(dp_event.DpEvent):
    """`event` except on a failure event of probability ≤ `delta`: profile ≤ δ + δ_event(ε)."""

    event: dp_event.DpEvent
    delta: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DiscreteGaussianDpEvent(dp_event.DpEvent):
    """Discrete Gaussian noise, pmf ∝ exp(-x²/2σ²) on ℤ, added to an integer query of the
    given integer sensitivity."""

    sigma: float
    sensitivity: int


_EVENT_TYPES: dict[str, type[dp_event.DpEvent]] = {
    cls.__name__: cls
    for cls in (
        dp_event.NoOpDpEvent, dp_event.NonPrivateDpEvent, dp_event.GaussianDpEvent,
        dp_event.LaplaceDpEvent, dp_event.DiscreteLaplaceDpEvent, dp_event.PoissonSampledDpEvent,
        dp_event.SelfComposedDpEvent, dp_event.ComposedDpEvent, dp_event.ZCDpEvent,
        PureDpEvent, BoundedRangeDpEvent, ApproximateDpEvent, DiscreteGaussianDpEvent,
    )
}


def event_to_json(event: dp_event.DpEvent) -> dict[str, Any]:
    """A JSON-able dict of `event`, nested events included, tagged with the class name."""
    name = type(event).__name__
    if name not in _EVENT_TYPES:
        raise ValueError(f"event type {name} cannot be recorded in a ledger")
    out: dict[str, Any] = {"type": name}
    for field in attr.fields(type(event)):
        value = getattr(event, field.name)
        if isinstance(value, dp_event.DpEvent):
            value = event_to_json(value)
        elif isinstance(value, list | tuple):
            value = [event_to_json(v) for v in value]
        out[field.name] = value
    return out


def event_from_json(data: dict[str, Any]) -> dp_event.DpEvent:
    """Inverse of `event_to_json`; refuses unknown types so a tampered file cannot load."""
    kind = data.get("type")
    if kind not in _EVENT_TYPES:
        raise ValueError(f"unknown privacy event type {kind!r}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key == "type":
            continue
        if isinstance(value, dict):
            value = event_from_json(value)
        elif isinstance(value, list):
            value = [event_from_json(v) for v in value]
        kwargs[key] = value
    return _EVENT_TYPES[kind](**kwargs)


def additive_delta(event: dp_event.DpEvent, count: int = 1) -> float:
    """Total δ that `ApproximateDpEvent`s inside `event` add outside the PLD."""
    if isinstance(event, ApproximateDpEvent):
        return count * event.delta + additive_delta(event.event, count)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return additive_delta(event.event, count * event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return sum(additive_delta(e, count) for e in event.events)
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        return additive_delta(event.event, count)
    return 0.0


class PldAccountant(pld_privacy_accountant.PLDAccountant):
    """dp_accounting's PLD accountant, extended to dpsynth's event types.

    `get_epsilon(δ)` spends the δ of `ApproximateDpEvent`s first and asks the PLD for the
    ε at the remaining δ; it is +inf when those alone exceed δ. Once a `BoundedRangeDpEvent`
    has been composed it answers the smaller of that and the RDP bound (`spend`).
    """

    def __init__(self, value_discretization_interval: float = 1e-4) -> None:
        super().__init__(NeighborRel.ADD_OR_REMOVE_ONE, value_discretization_interval)
        self.additive_delta = 0.0
        self.bounded_range = False
        self._composed: list[tuple[dp_event.DpEvent, int]] = []

    @property
    def pld(self) -> pld_lib.PrivacyLossDistribution:
        return self._pld

    @property
    def is_private(self) -> bool:
        """False once a `NonPrivateDpEvent` (or a zero-noise event) has been composed."""
        return not self._contains_non_dp_event

    @property
    def rdp(self) -> np.ndarray:
        """The composed events' RDP curve at `RDP_ORDERS` (computed when asked: calibration
        composes thousands of events that never need it)."""
        return sum((count * rdp_curve(e) for e, count in self._composed),
                   np.zeros(len(RDP_ORDERS)))

    def compose(self, event: dp_event.DpEvent, count: int = 1) -> PldAccountant:
        super().compose(event, count)
        self._composed.append((event, count))
        self.bounded_range = self.bounded_range or holds_bounded_range(event)
        return self

    def _compose_pld(self, pld: pld_lib.PrivacyLossDistribution, count: int) -> None:
        self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)

    def _maybe_compose(self, event, count, do_compose):
        vdi = self._value_discretization_interval
        if isinstance(event, PureDpEvent | BoundedRangeDpEvent):  # ε-BR is ε-DP
            if event.epsilon < 0 or not math.isfinite(event.epsilon):
                return self.CompositionErrorDetails(event, "epsilon must be finite and >= 0")
            if do_compose and event.epsilon > 0:
                params = pld_common.DifferentialPrivacyParameters(event.epsilon, 0.0)
                self._compose_pld(pld_lib.from_privacy_parameters(params, vdi), count)
            return None
        if isinstance(event, ApproximateDpEvent):
            if not 0 <= event.delta < 1:
                return self.CompositionErrorDetails(event, "delta must be in [0, 1)")
            if do_compose:
                self.additive_delta += count * event.delta
            return self._maybe_compose(event.event, count, do_compose)
        sampled = isinstance(event, dp_event.PoissonSampledDpEvent)
        inner = event.event if sampled else event
        if isinstance(inner, DiscreteGaussianDpEvent):
            if inner.sigma <= 0 or inner.sensitivity < 1:
                return self.CompositionErrorDetails(event, "need sigma > 0, sensitivity >= 1")
            rate = event.sampling_probability if sampled else 1.0
            if rate > 1 - 1e-12:  # dp_accounting fails a hair below 1; rate 1 is an upper bound
                rate = 1.0
            if do_compose and rate > 0:
                self._compose_pld(pld_lib.from_discrete_gaussian_mechanism(
                    inner.sigma, sensitivity=inner.sensitivity, value_discretization_interval=vdi,
                    sampling_prob=rate, use_connect_dots=True), count)
            return None
        return super()._maybe_compose(event, count, do_compose)

    def get_epsilon(self, target_delta: float) -> float:
        left = target_delta - self.additive_delta
        if left <= 0:
            return math.inf
        pld = super().get_epsilon(left)
        return spend(pld, self.rdp if self.bounded_range else None, left)


RDP_ORDERS = tuple(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
"""The orders of every RDP curve dpsynth keeps (dp_accounting's defaults)."""


def _contains(event: dp_event.DpEvent, found: Callable[[dp_event.DpEvent], bool]) -> bool:
    """Whether `event` or one nested in it (composed, self-composed, sampled, approximate)
    is `found`."""
    if found(event):
        return True
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(_contains(e, found) for e in event.events)
    inner = getattr(event, "event", None)
    return isinstance(inner, dp_event.DpEvent) and _contains(inner, found)


def holds_bounded_range(event: dp_event.DpEvent) -> bool:
    """Whether a `BoundedRangeDpEvent` is part of `event`."""
    return _contains(event, lambda e: isinstance(e, BoundedRangeDpEvent))


def _sampled_discrete_gaussian(event: dp_event.DpEvent) -> bool:
    return isinstance(event, dp_event.PoissonSampledDpEvent) \
        and isinstance(event.event, DiscreteGaussianDpEvent)


def rdp_curve(event: dp_event.DpEvent) -> np.ndarray:
    """`event`'s RDP at `RDP_ORDERS`, by dp_accounting's RDP accountant on `rdp_counterpart`;
    +inf where that is not known to bound it. A Poisson-sampled discrete Gaussian is such a
    case: its Rényi divergences equal the continuous one's at integer orders only, and
    dp_accounting also uses fractional ones."""
    counterpart = rdp_counterpart(event)
    accountant = rdp_privacy_accountant.RdpAccountant(RDP_ORDERS)
    if _contains(event, _sampled_discrete_gaussian) or not accountant.supports(counterpart):
        return np.full(len(RDP_ORDERS), np.inf)
    return accountant.compose(counterpart).rdp


def spend(pld_epsilon: float, rdp: np.ndarray | None, delta: float) -> float:
    """The ε dpsynth charges at `delta` (the δ left after additive δs): the PLD's, or — given
    the RDP curve of events among which is a bounded-range one — the curve's when smaller.
    Each is an upper bound on the same composed mechanism at the same δ, so their minimum is
    one too. Without a bounded-range event (rdp None) the figure stays the PLD's, the tighter
    for every other event."""
    if rdp is None:
        return pld_epsilon
    return min(pld_epsilon, float(rdp_privacy_accountant.compute_epsilon(
        np.asarray(RDP_ORDERS), rdp, delta)[0]))


def rdp_counterpart(event: dp_event.DpEvent) -> dp_event.DpEvent:
    """An event the RDP accountant understands whose RDP curve bounds `event`'s.

    ε-DP ⇒ ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4); ε-BR ⇒ ε²/8-zCDP (Cesar & Rogers 2021);
    the discrete Gaussian has the Rényi divergences of the continuous one (Canonne, Kamath &
    Steinke 2020), so it maps to a Gaussian with multiplier σ/Δ.
    """
    if isinstance(event, PureDpEvent):
        return dp_event.ZCDpEvent(event.epsilon**2 / 2)
    if isinstance(event, BoundedRangeDpEvent):
        return dp_event.ZCDpEvent(event.epsilon**2 / 8)
    if isinstance(event, dp_event.DiscreteLaplaceDpEvent):
        return dp_event.ZCDpEvent((event.noise_parameter * event.sensitivity) ** 2 / 2)
    if isinstance(event, DiscreteGaussianDpEvent):
        return dp_event.GaussianDpEvent(event.sigma / event.sensitivity)
    if isinstance(event, ApproximateDpEvent):
        return rdp_counterpart(event.event)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(rdp_counterpart(event.event), event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent([rdp_counterpart(e) for e in event.events])
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        return dp_event.PoissonSampledDpEvent(event.sampling_probability,
                                              rdp_counterpart(event.event))
    return event


def rdp_epsilon(events: list[dp_event.DpEvent], delta: float) -> float:
    """ε of the composed events by the RDP accountant (the cross-check of the PLD answer)."""
    extra = sum(additive_delta(e) for e in events)
    if extra >= delta:
        return math.inf
    accountant = rdp_privacy_accountant.RdpAccountant()
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # orders that fail to converge are dropped, soundly; no noise
    try:
        for event in events:
            accountant.compose(rdp_counterpart(event))
        return accountant.get_epsilon(delta - extra)
    finally:
        absl.setLevel(level)
