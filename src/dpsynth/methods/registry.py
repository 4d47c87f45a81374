"""Recipes by name: adding a recipe is a module and one entry here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpsynth.methods.base import Recipe
from dpsynth.methods.ctcl import Ctcl
from dpsynth.methods.dp_decoding import DpDecoding
from dpsynth.methods.dpft import DpFinetune
from dpsynth.methods.dpga import Dpga
from dpsynth.methods.eda import Eda
from dpsynth.methods.kd_tutor import KdTutor
from dpsynth.methods.pe import PrivateEvolution

if TYPE_CHECKING:  # the config validates recipe names against RECIPES: it imports this module
    from dpsynth.config import RecipeConfig

RECIPES: dict[str, type[Recipe]] = {"ctcl": Ctcl, "dp_decoding": DpDecoding,
                                     "dpft": DpFinetune, "dpga": Dpga, "eda": Eda,
                                     "kd_tutor": KdTutor, "pe": PrivateEvolution}


def build_recipe(cfg: RecipeConfig, split: dict[str, float] | None = None) -> Recipe:
    """The recipe named in the config, its params validated; `split` is `budget.split`."""
    return RECIPES[cfg.name].from_config(cfg.params, split)
