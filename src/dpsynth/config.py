"""The run config: one pydantic model per section, loaded from YAML with located errors."""

from __future__ import annotations

import os
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dpsynth.backends.config import BackendsConfig, PoolConfig, TfidfConfig
from dpsynth.backends.pool.texts import refuse_private_pool
from dpsynth.data.config import DataConfig
from dpsynth.data.io import Format
from dpsynth.errors import ConfigError
from dpsynth.methods.registry import RECIPES, build_recipe
from dpsynth.privacy.config import BudgetConfig

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(h|min|m|s)?", re.IGNORECASE)
_SECONDS = {"h": 3600.0, "m": 60.0, "min": 60.0, "s": 1.0, None: 1.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds in '15m', '1h30m', '90s', '2.5h' or a plain number of seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration; write it like 15m, 1h30m or 90s")
    compact = "".join(text.split()).lower()
    parts = list(_DURATION.finditer(compact))
    if not compact or "".join(m.group(0) for m in parts) != compact or (
            len(parts) > 1 and any(m.group(2) is None for m in parts)):
        raise ValueError(f"'{text}' is not a duration; write it like 15m, 1h30m or 90s")
    seconds = sum(float(m.group(1)) * _SECONDS[m.group(2)] for m in parts)
    if seconds <= 0:
        raise ValueError(f"'{text}' is no time at all; write it like 15m, 1h30m or 90s")
    return seconds


class RecipeConfig(BaseModel):
    """Which recipe runs; `params` are checked by the recipe's own model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="a recipe in dpsynth.methods.registry.RECIPES")
    params: dict[str, Any] = Field(default_factory=dict)
    time: str | None = Field(None, description="the time generation may take, e.g. 15m, 1h30m, "
                             "90s: the plan measures the generator's rate and lowers the sizes "
                             "the params leave out (iterations first, then the output size) "
                             "until the planned outputs fit; docs/config.md, 'Sizes and time'")

    @field_validator("time", mode="before")
    @classmethod
    def _a_duration(cls, value: object) -> object:
        """`time: 900` (YAML reads a number) is 900 seconds, kept as the text '900'."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = f"{value:g}"
        if isinstance(value, str):
            parse_duration(value)
        return value

    @property
    def seconds(self) -> float | None:
        """`time` in seconds (None without one)."""
        return None if self.time is None else parse_duration(self.time)

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in RECIPES:
            raise ValueError(f"unknown recipe '{name}'; available: {', '.join(RECIPES)}")
        return name


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path = Field(Path("runs/latest"), description="the run folder: synthetic set, "
                      "privacy.json, metrics.jsonl, run.log, checkpoints; a folder with an "
                      "unfinished run resumes it")
    format: Format = Field("csv", description="the synthetic set's format: csv, tsv, jsonl, "
                           "parquet or hf")


class HeldOutConfig(BaseModel):
    """Real labelled records kept out of `data.path`, that the finished run's synthetic set
    is scored on: a figure computed from those records, not a DP release (it is not public)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="a file with data's text and label columns, disjoint from "
                       "data.path")


class RunConfig(BaseModel):
    """A whole run. Relative paths are read relative to `base_dir`, the config's folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: DataConfig
    budget: BudgetConfig
    recipe: RecipeConfig
    backends: BackendsConfig = BackendsConfig()
    output: OutputConfig = OutputConfig()
    held_out: HeldOutConfig | None = Field(
        None, description="score the synthetic set on these real records after the run")
    seed: int | None = Field(None, ge=0, lt=2**31, description="fixes the public randomness "
                             "(prompts, sampling, generation); DP noise stays cryptographic "
                             "unless budget.noise says otherwise")
    base_dir: Path | None = Field(None, exclude=True)

    @model_validator(mode="after")
    def _seeded_noise_needs_a_seed(self) -> RunConfig:
        if not self.budget.private and self.seed is None:
            raise ValueError("budget.noise: seeded_not_private needs a seed")
        return self

    @model_validator(mode="after")
    def _public_files_are_not_private(self) -> RunConfig:
        """Files read as public text are never the private data nor the held-out records: a
        pool's texts can appear verbatim in the output, a tfidf vocabulary is public. (An
        in-memory frame has no path: the run compares its texts with a pool's instead.)"""
        private = [("held_out.path", self.held_out.path)] if self.held_out is not None else []
        if str(self.data.path) != "<DataFrame>":  # dpsynth.synthesize on a frame
            private.append(("data.path", self.data.path))
        generator = self.backends.generator
        public = [("backends.generator.path", generator.path)] if (
            isinstance(generator, PoolConfig) and generator.path is not None) else []
        public += [(f"{name}.fit_texts", embedder.fit_texts)
                   for name, embedder in self.backends.embedders()
                   if isinstance(embedder, TfidfConfig) and embedder.fit_texts is not None]
        for field, path in public:
            for private_field, private_path in private:
                refuse_private_pool(self._resolved(path), self._resolved(private_path), field,
                                    private_field)
        return self

    @model_validator(mode="after")
    def _label_set_is_declared(self) -> RunConfig:
        """A label set read from the private data is not public: one unit holding a label
        of its own would add a label to every release (a label stage, a prompt, a plan's
        shape) that no charge covers."""
        if self.data.label_column is not None and self.data.labels is None:
            raise ValueError(
                f"data.labels: declare the label set column '{self.data.label_column}' holds "
                "(for example labels: [negative, positive]), or unset data.label_column for "
                "unlabelled data; the label set is public, and read from the private data "
                "one record could add a label to the output that the ledger never charged "
                "for")
        return self

    @model_validator(mode="after")
    def _held_out_is_not_the_training_data(self) -> RunConfig:
        if self.held_out is not None and self.data.label_column is None:
            raise ValueError("held_out: needs data.label_column (it scores a classifier)")
        if self.held_out is not None and _same_file(self._resolved(self.held_out.path),
                                                    self._resolved(self.data.path)):
            raise ValueError("held_out.path: is data.path; name records kept out of it")
        return self

    def _resolved(self, path: Path) -> Path:
        return path if path.is_absolute() or self.base_dir is None else self.base_dir / path


def _same_file(a: Path, b: Path) -> bool:
    """One file under two names (a link included); equal paths when either does not exist."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def parse_config(raw: Any, source: str = "<config>", base_dir: Path | None = None) -> RunConfig:
    """Validate a mapping as a RunConfig, turning pydantic errors into one located message."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the config must be a mapping of sections")
    if "base_dir" in raw:
        raise ConfigError(f"{source}: base_dir: unknown key")
    try:
        config = RunConfig.model_validate({**raw, "base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None
    _check_recipe_params(config, source)
    return config


def _check_recipe_params(config: RunConfig, source: str) -> None:
    """The recipe's own parameter model, checked with the rest of the file, before any data
    is read: an unknown or bad `recipe.params` key names the config file."""
    try:
        build_recipe(config.recipe, config.budget.split)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_config(path: str | Path) -> RunConfig:
    """Read a YAML run config."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}{_yaml_where(exc)}: not valid YAML ({_yaml_problem(exc)})"
                          ) from None
    return parse_config(raw, str(path), path.parent.resolve())


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return "" if mark is None else f", line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message without its multi-line excerpt of the file: one line."""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    text = "; ".join(p for p in (context, problem) if p) or str(exc)
    return " ".join(text.split())


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = _key_path(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key")
        elif error["type"] == "union_tag_invalid":  # a backend name no backend has
            lines.append(f"{where}.name: '{error['ctx']['tag']}' is not one of "
                         f"{error['ctx']['expected_tags']}")
        else:  # a check of the whole config names its own keys in its message
            lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def _key_path(loc: tuple[int | str, ...]) -> str:
    """The keys of an error's location. Pydantic's location also holds the branch a tagged
    union took (the backend a `backends` section names), which is no key of the file."""
    keys: list[str] = []
    models: list[type[BaseModel]] = [RunConfig]
    for part in loc:
        branches = {m.model_fields["name"].default: m for m in models
                    if len(models) > 1 and "name" in m.model_fields}
        if part in branches:
            models = [branches[part]]
            continue
        keys.append(str(part))
        models = [inner for model in models if part in model.model_fields
                  for inner in _models(model.model_fields[part].annotation)]
    return ".".join(keys)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation holds: itself, a union's members, or none."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models(arg)]
