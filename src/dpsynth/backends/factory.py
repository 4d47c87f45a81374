"""Build backends by name from the config: adding a backend is one entry here and a new file."""

from __future__ import annotations

from collections.abc import Callable

from dpsynth.backends.base import Embedder, Generator
from dpsynth.backends.config import EmbedderConfig, GeneratorConfig
from dpsynth.errors import ConfigError


def _minilm(cfg: EmbedderConfig) -> Embedder:
    from dpsynth.backends.sentence_transformer import SentenceTransformerEmbedder, minilm_path

    return SentenceTransformerEmbedder(cfg.model or minilm_path(), batch_size=cfg.batch_size)


def _sentence_transformers(cfg: EmbedderConfig) -> Embedder:
    from dpsynth.backends.sentence_transformer import SentenceTransformerEmbedder

    if cfg.model is None:
        raise ConfigError("backends.embedder.model: a sentence-transformers model folder is "
                          "required for name: sentence-transformers")
    return SentenceTransformerEmbedder(cfg.model, batch_size=cfg.batch_size)


EMBEDDERS: dict[str, Callable[[EmbedderConfig], Embedder]] = {
    "minilm": _minilm,
    "sentence-transformers": _sentence_transformers,
}
def _offline(cfg: GeneratorConfig) -> Generator:
    from dpsynth.backends.offline.generator import OfflineGenerator

    return OfflineGenerator(cfg.model, temperature=cfg.temperature, top_p=cfg.top_p,
                            seed=cfg.seed)


GENERATORS: dict[str, Callable[[GeneratorConfig], Generator]] = {
    "offline": _offline,
}


def build_embedder(cfg: EmbedderConfig) -> Embedder:
    """The embedder named by `backends.embedder.name`."""
    if cfg.name not in EMBEDDERS:
        raise ConfigError(f"backends.embedder.name: '{cfg.name}' is not available yet; "
                          f"choose one of {', '.join(EMBEDDERS)}")
    return EMBEDDERS[cfg.name](cfg)


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The generator named by `backends.generator.name`."""
    if cfg.name not in GENERATORS:
        raise ConfigError(f"backends.generator.name: '{cfg.name}' is not available yet; "
                          f"choose one of {', '.join(GENERATORS) or '(none registered)'}")
    return GENERATORS[cfg.name](cfg)
