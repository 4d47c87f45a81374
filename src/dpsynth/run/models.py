"""The run's generator and embedder: the caller's, or built from `backends:`, wrapped to
count their use and to ask by the public label names and document kind, and checked before
any release."""

from __future__ import annotations

import logging

from dpsynth.backends import Embedder, Generator, build_embedder, build_generator
from dpsynth.backends.base import UnusedGenerator
from dpsynth.backends.config import GeneratorConfig, SmolLMConfig
from dpsynth.backends.generators.counting import CountingGenerator
from dpsynth.backends.generators.label_names import with_public_names
from dpsynth.backends.health import check_backends
from dpsynth.config import RunConfig
from dpsynth.methods.base import Recipe

log = logging.getLogger(__name__)


def build_models(config: RunConfig, recipe: Recipe, seed: int, embedder: Embedder | None,
                 generator: Generator | None) -> tuple[Generator, Embedder]:
    """(generator, embedder), each answering its health check. The generator is checked
    before the embedder loads, so a dead server fails fast."""
    backends = config.backends
    if generator is None:
        generator = (build_generator(_seeded(backends.generator, seed), base_dir=config.base_dir)
                     if recipe.uses_backend_generator else UnusedGenerator())
    generator = CountingGenerator(with_public_names(generator, config.data.label_names,
                                                    config.data.document))
    if recipe.uses_backend_generator:
        check_backends(generator=generator)
    elif backends.generator != SmolLMConfig():
        log.warning("%s samples the LM it fine-tunes with DP: backends.generator is not used",
                    config.recipe.name)
    embedder = embedder or build_embedder(backends.embedder, base_dir=config.base_dir)
    check_backends(embedder=embedder)
    return generator, embedder


def _seeded(cfg: GeneratorConfig, seed: int) -> GeneratorConfig:
    """The public seed (the config's, or one drawn once per output folder and journaled)
    seeds the generator unless the config sets its own: same seed, same local backends, same
    output, and a restart regenerates what its replayed releases were computed on."""
    return cfg if cfg.seed is not None else cfg.model_copy(update={"seed": seed})
