"""The `backends:` section of a run config: which embedder and generator to build."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dpsynth.backends.pool.generator import DEFAULT_CANDIDATES, DEFAULT_MAX_TEXTS


class Price(BaseModel):
    """US dollars per million tokens, for the cost estimate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, description="US dollars per million prompt tokens")
    output: float = Field(0.0, ge=0, description="US dollars per million completion tokens")


class HttpConfig(BaseModel):
    """How an OpenAI-compatible client talks to its server (shared by embedder and generator)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: float | None = Field(None, gt=0, description="the server's request "
                                              "rate limit; requests are paced under it")
    tokens_per_minute: float | None = Field(None, gt=0, description="the server's token rate "
                                            "limit; requests are paced under it")
    timeout_s: float = Field(60.0, gt=0, description="per request, connect to last byte")
    max_retries: int = Field(6, ge=0, description="retries of one request on 429/5xx/timeouts")
    backoff_s: float = Field(1.0, gt=0, description="first backoff; doubles each retry")
    max_backoff_s: float = Field(60.0, gt=0, description="the longest wait between retries")
    api_version: str | None = Field(
        None, description="Azure-style endpoint: sent as ?api-version= with an api-key header"
    )


REMOTE_EMBEDDING_ASSUMPTION = (  # privacy.json "assumes" and the report
    "private text was embedded by a remote server (allow_remote_on_private): the ε holds only "
    "if the server embeds each text independently of the texts it batches it with; padding "
    "or batch-dependent arithmetic there can move other records' votes, which no client can "
    "rule out")


class EmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["minilm", "sentence-transformers", "openai", "tfidf"] = Field(
        "minilm", description="the bundled all-MiniLM-L6-v2, a local sentence-transformers "
        "folder, an OpenAI-compatible embeddings endpoint, or TF-IDF/LSA fitted on public text")
    model: str | None = Field(None, description="model path or name, where the backend takes one")
    base_url: str | None = Field(None, description="openai: the server's URL, up to /v1")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    batch_size: int = Field(64, gt=0, description="texts embedded per call")
    concurrency: int = Field(4, gt=0, description="openai: requests in flight at once")
    allow_remote_on_private: bool = Field(
        False, description="explicit opt-in to send private text to a remote embedder"
    )
    dim: int | None = Field(
        None, gt=0, description="output dimension: tfidf's SVD size; for openai, the "
        "'dimensions' request field (models that support it)"
    )
    fit_texts: Path | None = Field(
        None, description="tfidf: a PUBLIC text file (.txt one text per line, or csv/jsonl/"
        "parquet/hf with fit_text_column) the vectoriser is fit on; never the private data"
    )
    fit_text_column: str = Field("text", description="tfidf: the column of fit_texts to read "
                                 "(a table)")
    http: HttpConfig = Field(HttpConfig(), description="openai: rate limits, timeouts, retries")
    price: Price | None = Field(None, description="overrides the built-in price table")
    cache: Path | None = Field(
        None, description="SQLite file caching embeddings of public and synthetic text"
    )


SMOLLM_SAMPLING = (0.7, 0.9)
"""smollm's default temperature and top-p: on-task rates measured in docs/backends.md#smollm."""


class GeneratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["smollm", "offline", "openai", "hf", "pool"] = Field(
        "smollm", description="smollm: SmolLM2-135M-Instruct on this machine; offline: the "
        "7.4M LM dpsynth trained; openai: an OpenAI-compatible server; hf: a local Hugging "
        "Face model folder; pool: DP selection among public texts (docs/backends.md)")
    model: str | None = Field(None, description="openai: the served model's name; hf: a local "
                              "model folder")
    base_url: str | list[str] | None = Field(
        None, description="openai: the server, or a list of servers of the same model: "
        "requests are spread over them (concurrency each), a failed one is retried on the "
        "next, and the health check drops a dead one with a warning"
    )
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    concurrency: int = Field(8, gt=0, description="openai: requests in flight at once")
    temperature: float | None = Field(
        None, ge=0, description="default: 0.7 for smollm (at 1.0 a 135M model drifts off "
        "task: docs/backends.md#smollm), 1.0 for the others")
    top_p: float | None = Field(None, gt=0, le=1,
                                description="default: 0.9 for smollm, 1.0 for the others")
    max_tokens: int = Field(512, gt=0, description="cap on generated tokens per output")
    seed: int | None = Field(None, ge=0,
                             description="sampling seed sent to / used by the backend")
    prompts: str | None = Field(
        None, description="openai, hf and smollm: a built-in prompt set (generic, small, "
        "mtsamples, openreview, pubmed) or a path to your own YAML prompt file (.yaml/.yml); "
        "default: small for smollm, generic for the others; the offline and pool generators "
        "have no prompt"
    )
    batch_size: int | None = Field(None, gt=0, description="hf and smollm: prompts per "
                                   "forward batch (default: hf 8, smollm 32)")
    engine: Literal["ct2-int8", "ct2-float32", "torch-float32", "torch-bfloat16",
                    "torch-int8"] = Field(
        "ct2-int8", description="smollm: how SmolLM2 runs on the CPU: ct2-int8 (CTranslate2 "
        "on int8 weights) measured about 3x transformers' float32 generate at +3.5% "
        "held-out perplexity; ct2-float32 keeps float32's perplexity "
        "(docs/backends.md#smollm)")
    threads: int | None = Field(None, gt=0, description="smollm: CPU threads (default: the "
                                "cores not busy when the generator is built)")
    int8: bool = Field(False, description="offline: sample on int8 dynamic-quantised "
                       "weights (about 2x faster; held-out perplexity +0.3%; "
                       "docs/offline_generator.md)")
    device: str | None = Field(None, description="hf: torch device (default cpu)")
    http: HttpConfig = Field(HttpConfig(), description="openai: rate limits, timeouts, retries")
    price: Price | None = Field(None, description="overrides the built-in price table")
    dry_run: bool = Field(
        False, description="count calls and tokens, send nothing, return placeholder text"
    )
    cache: Path | None = Field(
        None, description="SQLite file caching generations, so reruns pay nothing twice"
    )
    path: Path | None = Field(
        None, description="pool: the PUBLIC texts to retrieve from: a .txt file (one text per "
        "line), a folder of .txt files, or csv/jsonl/parquet/hf with text_column; never the "
        "private data. Omitted: the shipped pool (Wikipedia, Wikinews, Gutenberg, IMDB, SST-2)"
    )
    text_column: str = Field("text", description="pool: the text column of a table")
    max_texts: int = Field(
        DEFAULT_MAX_TEXTS, gt=0, description="pool: texts kept (a fixed subsample beyond it)"
    )
    candidates: int = Field(
        DEFAULT_CANDIDATES, gt=0, description="pool: generate draws among this many best "
        "matches; rewrite at strength 1 takes the candidates-th neighbour"
    )
    embedder: EmbedderConfig = Field(
        EmbedderConfig(), description="pool: the embedder that indexes the pool and embeds "
        "queries (public text only)"
    )
    index_dir: Path | None = Field(
        None, description="pool: folder for the pool's embeddings (default: beside the pool, "
        "else ~/.cache/dpsynth/pool)"
    )
    edit: GeneratorConfig | None = Field(
        None, description="pool: an LM that rewrites each retrieved text (AUG-PE style): "
        "smollm, offline, openai or hf, as a name or a full generator section"
    )
    edit_strength: float = Field(
        0.3, ge=0, le=1, description="pool with edit: how far the editor moves a retrieved text"
    )

    @field_validator("prompts")
    @classmethod
    def _a_known_prompt_set(cls, value: str | None) -> str | None:
        """A name that is no built-in set is a typo, found here rather than when the generator
        is built (or never, for a generator without prompts). Paths are checked on build."""
        from dpsynth.backends.generators.prompt_sets import builtin_prompt_sets

        if value is None:
            return value
        if Path(value).suffix in (".yaml", ".yml") or "/" in value or "\\" in value:
            return value
        if value not in builtin_prompt_sets():
            raise ValueError(f"'{value}' is no built-in prompt set "
                             f"({', '.join(builtin_prompt_sets())}); a file of your own "
                             "ends in .yaml")
        return value

    @field_validator("base_url")
    @classmethod
    def _some_servers(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError("a list of base URLs needs at least one, each once")
        return value

    @field_validator("edit", mode="before")
    @classmethod
    def _edit_by_name(cls, value: object) -> object:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _sampling_defaults(self) -> GeneratorConfig:
        """Fill unset sampling parameters with the backend's own defaults."""
        small = self.name == "smollm"
        if self.temperature is None:
            object.__setattr__(self, "temperature", SMOLLM_SAMPLING[0] if small else 1.0)
        if self.top_p is None:
            object.__setattr__(self, "top_p", SMOLLM_SAMPLING[1] if small else 1.0)
        return self

    @model_validator(mode="after")
    def _edit_only_for_pool(self) -> GeneratorConfig:
        if self.edit is not None:
            if self.name != "pool":
                raise ValueError(f"edit is an option of the pool generator, not of {self.name}")
            if self.edit.name == "pool" or self.edit.edit is not None:
                raise ValueError("edit names an LM (smollm, offline, openai or hf), not another "
                                 "pool")
        return self

    def prompt_set(self) -> str:
        """The prompt set to load: the one named, else the one written for this backend."""
        return self.prompts or ("small" if self.name == "smollm" else "generic")


class ExecutorConfig(BaseModel):
    """Where the private records are embedded and used: votes, ctcl's topics, kd_tutor's
    teachers (docs/backends.md#executor)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["local", "ray"] = Field("local", description="local: in this process; ray: "
                                          "sharded over Ray actors")
    address: str | None = Field(
        None, description="ray: null starts a cluster of this machine's own, bound to "
        "127.0.0.1 and stopped with the run; 'auto' joins the cluster `ray start` runs here; "
        "'ray://host:10001' joins a remote one through Ray Client"
    )
    workers: int = Field(2, gt=0, description="ray: shards of the private set, one actor "
                         "each, holding its shard's embeddings (kd_tutor: its teachers) in "
                         "memory while the recipe uses them")
    cpus_per_worker: float = Field(1.0, gt=0, description="ray: CPUs each actor reserves")
    search: Literal["exact", "hnsw", "ivf"] = Field(
        "exact", description="how a vote finds each private record's nearest candidate: "
        "exact, or faiss' approximate HNSW or IVF index for very large candidate sets (the "
        "same privacy charge: each record still casts one vote; docs/privacy.md)"
    )
    allow_object_spilling: bool = Field(
        False, description="ray, cluster started by dpsynth: let Ray spill its object store "
        "to spill_dir (off by default; private data never enters the object store either way)"
    )
    spill_dir: Path | None = Field(
        None, description="ray: the folder Ray may spill to; needs allow_object_spilling"
    )

    @model_validator(mode="after")
    def _spilling_is_explicit(self) -> ExecutorConfig:
        if self.allow_object_spilling != (self.spill_dir is not None):
            raise ValueError("allow_object_spilling: true and spill_dir go together: name the "
                             "folder Ray may spill its object store to, or neither")
        if self.allow_object_spilling and self.address is not None:
            raise ValueError("allow_object_spilling applies to the cluster dpsynth starts "
                             "(address: null); a running cluster keeps its own setting")
        return self


class BackendsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    embedder: EmbedderConfig = EmbedderConfig()
    generator: GeneratorConfig = GeneratorConfig()
    executor: ExecutorConfig = ExecutorConfig()
