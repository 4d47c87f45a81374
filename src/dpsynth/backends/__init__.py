"""Backends: embedders and generators behind one interface each, chosen by name in the config."""

from dpsynth.backends.base import BLANK, FAILED, BackendError, Condition, Embedder, Generator
from dpsynth.backends.factory import (
    build_embedder,
    build_generator,
    build_inversion_decoder,
    build_trainable_lm,
)

__all__ = ["BLANK", "FAILED", "BackendError", "Condition", "Embedder", "Generator",
           "build_embedder", "build_generator", "build_inversion_decoder",
           "build_trainable_lm"]
