"""DP fine-tuning baseline (Yue et al. 2023), the one every seed compares against: the same
DP-Adam on the same public LM as CTCL, with no topic conditions (the label only, if any)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import BaseModel, Field

from dpsynth.data.facts import DataFacts
from dpsynth.methods.base import RunContext
from dpsynth.methods.ctcl import Ctcl, LmTrainingParams
from dpsynth.privacy.planning import BudgetPlan, StageSpec
from dpsynth.privacy.stages import LABEL_HISTOGRAM


class DpftParams(LmTrainingParams):
    label_fraction: float = Field(0.05, gt=0, lt=1, description="budget share of the DP label "
                                  "distribution")


class DpFinetune(Ctcl):
    name: ClassVar[str] = "dpft"
    Params: ClassVar[type[BaseModel]] = DpftParams
    params: DpftParams  # type: ignore[assignment]
    uses_topics: ClassVar[bool] = False

    def fixed_noise(self) -> dict[str, float]:
        return {}

    def condition_stages(self, private: DataFacts) -> list[StageSpec]:
        if not private.has_labels:
            return []
        return [StageSpec(LABEL_HISTOGRAM, "gaussian", self.params.label_fraction,
                          sensitivity=private.records_per_unit)]

    def condition_distribution(self, ctx: RunContext, plan: BudgetPlan) -> list[list[float]]:
        """The DP label distribution as one column (no topics)."""
        if not ctx.private.has_labels:
            return [[1.0]]
        probs = ctx.private.label_distribution(plan.stage(LABEL_HISTOGRAM))
        return np.asarray(probs)[:, None].tolist()
