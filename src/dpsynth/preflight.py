"""What a run will do before it does it: the data it reads, the recipe's preconditions, and
the budget plan (every release's mechanism and noise) it will spend by. Nothing is released
here; `dpsynth plan` prints this and `dpsynth run` runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from rich.console import Console
from rich.table import Table

from dpsynth import sizing
from dpsynth.backends.config import TfidfConfig
from dpsynth.config import RunConfig
from dpsynth.data import PrivateDataset, load_private
from dpsynth.data.load import units_text
from dpsynth.errors import ConfigError
from dpsynth.methods.base import Recipe
from dpsynth.methods.registry import build_recipe
from dpsynth.privacy.config import resolve_delta
from dpsynth.privacy.planning import BudgetPlan, plan_table
from dpsynth.sizing import Fit, Rate


@dataclass(frozen=True)
class RunPlan:
    config: RunConfig
    data: PrivateDataset
    recipe: Recipe
    delta: float
    budget: BudgetPlan
    """Every release's mechanism and noise scale; the run releases with exactly these."""
    fit: Fit | None = None
    """What `recipe.time` changed (`config` is the config with those changes)."""


def make_plan(config: RunConfig, frame: pd.DataFrame | None = None,
              measure: Callable[[], Rate] | None = None) -> RunPlan:
    """Load and validate the private set (from `config.data`, or the in-memory `frame` it
    describes), resolve δ against its unit count, fit the sizes to `recipe.time` (timing the
    generator with `measure`, by default `timing.measure` on `backends.generator`), let the
    recipe refuse a config it cannot run on, fix its sizes from public facts, and plan its
    budget: all before anything is released."""
    data = load_private(config.data, config.base_dir, frame)
    _refuse_a_pool_of_private_texts(config, data)
    _refuse_fit_texts_of_private_texts(config, data)
    _refuse_a_held_out_of_private_texts(config, data)
    delta = resolve_delta(config.budget, data.n_units)
    fitted = None
    if config.recipe.time is not None:
        config, fitted = sizing.fit(config, data, measure or _measure(config, data))
    else:
        sizing.refuse_a_fitted_folder(config)
    recipe = build_recipe(config.recipe, config.budget.split)
    recipe.validate(data)
    _refuse_a_remote_lm(config, recipe)
    recipe = recipe.resolved(data)  # sizes left out: from N, the public unit count
    budget = recipe.budget_plan(data, config.budget.epsilon, delta)
    return RunPlan(config, data, recipe, delta, budget, fitted)


def _measure(config: RunConfig, data: PrivateDataset) -> Callable[[], Rate]:
    """Time the configured generator on `timing.public_condition` (no record)."""

    def measure() -> Rate:
        from dpsynth import timing

        rate = timing.measure(config.backends.generator, config.base_dir,
                              timing.public_condition(config, data.label_names))
        return Rate(rate.seconds_per_output, rate.load_seconds, rate.words, rate.batch)

    return measure


def _refuse_a_remote_lm(config: RunConfig, recipe: Recipe) -> None:
    """A recipe that puts private records in the LM's context needs the LM in this process,
    on the CPU: refused here from the config, so `dpsynth plan` says it too (the recipe
    checks the generator object again before its first release)."""
    if not recipe.needs_local_lm:
        return
    generator = config.backends.generator
    if generator.name == "openai":
        raise ConfigError(f"recipe {recipe.name} puts private records in the generator's "
                          "context, so it needs a local generator (smollm or hf); "
                          "backends.generator is remote")
    if generator.name == "hf" and generator.device not in (None, "cpu"):
        raise ConfigError(f"recipe {recipe.name} reads the LM's next-token distributions on "
                          f"the CPU; backends.generator.device is {generator.device} (set cpu)")


def _refuse_a_pool_of_private_texts(config: RunConfig, data: PrivateDataset) -> None:
    """A pool's texts can appear verbatim in the output. The config already refuses a pool
    path that is the private file; this catches a copy of it, and the pool of a run on an
    in-memory frame (which has no path), before the pool is indexed or anything released."""
    generator = config.backends.generator
    if generator.name != "pool" or generator.path is None:
        return  # the shipped pool is public text
    from dpsynth.backends.pool.texts import read_pool_texts

    pool = config._resolved(generator.path)
    if data.mostly_within(read_pool_texts(pool, generator.text_column, None)):
        raise ConfigError(f"backends.generator.path: {pool} holds the private texts (half or "
                          "more of them verbatim); a pool must be public text")


def _refuse_fit_texts_of_private_texts(config: RunConfig, data: PrivateDataset) -> None:
    """A TF-IDF vocabulary fitted on private texts makes every unit's embedding, and so every
    vote, depend on the whole private set, not on that unit alone. The config refuses the
    private file named as fit_texts; this catches a copy of it (or a file that holds it),
    before anything is released."""
    from dpsynth.backends.embedders.tfidf import read_public_texts

    for field, embedder in config.backends.embedders():
        if not isinstance(embedder, TfidfConfig) or embedder.fit_texts is None:
            continue
        path = config._resolved(embedder.fit_texts)
        if data.mostly_within(read_public_texts(path, embedder.fit_text_column)):
            raise ConfigError(f"{field}.fit_texts: {path} holds the private texts (half or "
                              "more of them verbatim); fit TF-IDF on public text")


def _refuse_a_held_out_of_private_texts(config: RunConfig, data: PrivateDataset) -> None:
    """The closing "worth" line scores held-out records; on the training records (a copy, a
    link, a sample of them) it would be an un-noised training accuracy passed off as held-out
    accuracy. Refused before anything is released."""
    if config.held_out is None:
        return
    from dpsynth.evaluate.tables import read_text_table

    path = config._resolved(config.held_out.path)
    held = read_text_table(path, config.data.text_column, config.data.label_column,
                           require_labels=True)
    if data.mostly_covers(held.texts):
        raise ConfigError(f"held_out.path: {path} holds private records (half or more of its "
                          "texts are in data.path); name records kept out of the private data")


def _is_code(label: str) -> bool:
    """A number, a single character, or a short capitalised abbreviation (trec's ABBR, HUM,
    NUM): a name that tells a generator little about the text it is to write."""
    label = label.strip()
    return (label.lstrip("-").isdigit() or len(label) <= 1
            or (label.isalpha() and label.isupper() and len(label) <= 5))


def print_plan(plan: RunPlan, console: Console) -> None:
    """Print the plan as tables: public facts (N, k, labels) and the budget, nothing else."""
    ds, cfg = plan.data, plan.config
    unit = "user" if cfg.data.user_column else "record"
    table = Table(title="dpsynth plan", show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value")
    table.add_row("recipe", cfg.recipe.name)
    table.add_row("privacy units", f"N {units_text(ds)} ({unit}-level, k = "
                                   f"{ds.records_per_unit} record(s) per unit)")
    named = cfg.data.label_names or {}
    table.add_row("labels", ", ".join(f"{label} ({named[label]})" if label in named else label
                                      for label in ds.label_names) if ds.label_names else "none")
    table.add_row("document", cfg.data.document or "text (data.document names the kind)")
    table.add_row("budget", f"ε = {cfg.budget.epsilon:g}, δ = {plan.delta:.3g}"
                  + ("" if cfg.budget.delta is not None else "  (δ = 1/(N·ln N))"))
    table.add_row("embedder", cfg.backends.embedder.name)
    table.add_row("generator", cfg.backends.generator.name if plan.recipe.uses_backend_generator
                  else f"the LM {cfg.recipe.name} fine-tunes with DP (recipe.params.model) "
                  f"on {plan.recipe.device}; backends.generator is not used")
    table.add_row("output", f"{cfg.output.dir} ({cfg.output.format})")
    console.print(table)
    codes = [label for label in ds.label_names or () if _is_code(cfg.data.label_name(label))]
    if codes and len(codes) == len(ds.label_names or ()):
        example = ", ".join(f"{label}: ..." for label in codes[:2])
        console.print(f"[yellow]note:[/yellow] the labels ({', '.join(codes)}) are codes; a "
                      "generator is asked for a text *of a label* by its name, and a code "
                      "tells it nothing. Declare data.label_names, a public name for each "
                      f"({{{example}}}, e.g. 'disaster report'): generators are asked by the "
                      "names and the output keeps the codes")
    console.print(plan_table(plan.budget, title=f"privacy plan: {cfg.recipe.name}"))
    for note in plan.recipe.plan_notes(ds, plan.budget):
        console.print(f"[yellow]note:[/yellow] {note}")
    console.print(f"sizes: {_sizes(plan)}", soft_wrap=True)
    calls = plan.recipe.expected_generations(ds)
    console.print("generator outputs: " + (", ".join(f"{op} {n:,}" for op, n in calls.items())
                                           + f" (total {sum(calls.values()):,})" if calls
                                           else "none"))
    if plan.fit is not None:
        for line in plan.fit.lines():
            console.print(line, soft_wrap=True)


def _sizes(plan: RunPlan) -> str:
    """The sizes the run uses, each marked when the config leaves it out (from N, the output
    size, or the time): what to set, or shrink, to change the run's length."""
    params, given = plan.recipe.params, set(plan.config.recipe.params)
    keys = [key for key in plan.recipe.sizes(plan.data) if key in type(params).model_fields]
    if "iterations" in type(params).model_fields:
        keys.insert(0, "iterations")
    fitted = plan.fit.changes if plan.fit is not None else {}
    shown = []
    for key in keys:
        how = ("" if key in given and key not in fitted else " (time)" if key in fitted
               else " (= N)" if key == "n_output" else " (default)" if key == "iterations"
               else " (derived)")
        shown.append(f"{key} {getattr(params, key):,}{how}")
    return ", ".join(shown)
