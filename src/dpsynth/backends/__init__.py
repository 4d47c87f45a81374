"""Backends: embedders and generators behind one interface each, chosen by name in the config."""

from dpsynth.backends.base import BLANK, Condition, Embedder, Generator

__all__ = ["BLANK", "Condition", "Embedder", "Generator"]
