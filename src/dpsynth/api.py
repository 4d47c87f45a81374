"""The Python entry point: `dpsynth.synthesize(data, ...)`, for notebooks and scripts.

It builds the same run config the command line reads from YAML (`dpsynth.config`), so it
validates the same way and raises the same typed errors (`dpsynth.errors`), then executes the
same `dpsynth.run.Run`. An in-memory table (a pandas DataFrame
or a Hugging Face `datasets.Dataset`) is validated and read as it is: it is never written to
a file, a cache or the output folder.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpsynth.backends import Embedder, Generator
from dpsynth.backends.config import EmbedderConfig, GeneratorConfig
from dpsynth.config import RunConfig, parse_config
from dpsynth.data.load import IN_MEMORY
from dpsynth.errors import ConfigError, InputError
from dpsynth.logs import LEVELS, run_logging

if TYPE_CHECKING:  # imported when a run starts: `import dpsynth` stays light
    from dpsynth.methods.base import SyntheticSet
    from dpsynth.run import Run, RunOutputs

log = logging.getLogger(__name__)

SOURCE = "dpsynth.synthesize"
"""How config errors name the call, in place of a YAML file."""


@dataclass(frozen=True)
class SynthesisResult:
    """What `synthesize` returns. Every field is public: synthetic data, DP releases, and
    where the run's files are."""

    data: Any
    """The synthetic set: a pandas DataFrame (`text`, and `label` when the input had labels,
    each label the value declared in `labels`, numbers as numbers; and `not_private`, true
    in every row, when the noise was seeded), or a `datasets.Dataset` when the input was
    one."""
    privacy: dict[str, Any]
    """The ledger's summary: `epsilon` spent (composed with the PLD accountant and
    recomputed from the recorded events), `epsilon_budget`, `delta`, `private` (False for a
    seeded, NOT PRIVATE reproduction) and `stages` (ε each stage would cost alone, and its
    release count)."""
    report: Path | None
    """The run's HTML report (public version), or None when not written."""
    output_dir: Path
    temporary: bool
    """True when `output_dir` is a fresh temporary folder (no `output_dir` was given); it is
    not deleted, so the report and files stay readable: delete it when done."""
    already_complete: bool = False
    """True when `output_dir` held this run, finished: its outputs were returned and nothing
    was run or released again (give a new output_dir for a new run)."""
    files: dict[str, Path] = field(default_factory=dict)
    """`synthetic`, `privacy` (privacy.json), `metrics` (metrics.jsonl), `log` (run.log)."""
    ledger: Any = field(default=None, repr=False)
    """The run's privacy ledger (`dpsynth.privacy.PrivacyLedger`), every charge with its DP
    event."""

    def __repr__(self) -> str:
        """Also `str`; a seeded run's opens with NOT PRIVATE, as its ε protects nothing."""
        where = f"{self.output_dir}{' (temporary)' if self.temporary else ''}"
        seeded = "" if self.privacy["private"] else "NOT PRIVATE (seeded DP noise): "
        return (f"SynthesisResult({seeded}{len(self.data)} synthetic records, ε = "
                f"{self.privacy['epsilon']:.4g} of {self.privacy['epsilon_budget']:g}, "
                f"δ = {self.privacy['delta']:.3g}, output_dir={where!s}, report={self.report})")


def synthesize(
    data: Any,
    *,
    epsilon: float,
    text: str = "text",
    label: str | None = "label",
    labels: list[Any] | None = None,
    user: str | None = None,
    max_records_per_user: int = 1,
    recipe: str = "dpga",
    params: Mapping[str, Any] | None = None,
    time: str | None = None,
    delta: float | None = None,
    split: Mapping[str, float] | None = None,
    generator: str | Mapping[str, Any] | GeneratorConfig | Generator | None = None,
    embedder: str | Mapping[str, Any] | EmbedderConfig | Embedder | None = None,
    seed: int | None = None,
    output_dir: str | Path | None = None,
    output_format: str = "csv",
    data_options: Mapping[str, Any] | None = None,
    budget_options: Mapping[str, Any] | None = None,
    report: bool = True,
    log_level: str | None = "info",
) -> SynthesisResult:
    """Synthesise a differentially private copy of `data` and return it with its privacy
    spend and the run's report.

    `data` is a pandas DataFrame, a `datasets.Dataset`, or a path to a CSV, TSV, JSONL,
    Parquet file or saved Hugging Face dataset folder. `text`, `label` (None for unlabelled
    data), `labels` (the public label set, needed with `label`), `user` and
    `max_records_per_user` are the `data:` section of a run config, `data_options` its other
    keys (`max_chars`, `duplicates`, ...). `epsilon`, `delta` and `split` are the `budget:` section,
    `budget_options` its other keys (`noise`). `recipe` and `params` name the recipe and its
    parameters (`dpsynth config recipe` lists every recipe's); sizes left out follow the
    private set's N. `time` ("15m") is `recipe.time`: the sizes left out are lowered until the
    generator outputs fit it, at the rate measured when the run starts. `generator` and
    `embedder` are a backend name (`"openai"`), a mapping of its config keys (`{"name": "openai",
    "base_url": ...}`), a config model, or a ready `Generator` / `Embedder` object; None is
    the offline default. `seed` fixes the public randomness only.

    `output_dir` receives what `dpsynth run` writes (synthetic set, privacy.json,
    metrics.jsonl, run.log, checkpoints and, with `report`, report.html); a folder that holds
    an unfinished run resumes it. None makes a fresh temporary folder, named in the result.
    `log_level` None leaves stderr alone (run.log is still written).

    Raises `dpsynth.errors.ConfigError` or `DataError` (both `InputError`) for a bad argument
    or bad data, `BudgetExceededError`, or another `DpsynthError`; no message quotes a
    private text.
    """
    if log_level is not None and log_level.lower() not in LEVELS:
        raise ConfigError(f"{SOURCE}: log_level: '{log_level}' is not one of "
                          f"{', '.join(LEVELS)} or None")
    frame, source_kind, path = _read_input(data)
    temporary = output_dir is None
    gen_cfg, gen_obj = _backend(generator, GeneratorConfig, Generator, "generator")
    emb_cfg, emb_obj = _backend(embedder, EmbedderConfig, Embedder, "embedder")
    raw = {
        "data": {"path": str(path) if path is not None else IN_MEMORY, "text_column": text,
                 "label_column": label, "user_column": user,
                 "max_records_per_user": max_records_per_user,
                 **({"labels": [str(v) for v in labels]} if labels is not None else {}),
                 **dict(data_options or {})},
        "budget": {"epsilon": epsilon, "delta": delta,
                   **({"split": dict(split)} if split is not None else {}),
                   **dict(budget_options or {})},
        "recipe": {"name": recipe, "params": dict(params or {}),
                   **({"time": time} if time is not None else {})},
        "backends": {"generator": gen_cfg, "embedder": emb_cfg},
        "output": {"dir": "<temporary>" if temporary else str(output_dir),
                   "format": output_format},
        "seed": seed,
    }
    if source_kind != "path" and "format" in raw["data"]:
        raise ConfigError(f"{SOURCE}: data.format: only for a file; an in-memory table has none")
    config = parse_config(raw, SOURCE, Path.cwd())  # every argument checked before any I/O
    _check_params(config)
    if temporary:  # made only once the arguments are valid
        config = config.model_copy(update={"output": config.output.model_copy(
            update={"dir": Path(tempfile.mkdtemp(prefix="dpsynth-run-"))})})
    from dpsynth.run import Run

    outputs, report_path = _execute(Run(config, frame, embedder=emb_obj, generator=gen_obj),
                                    temporary, log_level, report)
    out = config.output.dir
    return SynthesisResult(
        data=_table(outputs.result, labels, config.budget.private, source_kind),
        privacy=outputs.spend(), report=report_path,
        output_dir=out, temporary=temporary, already_complete=outputs.already_complete,
        files={"synthetic": outputs.synthetic, "privacy": outputs.privacy,
               "metrics": outputs.metrics, "log": out / "run.log"},
        ledger=outputs.ledger)


def _execute(run: Run, temporary: bool, log_level: str | None,
             report: bool) -> tuple[RunOutputs, Path | None]:
    """The run's outputs and report, logged to its run.log. A temporary folder that a
    stopped run released nothing in is removed; one it released in is named."""
    from dpsynth.run import released_anything

    out = run.config.output.dir
    try:
        with run_logging(log_level and log_level.lower(), out / "run.log"):
            if temporary:
                log.info("output folder: %s (temporary; delete it when done)", out)
            outputs = run.execute()
            return outputs, _write_report(out) if report else None
    except BaseException as exc:
        if temporary and released_anything(out):  # a fresh call would spend again
            _point_to_the_stopped_run(exc, out)
        elif temporary:  # nothing was spent: nothing to resume, nothing to keep
            shutil.rmtree(out, ignore_errors=True)
        raise


def _table(synthetic: SyntheticSet, labels: list[Any] | None, private: bool,
           source_kind: str) -> Any:
    """The synthetic set as the caller gave its data: a DataFrame or a Dataset, each label as
    declared (a run reads every label as text, `0` as `'0'`)."""
    from dpsynth.run import NOT_PRIVATE_COLUMN

    table = pd.DataFrame({"text": synthetic.texts})
    if synthetic.labels is not None:
        as_given = {str(v).strip(): v for v in labels or []}
        table["label"] = [as_given.get(y, y) for y in synthetic.labels]
    if not private:
        table[NOT_PRIVATE_COLUMN] = True  # as in the synthetic file
    if source_kind == "dataset":
        import datasets

        return datasets.Dataset.from_pandas(table, preserve_index=False)
    return table


def _point_to_the_stopped_run(exc: BaseException, out: Path) -> None:
    """Say where a stopped temporary run's releases are, on the exception and as a warning
    (shown even with log_level=None): retrying with output_dir= resumes it, spending nothing
    twice, where a fresh call would spend its budget again."""
    note = (f"dpsynth: the run's releases so far are journaled in {out}; pass "
            f"output_dir='{out}' to resume it without spending them again (a call without "
            "output_dir starts a new run, with a new budget)")
    exc.add_note(note)
    warnings.warn(note, stacklevel=3)


def _read_input(data: Any) -> tuple[pd.DataFrame | None, str, Path | None]:
    """(frame, kind, path): an in-memory table is kept in memory; a path is left for the
    loader to read, as `dpsynth run` does."""
    if isinstance(data, pd.DataFrame):
        return data, "frame", None
    if isinstance(data, str | Path):
        return None, "path", Path(data).expanduser().resolve()
    if type(data).__module__.startswith("datasets"):
        import datasets

        if isinstance(data, datasets.DatasetDict):
            raise InputError(f"{SOURCE}: data is a DatasetDict with splits "
                             f"{', '.join(data)}; pass one split, e.g. data['train']")
        if isinstance(data, datasets.Dataset):
            return data.to_pandas(), "dataset", None
    raise InputError(f"{SOURCE}: data must be a pandas DataFrame, a datasets.Dataset or a "
                     f"path to a data file, got {type(data).__name__}")


def _backend(value: Any, model: type, base: type, what: str) -> tuple[dict[str, Any], Any]:
    """(config mapping, ready object or None) for a `generator=` or `embedder=` argument."""
    if value is None:
        return {}, None
    if isinstance(value, base):
        return {}, value
    if isinstance(value, str):
        return {"name": value}, None
    if isinstance(value, model):
        return value.model_dump(exclude_unset=True), None
    if isinstance(value, Mapping):
        return dict(value), None
    raise InputError(f"{SOURCE}: {what} must be a backend name, a mapping of its config keys, "
                     f"a {model.__name__} or a {base.__name__}, got {type(value).__name__}")


def _check_params(config: RunConfig) -> None:
    """The recipe's parameters, checked by its own model before any data is read."""
    from dpsynth.methods.registry import build_recipe

    try:
        build_recipe(config.recipe, config.budget.split)
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(SOURCE) else f"{SOURCE}: {message}"
                          ) from None


def _write_report(out: Path) -> Path | None:
    """The public HTML report; without the `report` extra (matplotlib), none, and why."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        log.warning("no report: the HTML report's plots need the 'report' extra "
                    "(pip install 'dpsynth[report]')")
        return None
    from dpsynth.report import write_report

    return write_report(out)
