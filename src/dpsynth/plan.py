"""What a run will do before it does it: the data it reads and the budget it may spend."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from dpsynth.config import RunConfig
from dpsynth.data import LoadedData, load_private
from dpsynth.methods.registry import RECIPES, build_recipe
from dpsynth.privacy.config import resolve_delta
from dpsynth.privacy.planning import plan_table


@dataclass(frozen=True)
class RunPlan:
    config: RunConfig
    data: LoadedData
    epsilon: float
    delta: float


def make_plan(config: RunConfig) -> RunPlan:
    """Load and validate the private set and resolve the budget against its unit count."""
    data = load_private(config.data, config.base_dir)
    delta = resolve_delta(config.budget, data.dataset.n_units)
    return RunPlan(config, data, config.budget.epsilon, delta)


def print_plan(plan: RunPlan, console: Console) -> None:
    """Print the plan as tables: counts and budget only, nothing private."""
    ds, cfg = plan.data.dataset, plan.config
    unit = "user" if cfg.data.user_column else "record"
    table = Table(title="dpsynth plan", show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value")
    table.add_row("recipe", cfg.recipe.name)
    table.add_row("private records", str(ds.n_records))
    table.add_row("privacy units", f"{ds.n_units} ({unit}-level, at most "
                                   f"{ds.records_per_unit} record(s) per unit)")
    table.add_row("cleaning", plan.data.report.summary())
    if plan.data.records_dropped_by_bounding:
        table.add_row("contribution bounding",
                      f"{plan.data.records_dropped_by_bounding} records dropped")
    table.add_row("labels", ", ".join(ds.label_names) if ds.label_names else "none")
    table.add_row("budget", f"ε = {plan.epsilon:g}, δ = {plan.delta:.3g}"
                  + ("" if cfg.budget.delta is not None else "  (δ = 1/(N·ln N))"))
    table.add_row("embedder", cfg.backends.embedder.name)
    table.add_row("generator", cfg.backends.generator.name)
    table.add_row("output", f"{cfg.output.dir} ({cfg.output.format})")
    console.print(table)
    if cfg.recipe.name in RECIPES:
        recipe = build_recipe(cfg.recipe, cfg.budget.split)
        budget = recipe.plan(ds, plan.epsilon, plan.delta)
        console.print(plan_table(budget, title=f"privacy plan: {cfg.recipe.name}"))
        calls = recipe.expected_generations(ds)
        console.print("generator outputs: " + ", ".join(f"{op} {n:,}" for op, n in calls.items())
                      + f" (total {sum(calls.values()):,})")
