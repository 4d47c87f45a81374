"""The `dpsynth` command line: run, plan, eval, report.

Exit codes: 0 success, 2 bad input or config (a one-line error), 1 failure, 130 interrupted
(Ctrl-C; one line says where the run stopped and how to resume it).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from dpsynth import __version__
from dpsynth.backends.config import OpenAIChatConfig
from dpsynth.config import RecipeConfig, RunConfig, load_config
from dpsynth.errors import ConfigError, DpsynthError, InputError, Interrupted
from dpsynth.examples import EXAMPLE_CONFIG
from dpsynth.logs import LEVELS, setup_logging, where_raised
from dpsynth.methods.registry import RECIPES
from dpsynth.preflight import RunPlan, make_plan, print_plan
from dpsynth.run import NOT_PRIVATE, Run, prepare_output_dir, stopped_summary

log = logging.getLogger("dpsynth.cli")
app = typer.Typer(
    help="Differentially private synthetic text, with exact privacy accounting.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _stdout_console() -> Console:
    """The console for results. Outside a terminal (a pipe, a file, CI) rich would cut tables
    at 80 columns, though nothing there has a width: let them take what they need (COLUMNS,
    when set, still wins)."""
    console = Console()
    if console.is_terminal or console.is_jupyter or os.environ.get("COLUMNS"):
        return console
    return Console(width=1000)


out = _stdout_console()

ConfigArg = Annotated[
    Path | None,
    typer.Argument(help="YAML run config; omit to use the bundled example.", show_default=False),
]
SeedOpt = Annotated[int | None, typer.Option(
    help="Fix the public randomness: prompts, sampling, generation (overrides the config's "
    "seed). DP noise stays cryptographic.")]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", help="Output folder (overrides output.dir).")
]
LevelOpt = Annotated[str, typer.Option(help=f"One of {', '.join(LEVELS)}.")]
TimeOpt = Annotated[str | None, typer.Option(
    "--time", help="The time generation may take (15m, 1h30m, 90s; overrides recipe.time): "
    "the plan times the generator now and lowers the sizes the config leaves out "
    "(iterations, then the output size) until the planned outputs fit, and says what it "
    "changed.")]


def _load(config: Path | None, seed: int | None, output: Path | None,
          time: str | None = None) -> RunConfig:
    if config is None:
        out.print(f"[dim]no config given: using the bundled example {EXAMPLE_CONFIG.name}[/dim]")
        config = EXAMPLE_CONFIG
    cfg = load_config(config)
    updates: dict[str, object] = {}
    if seed is not None:
        updates["seed"] = _check_seed(seed)  # model_copy below does not validate: check here
    if output is not None:
        updates["output"] = cfg.output.model_copy(update={"dir": output})
    if time is not None:
        try:
            updates["recipe"] = RecipeConfig.model_validate(
                {**cfg.recipe.model_dump(), "time": time})
        except ValidationError as exc:
            raise typer.BadParameter(exc.errors()[0]["msg"].removeprefix("Value error, "),
                                     param_hint="--time") from None
    return cfg.model_copy(update=updates)


def _check_seed(seed: int) -> int:
    if not 0 <= seed < 2**31:
        raise typer.BadParameter(f"{seed} is outside [0, 2^31), the range every "
                                 "library's seed takes", param_hint="--seed")
    return seed


def _check_level(level: str) -> str:
    if level.lower() not in LEVELS:
        raise typer.BadParameter(f"'{level}' is not one of {', '.join(LEVELS)}",
                                 param_hint="--log-level")
    return level.lower()


RECIPES_HELP = (f"Recipes (recipe.name): {', '.join(RECIPES)}; `dpsynth config recipe` lists "
                "each one's parameters.")


@app.command(help="Validate the data and config and print the privacy plan; nothing is "
                  f"released.\n\n{RECIPES_HELP}")
def plan(config: ConfigArg = None, seed: SeedOpt = None, output: OutputOpt = None,
         log_level: LevelOpt = "info", time: TimeOpt = None,
         estimate_time: Annotated[bool, typer.Option(
             "--estimate-time", help="Time one small batch of the generator now (a few "
             "requests to a server) and estimate how long the planned outputs take.")] = False,
         ) -> None:
    """Validate the data and config and print the privacy plan; nothing is released."""
    setup_logging(_check_level(log_level))
    run_plan = make_plan(_load(config, seed, output, time))
    print_plan(run_plan, out)
    _time_estimate(run_plan, estimate_time)


def _time_estimate(run_plan: RunPlan, measure: bool) -> None:
    from dpsynth import timing

    cfg = run_plan.config
    total = sum(run_plan.recipe.expected_generations(run_plan.data).values())
    if not run_plan.recipe.uses_backend_generator:
        out.print(f"[dim]time estimate: none; {cfg.recipe.name}'s time is its DP training "
                  "(recipe.params.steps), and --estimate-time times backends.generator, which "
                  "it does not use[/dim]")
    elif run_plan.fit is not None and not run_plan.fit.note:
        return  # the time budget's lines already give the rate and the estimate
    elif not measure:
        out.print("[dim]time estimate: `dpsynth plan --estimate-time` times one small batch "
                  "of the generator; `--time 15m` lowers the sizes to fit a time[/dim]")
    elif isinstance(cfg.backends.generator, OpenAIChatConfig) and cfg.backends.generator.dry_run:
        out.print("time estimate: none, the generator is a dry run and sends nothing")
    elif total:
        rate = timing.measure(cfg.backends.generator, cfg.base_dir,
                              timing.public_condition(cfg, run_plan.data.label_names))
        out.print(timing.describe(total, rate), soft_wrap=True)


@app.command(help="Run a recipe end to end and write the synthetic set, privacy.json and "
                  f"run.log.\n\n{RECIPES_HELP}")
def run(config: ConfigArg = None, seed: SeedOpt = None, output: OutputOpt = None,
        log_level: LevelOpt = "info", time: TimeOpt = None) -> None:
    """Run a recipe end to end and write the synthetic set, privacy.json and run.log."""
    level = _check_level(log_level)
    cfg = _load(config, seed, output, time)
    fresh = not cfg.output.dir.exists()
    setup_logging(level, prepare_output_dir(cfg.output.dir) / "run.log")
    this_run = Run(cfg)
    try:
        run_plan = this_run.plan()
    except InputError:
        if fresh:  # refused before anything ran: leave no folder with an empty log behind
            setup_logging(level)  # closes run.log
            shutil.rmtree(cfg.output.dir, ignore_errors=True)
        raise
    print_plan(run_plan, out)
    try:
        outputs = this_run.execute()
    except KeyboardInterrupt:
        again = " ".join(["dpsynth run", *([str(config)] if config else []),
                          *(["--seed", str(seed)] if seed is not None else []),
                          *(["--time", shlex.quote(time)] if time is not None else []),
                          *(["--output", str(output)] if output else [])])
        seeded = "" if cfg.budget.private else f". {NOT_PRIVATE}"
        raise Interrupted(f"the run stopped {stopped_summary(cfg.output.dir)}; `{again}` "
                          f"resumes it from {cfg.output.dir}{seeded}") from None
    if outputs.already_complete:
        out.print(f"this run is already complete: nothing was run again. Its outputs are in "
                  f"{cfg.output.dir} (use a new output folder to synthesise again)")
    if not cfg.budget.private:
        out.print(f"[bold red]{NOT_PRIVATE}[/bold red]")
    spend = outputs.spend()
    out.print(f"synthetic data: {outputs.synthetic} ({_per_label(outputs.result)})\n"
              f"privacy spend:  {outputs.privacy} (ε = {spend['epsilon']:.4g} of "
              f"{spend['epsilon_budget']:g}, δ = {spend['delta']:.3g})\n"
              f"diagnostics:    {outputs.metrics}\n"
              f"log:            {cfg.output.dir / 'run.log'}")
    if cfg.held_out is not None:
        from dpsynth.evaluate.held_out import score_held_out

        out.print(f"worth:          {score_held_out(cfg, outputs.synthetic).line()}")


def _per_label(result) -> str:
    """How many synthetic records each label got (the output is public)."""
    if result.labels is None:
        return f"{len(result.texts)} records"
    counts = Counter(result.labels)
    return f"{len(result.texts)} records: " + ", ".join(f"{label} {n}" for label, n in
                                                        sorted(counts.items()))


@app.command("eval")
def evaluate(
    synthetic: Annotated[Path, typer.Option(help="Synthetic dataset file.")],
    real_test: Annotated[Path, typer.Option(help="Real test split.")],
    real_train: Annotated[Path | None, typer.Option(
        help="Real train split, the private data: adds private-only privacy diagnostics."
    )] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", help="Folder for metrics.json and figures.json (default: eval/ beside "
        "the synthetic file).")] = None,
    text_column: Annotated[str, typer.Option(
        help="Text column of the real files (and of the synthetic one, which is read by its "
        "'text' and 'label' columns, as dpsynth run writes them, when it lacks these).")
    ] = "text",
    label_column: Annotated[str, typer.Option(
        help="Label column; files without it are treated as unlabelled.")] = "label",
    next_token: Annotated[bool, typer.Option(
        help="Train the small LM for next-token accuracy (the slowest metric).")] = True,
    next_token_steps: Annotated[int, typer.Option(help="Training steps of that LM.")] = 200,
    classifier: Annotated[str, typer.Option(
        help="Downstream classifier: logistic (on embeddings) or finetune (MiniLM).")
    ] = "logistic",
    mauve: Annotated[bool, typer.Option(help="Compute MAUVE.")] = True,
    seed: Annotated[int, typer.Option(help="Seed for subsampling and models.")] = 0,
    log_level: LevelOpt = "info",
) -> None:
    """Measure utility, fidelity and privacy risk of a synthetic dataset."""
    from dpsynth.evaluate import EvalConfig
    from dpsynth.evaluate import evaluate as run_evaluation
    from dpsynth.evaluate.next_token import NextTokenConfig

    setup_logging(_check_level(log_level))
    _check_seed(seed)
    if next_token and next_token_steps < 1:
        raise typer.BadParameter(f"{next_token_steps} is not a number of steps (1 or more; "
                                 "--no-next-token skips the metric)",
                                 param_hint="--next-token-steps")
    if classifier not in ("logistic", "finetune"):
        raise typer.BadParameter(f"'{classifier}' is not one of logistic, finetune",
                                 param_hint="--classifier")
    config = EvalConfig(
        text_column=text_column, label_column=label_column, seed=seed, mauve=mauve,
        classifier=classifier,
        next_token=NextTokenConfig(steps=next_token_steps) if next_token else None)
    folder = output if output is not None else synthetic.parent / "eval"
    result = run_evaluation(synthetic, real_test, real_train, config, output=folder)
    out.print(result.to_markdown(), highlight=False, soft_wrap=True)
    out.print(f"[dim]wrote {folder / 'metrics.json'}[/dim]")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run's output folder.")],
           output: Annotated[Path | None, typer.Option(
               "--output", help="HTML file (default: RUN_DIR/report.html).")] = None,
           private: Annotated[bool, typer.Option(
               "--private", help="Add the diagnostics computed from private records (for "
               "the data owner; not for sharing).")] = False,
           log_level: LevelOpt = "info") -> None:
    """Write a self-contained HTML report of a finished run (public unless --private)."""
    from dpsynth.report import write_report

    setup_logging(_check_level(log_level))
    path = write_report(run_dir, output, include_private=private)
    out.print(f"wrote {path}")


@app.command("config")
def config_reference(section: Annotated[str | None, typer.Argument(
        help="Show only the sections whose key starts with this (data, budget, recipe, "
             "recipe.params (pe), backends.generator, ...).")] = None) -> None:
    """Every key a run config takes: type, default, allowed values and meaning, from the config
    models themselves."""
    from rich.table import Table

    from dpsynth.config_reference import rows, sections

    chosen = {title: model for title, model in sections().items()
              if section is None or title.startswith(section)}
    if not chosen:
        raise ConfigError(f"no config section starts with '{section}'; sections: "
                          f"{', '.join(sections())}")
    for title, model in chosen.items():
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in ("key", "type", "default", "allowed", "meaning"):
            table.add_column(column, overflow="fold")
        for row in rows(model):
            table.add_row(*(escape(cell) for cell in row))
        out.print(table)


@app.command()
def version() -> None:
    """Print the dpsynth version."""
    out.print(__version__)


FULL_TRACEBACK = "DPSYNTH_TRACEBACK"
"""Set to 1 to let an unexpected error print Python's whole traceback, message included."""


def crash_summary(exc: BaseException) -> str:
    """An unexpected error as `where_raised` shows it, without its message."""
    return ("internal error (its message is not shown, as it could quote private data; "
            f"{FULL_TRACEBACK}=1 shows the whole traceback, and may then show private text):\n"
            + where_raised(exc))


def main(argv: list[str] | None = None) -> None:
    """Entry point: turn dpsynth errors into a one-line message and an exit code."""
    try:
        code = app(args=argv, standalone_mode=False)
    except DpsynthError as exc:
        what = "interrupted" if isinstance(exc, Interrupted) else "error"
        Console(stderr=True).print(f"[bold red]{what}:[/bold red] {escape(str(exc))}",
                                   highlight=False, soft_wrap=True)
        log.debug("error detail:\n%s", where_raised(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except BaseException as exc:  # click's usage errors carry their own exit code
        if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        code = getattr(exc, "exit_code", None)
        if code is not None and hasattr(exc, "show"):
            exc.show()
            sys.exit(code)
        if os.environ.get(FULL_TRACEBACK) == "1":
            raise
        Console(stderr=True).print(crash_summary(exc), highlight=False, soft_wrap=True,
                                   markup=False)
        sys.exit(1)
    if code == Interrupted.exit_code:  # Ctrl-C outside a run: typer returns 130
        Console(stderr=True).print("[bold red]interrupted[/bold red]: nothing was released")
    if isinstance(code, int) and code:
        sys.exit(code)
