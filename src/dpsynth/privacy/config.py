"""The `budget:` section of a run config: the (ε, δ) the whole run may spend."""

from __future__ import annotations

import logging
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dpsynth.errors import ConfigError

log = logging.getLogger(__name__)

MAX_EPSILON = 100.0


class BudgetConfig(BaseModel):
    """Total privacy budget; δ defaults to 1/(N·ln N) for N privacy units, as the seeds use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon: float = Field(description="total ε, in (0, 100]: far above any ε worth "
                           "defending, and where the accountants still compute")
    delta: float | None = Field(None, gt=0, lt=1, description="total δ in (0, 1); at least "
                                "1/N is refused unless delta_reason says why")
    delta_reason: str | None = Field(
        None, description="why a δ of at least 1/N is acceptable here (it allows a mechanism "
        "that publishes a whole record); recorded in the log")
    split: dict[str, float] | None = Field(
        None, description="fraction of the budget per stage; each recipe has a default"
    )
    noise: Literal["cryptographic", "seeded_not_private"] = Field(
        "cryptographic", description="where DP noise comes from. `seeded_not_private` draws it "
        "from the run's seed, so anyone with the seed can subtract it: a non-private "
        "reproduction, labelled NOT PRIVATE in every output"
    )

    @field_validator("epsilon")
    @classmethod
    def _sane_epsilon(cls, epsilon: float) -> float:
        if not 0 < epsilon <= MAX_EPSILON:  # also refuses nan and inf
            raise ValueError(f"{epsilon:g} is outside (0, {MAX_EPSILON:g}]; ε above about 10 "
                             "protects little, and the accountants overflow long before 1e12")
        return epsilon

    @property
    def private(self) -> bool:
        return self.noise == "cryptographic"


def default_delta(n_units: int) -> float:
    """δ = 1/(N·ln N), below 1/N so that releasing a whole record stays ruled out."""
    if n_units < 3:
        raise ValueError(f"need at least 3 privacy units for a default δ, got {n_units}")
    return 1.0 / (n_units * math.log(n_units))


def resolve_delta(budget: BudgetConfig, n_units: int) -> float:
    """The δ the run uses. A configured δ of at least 1/N allows a mechanism that publishes
    a whole record: refused, unless `delta_reason` says why it is wanted (then logged)."""
    if budget.delta is None:
        return default_delta(n_units)
    if budget.delta >= 1.0 / n_units:
        what = (f"budget.delta={budget.delta:g} is at least 1/N={1.0 / n_units:g} for N = "
                f"{n_units} privacy units: such a δ allows a mechanism that publishes a whole "
                "record")
        if budget.delta_reason is None:
            raise ConfigError(f"{what}; use at most {default_delta(max(n_units, 3)):.3g} (or "
                              "leave delta out for 1/(N·ln N)), or say why in "
                              "budget.delta_reason")
        log.warning("%s; accepted because budget.delta_reason: %s", what, budget.delta_reason)
    return budget.delta
