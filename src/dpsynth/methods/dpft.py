"""DP fine-tuning baseline (Yue et al. 2023), the one every seed compares against: the same
DP-Adam on the same public LM as CTCL, with no topic conditions (the label only, if any)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from dpsynth.methods.ctcl import Ctcl, LmTrainingParams


class DpFinetune(Ctcl):
    name: ClassVar[str] = "dpft"
    Params: ClassVar[type[BaseModel]] = LmTrainingParams
    params: LmTrainingParams  # type: ignore[assignment]
    uses_topics: ClassVar[bool] = False
