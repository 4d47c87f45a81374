"""Sizes that fit a time: `recipe.time` (`dpsynth plan --time 15m`, `dpsynth run --time 15m`).

The plan times the configured generator now (`timing.measure`: public conditions, no cache,
nothing read from a record), and when the planned generator outputs would take longer than
the time allows, it lowers the sizes the config leaves out, in this order:

1. `iterations` (pe, dpga), down to 1: fewer rounds of votes and variation, the output as
   large as before;
2. the output size `n_output`, and with it every size that follows from it (dpga's initial
   population and offspring, kd_tutor's negatives and pool, eda's public texts), to the
   largest that fits.

A parameter the config sets is kept as given; when the fit cannot reach the time without
changing one, the plan says which. Generation gets `HEADROOM` of the time, less the measured
loading; the rest is for embedding, voting and writing, which the rate does not cover.

The proposal is a function of the config, the public facts (N, the label set) and the
measured rate: never of a record. A run records it in its folder (`FIT_FILE`) before its
first release, and a resumed or repeated run takes the recorded sizes instead of measuring
again, so that a restart keeps the plan its releases were made under.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpsynth.backends.config import OpenAIChatConfig
from dpsynth.config import RunConfig
from dpsynth.data.facts import DataFacts
from dpsynth.errors import ConfigError, InputError
from dpsynth.methods.base import OUTPUT_SIZE, Recipe
from dpsynth.methods.registry import build_recipe
from dpsynth.privacy.journal import atomic_write_text
from dpsynth.timing import duration

log = logging.getLogger(__name__)

HEADROOM = 0.8
"""Share of the asked time given to generator outputs; the rest covers loading the models,
embedding, the votes and writing the output, which the generator's rate does not include."""

FIT_FILE = "time_fit.json"
"""In the run's `checkpoints/` folder: the sizes the first start chose for `recipe.time`."""


@dataclass(frozen=True)
class Rate:
    seconds_per_output: float
    load_seconds: float
    words: int = 30
    batch: int = 0


@dataclass(frozen=True)
class Fit:
    """A time budget's proposal: what the plan changed, and what it expects."""

    time: str
    seconds: float
    rate: Rate
    outputs_before: int
    outputs_after: int
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Each lowered size: (planned without the time, proposed)."""
    held: tuple[str, ...] = ()
    """Parameters set in the config that keep the plan from fitting."""
    recorded: bool = False
    """Read from the run folder (its first start's fit), not measured now."""
    asked: dict[str, Any] = field(default_factory=dict)
    """`recipe.params` as the config gives them."""
    proposed: dict[str, Any] = field(default_factory=dict)
    """`recipe.params` the run uses: the config's, with the changes."""
    note: str | None = None
    """Why nothing was fitted (a recipe that makes no generator outputs, a dry run)."""

    @property
    def budget_outputs(self) -> int:
        return outputs_within(self.seconds, self.rate)

    @property
    def fits(self) -> bool:
        return self.outputs_after <= self.budget_outputs

    def lines(self) -> list[str]:
        """What `dpsynth plan` prints: the time, the rate, each change and what it gives."""
        if self.note:
            return [f"time {self.time}: {self.note}"]
        r = self.rate
        where = ("recorded by this folder's first start, not measured again"
                 if self.recorded else "measured just now")
        lines = [f"time {self.time}: generation may take {duration(HEADROOM * self.seconds)} "
                 f"({HEADROOM:.0%}; the rest for loading, embedding and voting); the generator "
                 f"makes a {r.words}-word output in {r.seconds_per_output:.3g} s ({where}, "
                 f"loading {r.load_seconds:.0f} s), so about {self.budget_outputs:,} outputs"]
        if not self.changes and self.fits:
            lines.append(f"the planned {self.outputs_before:,} outputs fit (about "
                         f"{duration(self._seconds(self.outputs_before))}): nothing changed")
            return lines
        if not self.changes:
            lines.append(f"the planned {self.outputs_before:,} outputs take about "
                         f"{duration(self._seconds(self.outputs_before))}, and nothing the "
                         "config leaves out can shrink them")
        else:
            lines.append("shrank to fit: " + ", ".join(
                f"{key} {old:,} → {new:,}" for key, (old, new) in self.changes.items())
                + f"; generator outputs {self.outputs_before:,} → {self.outputs_after:,} "
                f"(about {duration(self._seconds(self.outputs_before))} → "
                f"{duration(self._seconds(self.outputs_after))})")
        if not self.fits:
            lines.append("still over the time: " + (
                "the config sets " + ", ".join(self.held) + "; leave them out, or ask for "
                "more time" if self.held else "even the smallest sizes do not fit; ask for "
                "more time or a faster generator"))
        return lines

    def _seconds(self, outputs: int) -> float:
        return self.rate.load_seconds + outputs * self.rate.seconds_per_output


def outputs_within(seconds: float, rate: Rate) -> int:
    """Generator outputs that fit in `seconds`, at `rate`, with the headroom kept."""
    usable = HEADROOM * seconds - rate.load_seconds
    return max(0, int(usable / rate.seconds_per_output)) if rate.seconds_per_output > 0 else \
        2**62


def generator_outputs(recipe: Recipe, facts: DataFacts) -> int:
    return sum(recipe.expected_generations(facts).values())


def propose(recipe: Recipe, facts: DataFacts, budget: int) -> dict[str, int]:
    """The parameter changes that bring `recipe` (as configured, sizes left out unresolved)
    within `budget` generator outputs: `iterations` first, down to 1, then the output size,
    to the largest that fits. Only parameters the config leaves out are changed; {} when
    the plan already fits."""
    cost = lambda changes: generator_outputs(recipe.resized(**changes), facts)  # noqa: E731
    if cost({}) <= budget:
        return {}
    given = recipe.params.model_fields_set
    fields = type(recipe.params).model_fields
    changes: dict[str, int] = {}
    if "iterations" in fields and "iterations" not in given:
        costs = {t: cost({"iterations": t}) for t in range(recipe.params.iterations, 0, -1)}
        fitting = [t for t, c in costs.items() if c <= budget]
        # the most rounds that fit; else the most rounds at the least cost (pe: T = 2 costs
        # what T = 1 does), where the output size is then lowered
        t = max(fitting) if fitting else max(t for t, c in costs.items()
                                              if c == min(costs.values()))
        changes = {"iterations": t} if costs[t] < cost({}) else {}  # eda: rounds are free
    if cost(changes) <= budget or OUTPUT_SIZE in given:
        return changes
    low, high = 1, recipe.resolved(facts).params.n_output
    if cost(changes | {OUTPUT_SIZE: low}) > budget:
        return changes | {OUTPUT_SIZE: low}
    while low < high:  # the largest output size that fits
        middle = (low + high + 1) // 2
        if cost(changes | {OUTPUT_SIZE: middle}) <= budget:
            low = middle
        else:
            high = middle - 1
    return changes | {OUTPUT_SIZE: low}


def fit(config: RunConfig, facts: DataFacts, measure: Callable[[], Rate]
        ) -> tuple[RunConfig, Fit]:
    """`config` with the sizes that fit `recipe.time`, and what was done. A folder whose run
    recorded a fit keeps it (a resumed run keeps the plan its releases were made under)."""
    time, seconds = config.recipe.time, config.recipe.seconds
    assert time is not None and seconds is not None
    recipe = build_recipe(config.recipe, config.budget.split)
    before = generator_outputs(recipe, facts)
    recorded = read_recorded(config)
    if recorded is not None:
        fitted = _with_params(config, recorded["proposed"])
        return fitted, _describe(recipe, config, fitted, facts, Rate(**recorded["rate"]),
                                 recorded=True)
    if not recipe.uses_backend_generator:
        return config, Fit(time, seconds, Rate(0.0, 0.0), before, before, note=(
            f"{config.recipe.name}'s time is its DP training (recipe.params.steps) and the "
            "sampling of the LM it trains; recipe.time sizes backends.generator's outputs, "
            "which it does not use: nothing changed"))
    generator = config.backends.generator
    if isinstance(generator, OpenAIChatConfig) and generator.dry_run:
        return config, Fit(time, seconds, Rate(0.0, 0.0), before, before, note=(
            "the generator is a dry run and sends nothing, so it has no rate: nothing changed"))
    rate = measure()
    changes = propose(recipe, facts, outputs_within(seconds, rate))
    fitted = _with_params(config, {**config.recipe.params, **changes})
    return fitted, _describe(recipe, config, fitted, facts, rate)


def _describe(recipe: Recipe, config: RunConfig, fitted: RunConfig, facts: DataFacts,
              rate: Rate, recorded: bool = False) -> Fit:
    before = generator_outputs(recipe, facts)
    after = generator_outputs(build_recipe(fitted.recipe, config.budget.split), facts)
    old = recipe.resolved(facts).params
    new = build_recipe(fitted.recipe, fitted.budget.split).resolved(facts).params
    changes = {key: (getattr(old, key), getattr(new, key))
               for key in type(old).model_fields
               if isinstance(getattr(old, key), int) and not isinstance(getattr(old, key), bool)
               and getattr(old, key) != getattr(new, key)}
    given = recipe.params.model_fields_set
    held = tuple(key for key in ("iterations", OUTPUT_SIZE, *recipe.sizes(facts))
                 if key in given and key in type(old).model_fields)
    return Fit(config.recipe.time, config.recipe.seconds, rate, before, after, changes,
               tuple(dict.fromkeys(held)), recorded=recorded, asked=dict(config.recipe.params),
               proposed=dict(fitted.recipe.params))


def _with_params(config: RunConfig, params: dict[str, Any]) -> RunConfig:
    return config.model_copy(update={"recipe": config.recipe.model_copy(
        update={"params": params})})


def fit_path(config: RunConfig) -> Path:
    return config.output.dir / "checkpoints" / FIT_FILE


def read_recorded(config: RunConfig) -> dict[str, Any] | None:
    """The fit this folder's first start recorded, when it was made for this time and these
    params; a fit for another time or params is refused: the folder's releases, if any, were
    made under its sizes."""
    path = fit_path(config)
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        asked = (recorded["time"], recorded["params"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{path}: unreadable; use a new output folder") from None
    now = json.loads(json.dumps(config.recipe.params, default=str))
    if asked != (config.recipe.time, now):
        raise ConfigError(
            f"recipe.time: {config.output.dir} holds a run sized at its first start for "
            f"recipe.time {recorded['time']} and recipe.params {json.dumps(recorded['params'])}"
            f" (its sizes: {json.dumps(recorded['proposed'])}); resume it with the same time "
            "and params, or use a new output folder")
    return recorded


def refuse_a_fitted_folder(config: RunConfig) -> None:
    """A folder whose run was sized for a time, run again without one, would resume under the
    sizes left out: other releases than its journal's. Refused, naming the time to give."""
    path = fit_path(config)
    if config.recipe.time is None and path.exists():
        try:
            time = json.loads(path.read_text(encoding="utf-8"))["time"]
        except (OSError, ValueError, KeyError, TypeError):
            time = "?"
        raise ConfigError(f"recipe.time: {config.output.dir} holds a run sized at its first "
                          f"start for recipe.time {time}; resume it with --time {time} (or "
                          "recipe.time), or use a new output folder")


def record(config: RunConfig, fitted: Fit) -> None:
    """Write the fit into the run folder before the first release (`read_recorded`)."""
    path = fit_path(config)
    if fitted.recorded or fitted.note or path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({
        "time": fitted.time, "params": fitted.asked, "proposed": fitted.proposed,
        "rate": asdict(fitted.rate)}, indent=2, default=str))
