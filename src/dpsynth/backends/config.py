"""The `backends:` section of a run config: which embedder and generator to build."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["minilm", "sentence-transformers", "openai", "tfidf"] = "minilm"
    model: str | None = Field(None, description="model path or name, where the backend takes one")
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    batch_size: int = Field(64, gt=0)
    allow_remote_on_private: bool = Field(
        False, description="explicit opt-in to send private text to a remote embedder"
    )


class GeneratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["offline", "openai", "hf"] = "offline"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    concurrency: int = Field(8, gt=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(None, description="fixes sampling in local generators; "
                             "omit for fresh randomness")


class BackendsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    embedder: EmbedderConfig = EmbedderConfig()
    generator: GeneratorConfig = GeneratorConfig()
