"""Build backends by name from the config: adding a backend is a new file, its config model
in `backends/config.py` (a member of the union of its kind) and one entry here.

A builder takes the config section, with its relative paths already read against `base_dir`
(the config file's folder). `build_*` wraps the result in the content cache when the section
names a `cache:` file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dpsynth.backends.base import Embedder, Generator
from dpsynth.backends.config import (
    EmbedderConfig,
    GeneratorConfig,
    HFConfig,
    MiniLMConfig,
    OfflineConfig,
    OpenAIChatConfig,
    OpenAIEmbeddingsConfig,
    PoolConfig,
    SentenceTransformersConfig,
    SmolLMConfig,
    TfidfConfig,
)
from dpsynth.errors import ConfigError

C = TypeVar("C", EmbedderConfig, GeneratorConfig)


def _with_paths_resolved(cfg: C, base_dir: Path | None) -> C:
    """The section with its file paths read relative to the config's folder: `cache`,
    `fit_texts`, a `prompts` file, and `model` where that names an existing folder there."""
    if base_dir is None:
        return cfg
    update: dict[str, object] = {}
    for key in ("cache", "fit_texts", "path", "index_dir"):
        value = getattr(cfg, key, None)
        if value is not None and not Path(value).is_absolute():
            update[key] = base_dir / value
    prompts = getattr(cfg, "prompts", None)
    if prompts and prompts.endswith((".yaml", ".yml")) and not Path(prompts).is_absolute():
        update["prompts"] = str(base_dir / prompts)
    model = getattr(cfg, "model", None)
    if model and not Path(model).is_absolute() and (base_dir / model).exists():
        update["model"] = str(base_dir / model)
    if isinstance(cfg, PoolConfig):
        update["embedder"] = _with_paths_resolved(cfg.embedder, base_dir)
        if cfg.edit is not None:
            update["edit"] = _with_paths_resolved(cfg.edit, base_dir)
    return cfg.model_copy(update=update) if update else cfg


def _minilm(cfg: MiniLMConfig) -> Embedder:
    from dpsynth.backends.embedders.sentence_transformer import (
        SentenceTransformerEmbedder,
        minilm_path,
    )

    return SentenceTransformerEmbedder(cfg.model or minilm_path(),
                                       batch_size=cfg.batch_size)


def _sentence_transformers(cfg: SentenceTransformersConfig) -> Embedder:
    from dpsynth.backends.embedders.sentence_transformer import SentenceTransformerEmbedder

    if cfg.model is None:
        raise ConfigError("backends.embedder.model: a sentence-transformers model folder is "
                          "required for name: sentence-transformers")
    return SentenceTransformerEmbedder(cfg.model, batch_size=cfg.batch_size)


def _openai_embedder(cfg: OpenAIEmbeddingsConfig) -> Embedder:
    from dpsynth.backends.embedders.openai import OpenAIEmbedder

    return OpenAIEmbedder(cfg)


def _tfidf(cfg: TfidfConfig) -> Embedder:
    from dpsynth.backends.embedders.tfidf import TfidfEmbedder, read_public_texts

    if cfg.fit_texts is None:
        raise ConfigError("backends.embedder.fit_texts: name a PUBLIC text file to fit the "
                          "tfidf embedder on (never the private data)")
    return TfidfEmbedder(read_public_texts(cfg.fit_texts, cfg.fit_text_column), dim=cfg.dim or 256)


def _openai_generator(cfg: OpenAIChatConfig) -> Generator:
    from dpsynth.backends.generators.prompt_sets import load_prompt_set
    from dpsynth.backends.http.chat import OpenAIChatGenerator

    return OpenAIChatGenerator(cfg, load_prompt_set(cfg.prompt_set()))


def _hf_generator(cfg: HFConfig) -> Generator:
    from dpsynth.backends.generators.hf import HFGenerator
    from dpsynth.backends.generators.prompt_sets import load_prompt_set

    if cfg.model is None:
        raise ConfigError("backends.generator.model: a local Hugging Face model folder is "
                          "required for name: hf")
    return HFGenerator(cfg.model, load_prompt_set(cfg.prompt_set()), cfg)


def _smollm(cfg: SmolLMConfig) -> Generator:
    from dpsynth.backends.generators.prompt_sets import load_prompt_set
    from dpsynth.backends.smollm.generator import SmolLMGenerator

    return SmolLMGenerator(load_prompt_set(cfg.prompt_set()), cfg)


EMBEDDERS: dict[str, Callable[[Any], Embedder]] = {
    "minilm": _minilm,
    "sentence-transformers": _sentence_transformers,
    "openai": _openai_embedder,
    "tfidf": _tfidf,
}


def _offline(cfg: OfflineConfig) -> Generator:
    from dpsynth.backends.offline.generator import OfflineGenerator

    return OfflineGenerator(cfg.model, temperature=cfg.temperature, top_p=cfg.top_p,
                            seed=cfg.seed, engine="int8" if cfg.int8 else "fast")


DEFAULT_POOL = Path(__file__).resolve().parents[1] / "assets" / "pool" / "public_pool.txt"
"""The shipped public pool (scripts/build_default_pool.py; its SOURCES.md gives the licences),
with its MiniLM embeddings stored beside it."""


def _pool(cfg: PoolConfig) -> Generator:
    from dpsynth.backends.pool.generator import PoolGenerator

    path = cfg.path if cfg.path is not None else DEFAULT_POOL
    pool = PoolGenerator(path, build_embedder(cfg.embedder), text_column=cfg.text_column,
                         max_texts=cfg.max_texts, candidates=cfg.candidates, seed=cfg.seed,
                         index_dir=cfg.index_dir)
    if cfg.edit is None:
        return pool
    from dpsynth.backends.pool.edit import EditedPool

    edit = cfg.edit if cfg.edit.seed is not None else cfg.edit.model_copy(
        update={"seed": cfg.seed})
    return EditedPool(pool, build_generator(edit), cfg.edit_strength)


GENERATORS: dict[str, Callable[[Any], Generator]] = {
    "smollm": _smollm,
    "offline": _offline,
    "openai": _openai_generator,
    "hf": _hf_generator,
    "pool": _pool,
}


def build_embedder(cfg: EmbedderConfig, base_dir: Path | None = None) -> Embedder:
    """The embedder named by `backends.embedder.name`, cached when `cache:` is set."""
    if cfg.name not in EMBEDDERS:
        raise ConfigError(f"backends.embedder.name: '{cfg.name}' is not available yet; "
                          f"choose one of {', '.join(EMBEDDERS)}")
    cfg = _with_paths_resolved(cfg, base_dir)
    embedder = EMBEDDERS[cfg.name](cfg)
    if cfg.cache is not None:
        from dpsynth.backends.cache import CachedEmbedder, ContentCache

        embedder = CachedEmbedder(embedder, ContentCache(cfg.cache))
    return embedder


def build_generator(cfg: GeneratorConfig, base_dir: Path | None = None) -> Generator:
    """The generator named by `backends.generator.name`, cached when `cache:` is set."""
    if cfg.name not in GENERATORS:
        raise ConfigError(f"backends.generator.name: '{cfg.name}' is not available yet; "
                          f"choose one of {', '.join(GENERATORS) or '(none registered)'}")
    cfg = _with_paths_resolved(cfg, base_dir)
    generator = GENERATORS[cfg.name](cfg)
    if cfg.cache is not None:
        from dpsynth.backends.cache import CachedGenerator, ContentCache

        dry_run = isinstance(cfg, OpenAIChatConfig) and cfg.dry_run
        generator = CachedGenerator(generator, ContentCache(cfg.cache), read_only=dry_run)
    return generator


def build_trainable_lm(source: str | Path | None = None, lora_rank: int = 0):
    """A local LM a recipe can DP-fine-tune and sample from: SmolLM2 (with LoRA adapters of
    `lora_rank`, 0 for none) when `source` is None, the shipped offline LM for 'offline', else
    the offline-format model folder `source`."""
    if source is None:
        from dpsynth.backends.smollm.trainable import SmolLMTrainable

        return SmolLMTrainable(lora_rank)
    from dpsynth.backends.offline.trainable import TrainableLM

    return TrainableLM(None if str(source) == "offline" else source)


def build_inversion_decoder(folder: str | Path | None = None):
    """An embedding→text decoder and, through its `scorer()`, the perplexity model it was
    trained beside (the shipped ones by default)."""
    from dpsynth.backends.offline.inversion import InversionDecoder

    return InversionDecoder(Path(folder) if folder else None)
