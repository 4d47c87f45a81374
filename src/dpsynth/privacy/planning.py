"""Budget planning: from (ε, δ) and each stage's shape, the noise each stage needs.

Two steps. First every stage is calibrated alone to its fraction of the budget (fraction·ε,
fraction·δ). Then all noise scales are scaled by one common factor c until the composed ε —
all stages together, as the ledger spends it (PLD, or RDP where a bounded-range selection
makes that smaller) — meets ε exactly. c is usually below 1, PLD composition being tighter
than adding ε's; it is above 1 where the smaller of two accountants, taken per stage, adds
up to less than either one over all stages (a Laplace histogram beside a LimitedDomain
selection at ε = 40). The answer is re-checked with a fresh accountant. The stages keep the
proportions the fractions set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from dp_accounting import dp_event
from rich.table import Table

from dpsynth.errors import ConfigError
from dpsynth.privacy import mechanisms as m
from dpsynth.privacy.calibration import calibrate, epsilon_of
from dpsynth.privacy.events import additive_delta, rdp_epsilon

MechanismKind = Literal["laplace", "gaussian", "subsampled_gaussian", "svt", "limited_domain",
                        "noisy_mean", "dp_sgd", "exponential"]


@dataclass(frozen=True)
class StageSpec:
    """One stage of a recipe: `compositions` releases of one mechanism shape.

    `sensitivity` is the per-coordinate (L∞) sensitivity for laplace/gaussian, with
    `max_changed` coordinates moving (a histogram of k records per unit: sensitivity k,
    max_changed 1); the query sensitivity for svt; it must be 1
    for subsampled_gaussian and limited_domain. `selections` is k and `domain_size` K for
    limited_domain, whose fixed `delta` is spent per release outside the PLD; `monotonic`
    when its counts only grow as a unit is added (vote histograms), which halves its noise
    and makes each selection bounded-range (charged by the smaller of PLD and RDP).
    `dp_sgd` is a DP-SGD/DP-Adam step (noise drawn by opacus): its noise scale is the noise
    multiplier σ/C, its event a Poisson-sampled continuous Gaussian; one step per composition.
    `exponential` is one draw of the exponential mechanism (`ExponentialSample`) whose scores
    one unit moves within an interval of width `sensitivity`; its noise scale is the
    temperature, its event bounded-range with ε = sensitivity / temperature.
    """

    name: str
    mechanism: MechanismKind
    fraction: float
    sensitivity: float = 1.0
    compositions: int = 1
    sampling_rate: float = 1.0
    max_changed: int = 1
    selections: int = 1
    domain_size: int | None = None
    delta: float = 0.0
    monotonic: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ValueError(f"stage '{self.name}': fraction must be in (0, 1], "
                             f"got {self.fraction}")
        if self.compositions < 1:
            raise ValueError(f"stage '{self.name}': compositions must be >= 1, "
                             f"got {self.compositions}")
        if self.mechanism == "limited_domain" and not 0 < self.delta < 1:
            raise ValueError(f"stage '{self.name}': limited_domain needs delta in (0, 1)")
        if self.mechanism in ("subsampled_gaussian", "limited_domain", "dp_sgd") \
                and self.sensitivity != 1:
            raise ValueError(f"stage '{self.name}': {self.mechanism} has sensitivity 1, "
                             f"got {self.sensitivity}")
        if self.monotonic and (self.mechanism != "limited_domain" or self.sampling_rate != 1):
            raise ValueError(f"stage '{self.name}': monotonic (half the noise) holds only for "
                             "a limited_domain vote histogram without subsampling, where a "
                             "unit adds one vote")
        self.event_for(1.0)  # validates the remaining parameters

    def mechanism_for(self, noise_scale: float) -> m.Mechanism:
        """The mechanism of one release of this stage at the given noise scale."""
        kind, d = self.mechanism, self.sensitivity
        if kind == "laplace":
            return m.Laplace(noise_scale, d, self.max_changed, float(d).is_integer())
        if kind == "gaussian":
            return m.Gaussian(noise_scale, d, self.max_changed, float(d).is_integer())
        if kind == "subsampled_gaussian":
            return m.SubsampledGaussianHistogram(noise_scale, self.sampling_rate)
        if kind == "svt":
            return m.AboveThreshold(2 * d / noise_scale, 0.0, d)
        if kind == "noisy_mean":  # values in [-d, d]; the scale is the count's Laplace b
            probe = m.NoisyMean(1.0, -d, d)
            return m.NoisyMean(probe.noise_scale / noise_scale, -d, d)
        if kind == "limited_domain":
            return m.LimitedDomainTopK((1 if self.monotonic else 2) / noise_scale, self.delta,
                                       self.domain_size or self.selections, self.selections,
                                       monotonic=self.monotonic)
        if kind == "exponential":
            return m.ExponentialSample(noise_scale, d)
        if kind == "dp_sgd":
            raise ValueError(f"stage '{self.name}': dp_sgd noise is drawn by the trainer; "
                             "charge the stage's event instead")
        raise ValueError(f"stage '{self.name}': unknown mechanism {kind!r}")

    def release_event(self, noise_scale: float) -> dp_event.DpEvent:
        """The event of one release (one step, for dp_sgd) at the given noise scale."""
        if self.mechanism == "dp_sgd":
            if not 0 < self.sampling_rate <= 1:
                raise ValueError(f"stage '{self.name}': sampling_rate must be in (0, 1]")
            return dp_event.PoissonSampledDpEvent(self.sampling_rate,
                                                  dp_event.GaussianDpEvent(noise_scale))
        return self.mechanism_for(noise_scale).event

    def event_for(self, noise_scale: float) -> dp_event.DpEvent:
        """The event of the whole stage: `compositions` releases."""
        one = self.release_event(noise_scale)
        return one if self.compositions == 1 else dp_event.SelfComposedDpEvent(
            one, self.compositions)


@dataclass(frozen=True)
class StagePlan:
    spec: StageSpec
    noise_scale: float
    epsilon_alone: float

    @property
    def name(self) -> str:
        """The stage's name (`dpsynth.privacy.stages`), under which its releases are charged."""
        return self.spec.name

    @property
    def mechanism(self) -> m.Mechanism:
        """One release's mechanism; recipes copy its parameters (σ, b, ε per release)."""
        return self.spec.mechanism_for(self.noise_scale)

    @property
    def release_event(self) -> dp_event.DpEvent:
        """One release's event, for stages whose noise another library draws (dp_sgd)."""
        return self.spec.release_event(self.noise_scale)


@dataclass(frozen=True)
class BudgetPlan:
    epsilon: float
    delta: float
    stages: list[StagePlan] = field(default_factory=list)
    epsilon_composed: float = 0.0
    epsilon_rdp: float = 0.0

    def stage(self, name: str) -> StagePlan:
        for stage in self.stages:
            if stage.spec.name == name:
                return stage
        raise KeyError(f"no stage named {name!r} in the plan")


def apply_split(stages: list[StageSpec], split: dict[str, float] | None) -> list[StageSpec]:
    """Override the recipe's default fractions with the config's `budget.split`."""
    if not split:
        return list(stages)
    names = {s.name for s in stages}
    unknown = sorted(set(split) - names)
    if unknown:
        raise ConfigError(f"budget.split: unknown stage(s) {unknown}; this recipe's stages are "
                          f"{sorted(names)}")
    try:
        out = [replace(s, fraction=split.get(s.name, s.fraction)) for s in stages]
    except ValueError as exc:
        raise ConfigError(f"budget.split: {exc}") from None
    total = sum(s.fraction for s in out)
    if total > 1 + 1e-9:
        raise ConfigError(f"budget.split: fractions sum to {total:g} > 1")
    return out


def plan_budget(epsilon: float, delta: float, stages: list[StageSpec], *,
                tighten: bool = True, discretization: float = 1e-4,
                fixed: dict[str, float] | None = None) -> BudgetPlan:
    """Noise scale per stage so that all stages composed by PLD spend at most (ε, δ).

    `fixed` pins some stages' noise scales (a paper's default σ); the others are calibrated
    around them, their common factor free to grow when the pinned stages cost more than their
    fractions.
    """
    fixed = fixed or {}
    names = [s.name for s in stages]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"fixed noise for unknown stage(s) {unknown}; stages are {names}")
    if not stages or len(set(names)) != len(names):
        raise ValueError(f"need at least one stage and unique stage names, got {names}")
    total_fraction = sum(s.fraction for s in stages)
    if total_fraction > 1 + 1e-9:
        raise ValueError(f"stage fractions sum to {total_fraction:g} > 1: {names}")
    fixed_delta = sum(additive_delta(s.event_for(1.0)) for s in stages)
    pld_delta = delta - fixed_delta
    if pld_delta <= 0:
        raise ValueError(f"fixed-δ stages need δ={fixed_delta:g}, the budget has {delta:g}")

    pinned = [s.event_for(fixed[s.name]) for s in stages if s.name in fixed]
    if pinned and epsilon_of(dp_event.ComposedDpEvent(pinned), delta, discretization) >= epsilon:
        raise ValueError(f"the fixed noise of {sorted(fixed)} alone spends the whole budget "
                         f"ε={epsilon}; give those stages more noise or the run more ε")
    alone = [fixed[s.name] if s.name in fixed else
             calibrate(s.event_for, epsilon * s.fraction,
                       pld_delta * s.fraction + additive_delta(s.event_for(1.0)),
                       discretization=discretization) for s in stages]

    def scale(stage: StageSpec, base: float, factor: float) -> float:
        return base if stage.name in fixed else base * factor

    def composed(factor: float) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent([s.event_for(scale(s, a, factor))
                                         for s, a in zip(stages, alone, strict=True)])

    factor = 1.0
    if tighten or fixed or epsilon_of(composed(factor), delta, discretization) > epsilon:
        # Stages calibrated alone may also compose past ε (see the module's docstring): the
        # common factor then grows above 1.
        factor = calibrate(composed, epsilon, delta, discretization=discretization, start=1.0)
    total = epsilon_of(composed(factor), delta, discretization)
    if not total <= epsilon:
        raise RuntimeError(f"plan spends ε={total} > {epsilon}; refusing it")
    plans = [StagePlan(s, scale(s, a, factor),
                       epsilon_of(s.event_for(scale(s, a, factor)), delta, discretization))
             for s, a in zip(stages, alone, strict=True)]
    return BudgetPlan(epsilon, delta, plans, total,
                      rdp_epsilon([p.spec.event_for(p.noise_scale) for p in plans], delta))


def plan_table(plan: BudgetPlan, title: str = "privacy plan") -> Table:
    """The plan as a rich table: one row per stage, then the composed total."""
    table = Table(title=title)
    for column in ("stage", "mechanism", "sensitivity", "compositions", "rate",
                   "noise scale", "ε alone", "ε share"):
        table.add_column(column, justify="left" if column in ("stage", "mechanism") else "right")
    for stage in plan.stages:
        s = stage.spec
        moved = f" on {s.max_changed} counts" if s.max_changed > 1 else ""  # kd's vote: L2 √2
        table.add_row(s.name, s.mechanism, f"{s.sensitivity:g}{moved}", str(s.compositions),
                      f"{s.sampling_rate:g}", f"{stage.noise_scale:.4g}",
                      f"{stage.epsilon_alone:.4g}", f"{s.fraction:.0%}")
    table.add_row("total", "", "", "", "", "", f"{plan.epsilon_composed:.4g}",
                  f"δ={plan.delta:.3g}", style="bold")
    if math.isfinite(plan.epsilon_rdp):
        table.caption = (f"RDP cross-check: ε ≤ {plan.epsilon_rdp:.4g} by the RDP accountant "
                         "alone; the ledger spends the total above (PLD, or RDP where "
                         "bounded-range draws make that smaller)")
    return table
