"""The `backends:` section of a run config: which embedder and generator to build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dpsynth.backends.generators.prompt_sets import builtin_prompt_sets
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


BACKEND_NAME = "the backend this section configures"


def _named(value: object, default: str) -> object:
    """A section that names no backend is the default backend's (`generator: {seed: 3}` is
    smollm's)."""
    return {"name": default, **value} if isinstance(value, dict) and "name" not in value else value


def _name_is_set(section: BaseModel) -> None:
    """`name` counts as given even when the model's default chose it, so a dump of the set
    fields (`exclude_unset`) still says which backend it is and validates back to it."""
    section.__pydantic_fields_set__.add("name")


def _refuse_other_backends_keys(model: type[BaseModel], data: Any,
                                family: dict[str, type[BaseModel]], kind: str) -> Any:
    """A key of another backend given to this one: an error that names the key, this backend
    and the ones it belongs to (a key no backend has is left to the unknown-key error)."""
    if not isinstance(data, dict):
        return data
    for key in data:
        owners = [name for name, other in family.items() if key in other.model_fields]
        if key not in model.model_fields and owners:
            mine = model.model_fields["name"].default
            which = (owners[0] if len(owners) == 1
                     else f"{', '.join(owners[:-1])} and {owners[-1]}")
            raise ValueError(f"{key} is a key of the {which} {kind}{'s' * (len(owners) > 1)}, "
                             f"not of {mine}")
    return data


class EmbedderConfig(BaseModel):
    """What every embedder section takes; each backend's own model (below) adds its keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the embedder: minilm, sentence-transformers, openai or tfidf")
    cache: Path | None = Field(
        None, description="SQLite file caching embeddings of public and synthetic text"
    )
    allow_remote_on_private: bool = Field(
        False, description="explicit opt-in to send private text to a remote embedder"
    )

    @model_validator(mode="before")
    @classmethod
    def _keys_of_this_backend(cls, data: Any) -> Any:
        return _refuse_other_backends_keys(cls, data, EMBEDDER_CONFIGS, "embedder")

    def model_post_init(self, context: Any) -> None:
        _name_is_set(self)


class MiniLMConfig(EmbedderConfig):
    """The bundled all-MiniLM-L6-v2."""

    name: Literal["minilm"] = Field("minilm", description=BACKEND_NAME)
    model: str | None = Field(None, description="another copy of the model's folder")
    batch_size: int = Field(64, gt=0, description="texts embedded per call")


class SentenceTransformersConfig(EmbedderConfig):
    """A local sentence-transformers model folder."""

    name: Literal["sentence-transformers"] = Field("sentence-transformers",
                                                   description=BACKEND_NAME)
    model: str | None = Field(None, description="the model folder (required)")
    batch_size: int = Field(64, gt=0, description="texts embedded per call")


class OpenAIEmbeddingsConfig(EmbedderConfig):
    """An OpenAI-compatible embeddings endpoint."""

    name: Literal["openai"] = Field("openai", description=BACKEND_NAME)
    model: str | None = Field(None, description="the served model's name")
    base_url: str | None = Field(None, description="the server's URL, up to /v1")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    batch_size: int = Field(64, gt=0, description="texts embedded per request")
    concurrency: int = Field(4, gt=0, description="requests in flight at once")
    dim: int | None = Field(None, gt=0, description="the 'dimensions' request field (models "
                            "that support it)")
    http: HttpConfig = Field(HttpConfig(), description="rate limits, timeouts, retries")
    price: Price | None = Field(None, description="overrides the built-in price table")


class TfidfConfig(EmbedderConfig):
    """TF-IDF/LSA fitted on public text."""

    name: Literal["tfidf"] = Field("tfidf", description=BACKEND_NAME)
    dim: int | None = Field(None, gt=0, description="the SVD's output dimension (default 256)")
    fit_texts: Path | None = Field(
        None, description="a PUBLIC text file (.txt one text per line, or csv/jsonl/parquet/hf "
        "with fit_text_column) the vectoriser is fit on; never the private data (required)"
    )
    fit_text_column: str = Field("text", description="the column of fit_texts to read (a table)")


EMBEDDER_CONFIGS: dict[str, type[EmbedderConfig]] = {
    "minilm": MiniLMConfig, "sentence-transformers": SentenceTransformersConfig,
    "openai": OpenAIEmbeddingsConfig, "tfidf": TfidfConfig}

EmbedderChoice = Annotated[MiniLMConfig | SentenceTransformersConfig | OpenAIEmbeddingsConfig
                           | TfidfConfig, Field(discriminator="name")]
"""An embedder section: the model of the backend it names (minilm when it names none)."""


class GeneratorConfig(BaseModel):
    """What every generator section takes; each backend's own model (below) adds its keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the generator: smollm, offline, openai, hf or pool "
                      "(docs/backends.md)")
    seed: int | None = Field(None, ge=0,
                             description="sampling seed sent to / used by the backend")
    cache: Path | None = Field(
        None, description="SQLite file caching generations, so reruns pay nothing twice"
    )

    @model_validator(mode="before")
    @classmethod
    def _keys_of_this_backend(cls, data: Any) -> Any:
        return _refuse_other_backends_keys(cls, data, GENERATOR_CONFIGS, "generator")

    def model_post_init(self, context: Any) -> None:
        _name_is_set(self)


class SampledConfig(GeneratorConfig):
    """A generator that samples from an LM."""

    temperature: float = Field(1.0, ge=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling's top-p")

    @field_validator("temperature", "top_p", mode="before")
    @classmethod
    def _none_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """`null` asks for the backend's own default, as before per-backend configs."""
        return cls.model_fields[info.field_name].default if value is None else value


class PromptedConfig(SampledConfig):
    """A generator that prompts a chat model with a prompt set."""

    max_tokens: int = Field(512, gt=0, description="cap on generated tokens per output")
    prompts: str | None = Field(
        None, description="a built-in prompt set (generic, small, mtsamples, openreview, "
        "pubmed) or a path to your own YAML prompt file (.yaml/.yml); default: small for "
        "smollm, generic for the others"
    )

    @field_validator("prompts")
    @classmethod
    def _a_known_prompt_set(cls, value: str | None) -> str | None:
        """A name that is no built-in set is a typo, found here rather than when the generator
        is built. Paths are checked on build."""
        if value is None:
            return value
        if Path(value).suffix in (".yaml", ".yml") or "/" in value or "\\" in value:
            return value
        if value not in builtin_prompt_sets():
            raise ValueError(f"'{value}' is no built-in prompt set "
                             f"({', '.join(builtin_prompt_sets())}); a file of your own "
                             "ends in .yaml")
        return value

    def prompt_set(self) -> str:
        """The prompt set to load: the one named, else the one written for this backend."""
        return self.prompts or "generic"


class SmolLMConfig(PromptedConfig):
    """SmolLM2-135M-Instruct on this machine."""

    name: Literal["smollm"] = Field("smollm", description=BACKEND_NAME)
    generate_temperature: float | None = Field(
        None, ge=0, description="temperature of `generate` alone, which writes from a condition "
        "with no text to work on, so sampling is all that varies its outputs (default: "
        "temperature)")
    generate_top_p: float | None = Field(None, gt=0, le=1, description="top-p of `generate` "
                                         "alone (default: top_p)")
    batch_size: int | None = Field(None, gt=0, description="prompts per forward batch "
                                   "(default 32)")
    engine: Literal["ct2-int8-smooth", "ct2-int8", "ct2-float32", "torch-float32",
                    "torch-bfloat16", "torch-int8"] = Field(
        "ct2-int8-smooth", description="how SmolLM2 runs on the CPU: ct2-int8-smooth "
        "(CTranslate2 on int8 weights, SmoothQuant folded in) measured about 3x transformers' "
        "float32 generate at +1.0% held-out perplexity (ct2-int8 without smoothing: +3.5%); "
        "ct2-float32 keeps float32's perplexity (docs/backends.md#smollm)")
    threads: int | None = Field(None, gt=0, description="CPU threads (default: "
                                "OMP_NUM_THREADS where set, else the cores not busy when the "
                                "generator is built)")

    def prompt_set(self) -> str:
        return self.prompts or "small"

    @property
    def edit_sampling(self) -> tuple[float, float]:
        """(temperature, top_p) of rewrite, fill and crossover."""
        return self.temperature, self.top_p

    @property
    def generate_sampling(self) -> tuple[float, float]:
        """(temperature, top_p) of generate: its own where set."""
        return (self.temperature if self.generate_temperature is None
                else self.generate_temperature,
                self.top_p if self.generate_top_p is None else self.generate_top_p)


class OfflineConfig(SampledConfig):
    """The 7.4M LM dpsynth trained, shipped with it (no prompt)."""

    name: Literal["offline"] = Field("offline", description=BACKEND_NAME)
    model: str | None = Field(None, description="an offline-format model folder (default: the "
                              "shipped one)")
    int8: bool = Field(False, description="sample on int8 dynamic-quantised weights (about 2x "
                       "faster; held-out perplexity +0.3%; docs/offline_generator.md)")


class OpenAIChatConfig(PromptedConfig):
    """An OpenAI-compatible chat server."""

    name: Literal["openai"] = Field("openai", description=BACKEND_NAME)
    model: str | None = Field(None, description="the served model's name")
    base_url: str | list[str] | None = Field(
        None, description="the server, or a list of servers of the same model: requests are "
        "spread over them (concurrency each), a failed one is retried on the next, and the "
        "health check drops a dead one with a warning"
    )
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    concurrency: int = Field(8, gt=0, description="requests in flight at once")
    http: HttpConfig = Field(HttpConfig(), description="rate limits, timeouts, retries")
    price: Price | None = Field(None, description="overrides the built-in price table")
    dry_run: bool = Field(
        False, description="count calls and tokens, send nothing, return placeholder text"
    )

    @field_validator("base_url")
    @classmethod
    def _some_servers(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and (not value or len(set(value)) != len(value)):
            raise ValueError("a list of base URLs needs at least one, each once")
        return value


class HFConfig(PromptedConfig):
    """A local Hugging Face model folder."""

    name: Literal["hf"] = Field("hf", description=BACKEND_NAME)
    model: str | None = Field(None, description="the model folder (required)")
    batch_size: int | None = Field(None, gt=0, description="prompts per forward batch "
                                   "(default 8)")
    device: str | None = Field(None, description="torch device (default cpu)")


LMChoice = Annotated[SmolLMConfig | OfflineConfig | OpenAIChatConfig | HFConfig,
                     Field(discriminator="name")]
"""A generator section that names an LM (a pool's editor)."""


class PoolConfig(GeneratorConfig):
    """DP selection among public texts (docs/backends.md)."""

    name: Literal["pool"] = Field("pool", description=BACKEND_NAME)
    path: Path | None = Field(
        None, description="the PUBLIC texts to retrieve from: a .txt file (one text per "
        "line), a folder of .txt files, or csv/jsonl/parquet/hf with text_column; never the "
        "private data. Omitted: the shipped pool (Wikipedia, Wikinews, Gutenberg, IMDB, SST-2)"
    )
    text_column: str = Field("text", description="the text column of a table")
    max_texts: int = Field(
        DEFAULT_MAX_TEXTS, gt=0, description="texts kept (a fixed subsample beyond it)"
    )
    candidates: int = Field(
        DEFAULT_CANDIDATES, gt=0, description="generate draws among this many best matches; "
        "rewrite at strength 1 takes the candidates-th neighbour"
    )
    embedder: EmbedderChoice = Field(
        MiniLMConfig(), description="the embedder that indexes the pool and embeds queries "
        "(public text only)"
    )
    index_dir: Path | None = Field(
        None, description="folder for the pool's embeddings (default: beside the pool, else "
        "~/.cache/dpsynth/pool)"
    )
    edit: LMChoice | None = Field(
        None, description="an LM that rewrites each retrieved text (AUG-PE style): smollm, "
        "offline, openai or hf, as a name or a full generator section"
    )
    edit_strength: float = Field(
        0.3, ge=0, le=1, description="with edit: how far the editor moves a retrieved text"
    )

    @field_validator("embedder", mode="before")
    @classmethod
    def _embedder_by_name(cls, value: object) -> object:
        return _named(value, "minilm")

    @field_validator("edit", mode="before")
    @classmethod
    def _edit_by_name(cls, value: object) -> object:
        if isinstance(value, str):
            value = {"name": value}
        if isinstance(value, dict) and value.get("name") == "pool":
            raise ValueError("edit names an LM (smollm, offline, openai or hf), not another "
                             "pool")
        return _named(value, "smollm")


GENERATOR_CONFIGS: dict[str, type[GeneratorConfig]] = {
    "smollm": SmolLMConfig, "offline": OfflineConfig, "openai": OpenAIChatConfig,
    "hf": HFConfig, "pool": PoolConfig}

GeneratorChoice = Annotated[SmolLMConfig | OfflineConfig | OpenAIChatConfig | HFConfig
                            | PoolConfig, Field(discriminator="name")]
"""A generator section: the model of the backend it names (smollm when it names none)."""


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

    embedder: EmbedderChoice = MiniLMConfig()
    generator: GeneratorChoice = SmolLMConfig()
    executor: ExecutorConfig = ExecutorConfig()

    @field_validator("embedder", mode="before")
    @classmethod
    def _embedder_by_name(cls, value: object) -> object:
        return _named(value, "minilm")

    def embedders(self) -> list[tuple[str, EmbedderConfig]]:
        """Each embedder section with its key path: the run's, and a pool generator's own."""
        found = [("backends.embedder", self.embedder)]
        if isinstance(self.generator, PoolConfig):
            found.append(("backends.generator.embedder", self.generator.embedder))
        return found

    @field_validator("generator", mode="before")
    @classmethod
    def _generator_by_name(cls, value: object) -> object:
        return _named(value, "smollm")


def parse_generator(section: dict[str, Any]) -> GeneratorConfig:
    """A generator section as YAML gives it (a mapping), validated by its backend's model."""
    return BackendsConfig(generator=section).generator


def parse_embedder(section: dict[str, Any]) -> EmbedderConfig:
    """An embedder section as YAML gives it (a mapping), validated by its backend's model."""
    return BackendsConfig(embedder=section).embedder
