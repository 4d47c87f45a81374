"""Utility of synthetic data side by side: recipes × ε, between an upper and a lower bound.

    python benchmarks/utility.py ag_news [--recipes dpga,pe] [--epsilons 1,2,4,inf]
        [--seeds 0,1,2] [--n-synthetic 2000] [--test-size 2000] [--next-token]
        [--generator offline|pool|pool:PATH [--pool-max-texts N] [--edit offline]]
        [--label-names JSON] [--document KIND] [--generator-options JSON]
        [--tag NAME] [--keep-runs DIR] [--no-lower-bound] [--floor-labels train]
        [--grid results/grid.csv]

Every row is scored the same way: the same embedder (MiniLM), the same real test sample, the
same downstream model (logistic regression on embeddings) and the same seeds. Rows:

- real train (upper bound): n records of the private train split, a fresh sample per seed;
- generator, no private data (lower bound): n texts from the offline generator conditioned on
  the public label names only (`--label-names` gives labels that are codes a name, as
  `data.label_names` does in a run config; the recipes' runs get the same), balanced across
  labels; `--floor-labels train` gives its labels the train split's shares instead (an
  oracle, not a private method: the floor at the label prior a recipe's output follows, the
  like-for-like reference for macro-F1, which a balanced set favours);
- each recipe at each ε: `dpsynth run` on a generated config (same generator, embedder and
  seed), reading `synthetic.csv` and the generator calls (usage.json) from the run folder;
  `calls_per_kept` is generator calls per synthetic record kept (dpga's paper spends 41).
  `--in-process` makes the same run by `dpsynth.synthesize` in this process instead, with one
  embedder for every run that embeds each text once (`Memo`): a grid then embeds the private
  split once, not once per recipe, ε and seed; so the invocation's first recipe run's
  `wall_s` holds that embedding and the later runs' do not (compare wall times from the
  second run on).

A row that cannot run (no recipe yet, no generator) is written with its reason, never with a
made-up number. Writes utility-DATASET.md and utility-DATASET.csv (mean ± std over seeds).

`--grid FILE` also appends one line per (row, ε, seed) to a machine-readable grid (`Grid`),
and a cell already there is read back instead of run: a grid too big for one session fills
up over several, and `grid_metrics.py --grid FILE` renders it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dpsynth.backends import Condition, build_embedder, build_generator
from dpsynth.backends.base import Embedder
from dpsynth.backends.config import parse_embedder, parse_generator
from dpsynth.backends.generators.label_names import with_public_names
from dpsynth.errors import DpsynthError
from dpsynth.evaluate import EvalConfig, TextTable, evaluate_embedded, read_text_table
from dpsynth.evaluate.next_token import NextTokenConfig
from dpsynth.methods.parts.toolbox import allocate
from dpsynth.methods.registry import RECIPES

ROOT = Path(__file__).resolve().parents[1]
METRICS = {  # column → path into the metrics dict
    "accuracy": ("utility", "classification", "accuracy"),
    "macro_f1": ("utility", "classification", "macro_f1"),
    "next_token_accuracy": ("utility", "next_token", "accuracy"),
    "mauve": ("fidelity", "mauve"),
    "frechet": ("fidelity", "frechet_distance"),
    "knn_precision": ("fidelity", "knn_precision"),
    "knn_recall": ("fidelity", "knn_recall"),
}

REPORTED = ("student_queries", "training_steps")  # columns a recipe fills from metrics.jsonl


class NotAvailable(Exception):
    """A row that cannot be produced here; the message says why."""


@dataclass(frozen=True)
class Produced:
    table: TextTable
    generator_calls: int | None
    reported: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None
    """Set when the run was not made now (a kept run read back)."""


class Memo(Embedder):
    """`--in-process`: one embedder for every run of the invocation, each text embedded once.

    Private texts go through the inner `encode_private`, as in a fresh run, and are kept apart
    from public ones, in this process's memory only: a convenience of a benchmark on shared
    sets, never of the library, whose runs embed their private records afresh and store them
    nowhere."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self._public: dict[str, np.ndarray] = {}
        self._private: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts):
        return self._memo(texts, self._public, self.inner.encode)

    def encode_private(self, texts):
        return self._memo(texts, self._private, self.inner.encode_private)

    def encode_uncached(self, texts):
        return self.inner.encode_uncached(texts)

    def identity(self) -> dict[str, object]:
        return self.inner.identity()

    def _memo(self, texts, memo: dict[str, np.ndarray], encode) -> np.ndarray:
        new = [text for text in dict.fromkeys(texts) if text not in memo]
        if new:
            memo.update(zip(new, encode(new), strict=True))
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([memo[text] for text in texts])


class Grid:
    """The grid file: one line per cell (set, recipe, generator, ε, seed, n, params), with the
    commit, the load and the date it was measured at, so cells made in different sessions (or
    on different machines) stay comparable line by line."""

    KEY = ("dataset", "recipe", "generator", "epsilon", "seed", "n", "params")
    COLUMNS = (*KEY, "accuracy", "macro_f1", "wall_s", "generator_calls", "kept", "majority",
               "commit", "load", "date")

    def __init__(self, path: Path, args: argparse.Namespace, majority: float) -> None:
        self.path, self.args, self.majority = path, args, majority
        done = pd.read_csv(path, dtype=str, keep_default_na=False) if path.exists() else None
        self.done = {} if done is None else {tuple(r[k] for k in self.KEY): r
                                             for r in done.to_dict("records")}

    def key(self, name: str, eps: str, seed: int) -> tuple[str, ...]:
        recipe = GRID_ROWS.get(name, name)
        if recipe == "real":
            params: dict = {}
        elif recipe in GRID_ROWS.values():
            params = _named(self.args) | ({"floor_labels": "train"}
                                          if self.args.floor_labels == "train" else {})
        else:
            params = _params_for(recipe, self.args.recipe_params,
                                 self.args.n_synthetic) | _named(self.args)
        params = json.dumps(params, sort_keys=True)
        generator = "" if recipe == "real" else self.args.generator + (
            f"+{self.args.edit}" if self.args.edit else "")
        return (self.args.dataset, recipe, generator, "" if recipe == "real" else eps,
                str(seed), str(self.args.n_synthetic), params)

    def measured(self, key: tuple[str, ...]) -> dict[str, float] | None:
        """A cell measured before, as the metrics `main` collects (blank figures are NaN)."""
        line = self.done.get(key)
        if line is None:
            return None
        figures = ("accuracy", "macro_f1", "wall_s", "generator_calls")
        metrics = {col: float(line[col]) if line[col] else math.nan for col in figures}
        metrics["calls_per_kept"] = (metrics["generator_calls"] / float(line["kept"])
                                     if line["kept"] and metrics["generator_calls"] else None)
        return metrics

    def add(self, key: tuple[str, ...], metrics: dict, kept: int) -> None:
        calls = metrics.get("generator_calls")
        line = dict(zip(self.KEY, key, strict=True)) | {
            "accuracy": f"{metrics['accuracy']:.4f}", "macro_f1": f"{metrics['macro_f1']:.4f}",
            "wall_s": f"{metrics['wall_s']:.1f}",
            "generator_calls": "" if calls is None else str(int(calls)), "kept": str(kept),
            "majority": f"{self.majority:.4f}", "commit": _commit(),
            "load": f"{os.getloadavg()[0]:.1f}",
            "date": time.strftime("%Y-%m-%dT%H:%M", time.gmtime())}
        new = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.COLUMNS)
            if new:
                writer.writeheader()
            writer.writerow(line)
        self.done[key] = line


GRID_ROWS = {"real train (upper bound)": "real",
             "generator, no private data (lower bound)": "generator_only"}


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT)
    return done.stdout.strip() if done.returncode == 0 else ""


@dataclass
class Row:
    name: str
    epsilon: str
    runs: list[dict[str, float]] = field(default_factory=list)
    note: str = ""


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    data = Path(args.data_root) / args.dataset
    train = read_text_table(data / "train.csv", require_labels=True)
    test = _sample(read_text_table(data / "test.csv", require_labels=True), args.test_size, 0)
    labels = sorted(set(train.labels or []))  # a public benchmark: its published label set
    embedder = build_embedder(parse_embedder({"name": args.embedder}))
    config = EvalConfig(seed=0, max_samples=args.n_synthetic, mauve=not args.no_mauve,
                        classifier=args.classifier,
                        next_token=NextTokenConfig(steps=args.next_token_steps)
                        if args.next_token else None)
    test_emb = embedder.encode(test.texts)
    memo = Memo(embedder) if args.in_process else None
    producers: list[tuple[str, str, Callable[[int], Produced]]] = [
        ("real train (upper bound)", "no DP",
         lambda seed: Produced(_sample(train, args.n_synthetic, seed), 0))]
    if not args.no_lower_bound:
        producers.append(("generator, no private data (lower bound)", "0",
                          lambda seed: _lower_bound(train, args.n_synthetic, seed, args)))
    for recipe in filter(None, args.recipes.split(",")):
        for eps in args.epsilons.split(","):
            producers.append((recipe, eps, _recipe_runner(recipe, float(eps), data, labels,
                                                          args, memo)))

    grid = Grid(Path(args.grid), args, _majority_share(test)) if args.grid else None
    rows = []
    for name, eps, produce in producers:
        row = Row(name, "∞" if eps == "inf" else eps)
        for seed in args.seeds:
            key = grid.key(name, eps, seed) if grid else ()
            if grid and (earlier := grid.measured(key)) is not None:
                row.runs.append(earlier)
                print(f"{name} ε={row.epsilon} seed={seed}: in {args.grid} already",
                      file=sys.stderr)
                continue
            started = time.perf_counter()
            try:
                produced = produce(seed)
            except NotAvailable as exc:
                row.note = f"not available: {exc}"
                break
            wall = (produced.wall_s if produced.wall_s is not None
                    else time.perf_counter() - started)
            result = evaluate_embedded(produced.table, embedder.encode(produced.table.texts),
                                       test, test_emb,
                                       config=config.model_copy(update={"seed": seed}))
            metrics = {col: _get(result.metrics, path) for col, path in METRICS.items()}
            calls = produced.generator_calls
            metrics.update(wall_s=wall, generator_calls=calls,
                           calls_per_kept=calls / len(produced.table) if calls else None,
                           **produced.reported)
            row.runs.append(metrics)
            if grid:
                grid.add(key, metrics, len(produced.table))
            print(f"{name} ε={row.epsilon} seed={seed}: accuracy "
                  f"{metrics['accuracy']:.4f}, {wall:.1f}s", file=sys.stderr)
        rows.append(row)
    _write(rows, args, len(test.texts), _majority(test))


def _lower_bound(train: TextTable, n: int, seed: int, args: argparse.Namespace) -> Produced:
    """n texts conditioned on the (public) label names only, balanced across labels or, with
    `--floor-labels train`, in the train split's label shares."""
    try:
        generator = build_generator(parse_generator({**_generator(args), "seed": seed}))
    except DpsynthError as exc:
        raise NotAvailable(str(exc)) from None
    generator = with_public_names(generator, json.loads(args.label_names) or None,
                                  args.document)
    labels = sorted(set(train.labels or []))
    if args.floor_labels == "train":
        counts = [train.labels.count(label) for label in labels]
        wanted = [str(y) for y in np.repeat(labels, allocate(n, np.array(counts), minimum=0))]
    else:
        wanted = [labels[i % len(labels)] for i in range(n)]
    texts = generator.generate([Condition(label=label) for label in wanted])
    kept = [i for i, text in enumerate(texts) if text.strip()]  # failed outputs are empty
    calls = generator.usage().get("calls", len(texts))
    return Produced(TextTable([texts[i] for i in kept], [wanted[i] for i in kept],
                              f"{args.generator} generator"), int(calls))


def _generator(args: argparse.Namespace) -> dict:
    """backends.generator for every row: `offline`, `hf`, ..., `pool` (the shipped pool) or
    `pool:PATH` (a public text file or folder, `--pool-max-texts` of it), edited by `--edit`."""
    name, _, path = args.generator.partition(":")
    if name != "pool":
        if args.edit:
            raise SystemExit("--edit applies to --generator pool only")
        cache = {"cache": args.generator_cache} if args.generator_cache else {}
        return {"name": name} | _model(args) | cache | json.loads(args.generator_options)
    pool: dict = {"name": "pool", "max_texts": args.pool_max_texts}
    if path:
        pool["path"] = str(Path(path).resolve())
    if args.edit:
        pool["edit"] = {"name": args.edit} | _model(args)
    return pool


def _model(args: argparse.Namespace) -> dict:
    """`model:` where one is given: smollm and pool sections have no such key."""
    return {"model": args.generator_model} if args.generator_model else {}


def _recipe_runner(recipe: str, epsilon: float, data: Path, labels: list[str],
                   args: argparse.Namespace, memo: Memo | None = None
                   ) -> Callable[[int], Produced]:
    """Run `dpsynth run` on a generated config (with a `memo`: `dpsynth.synthesize` on the same
    settings, in this process) and read its synthetic set back."""

    def run(seed: int) -> Produced:
        with tempfile.TemporaryDirectory(prefix="dpsynth-bench-") as tmp:
            out = (Path(args.keep_runs) / f"{args.dataset}-{recipe}-eps{epsilon:g}-seed{seed}"
                   if args.keep_runs else Path(tmp) / "run")
            if (out / "bench.json").exists():  # kept from an earlier invocation: score it again
                wall = json.loads((out / "bench.json").read_text(encoding="utf-8"))["wall_s"]
                return Produced(read_text_table(out / "synthetic.csv", require_labels=True),
                                _generator_calls(out), _reported(out), wall)
            started = time.perf_counter()
            config = {
                "data": {"path": str((data / "train.csv").resolve()), "label_column": "label",
                         "labels": labels, **_named(args)},
                "budget": {"epsilon": epsilon},
                "recipe": {"name": recipe, "params": _params_for(recipe, args.recipe_params,
                                                                  args.n_synthetic)},
                "backends": {"embedder": {"name": args.embedder},
                             "generator": _generator(args)},
                "output": {"dir": str(out), "format": "csv"},
                "seed": seed,
            }
            if memo is not None:
                _synthesize(config, memo)
            else:
                _dpsynth_run(config, Path(tmp) / "config.yaml")
            wall = time.perf_counter() - started
            (out / "bench.json").write_text(json.dumps({"wall_s": wall}), encoding="utf-8")
            table = read_text_table(out / "synthetic.csv", require_labels=True)
            return Produced(table, _generator_calls(out), _reported(out), wall)

    return run


def _dpsynth_run(config: dict, path: Path) -> None:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "dpsynth", "run", str(path), "--log-level",
                           "warning"], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise NotAvailable(lines[-1] if lines else f"exit code {done.returncode}")


def _synthesize(config: dict, memo: Memo) -> None:
    """The run `_dpsynth_run` makes, through the Python API and the shared embedder."""
    import dpsynth

    try:
        dpsynth.synthesize(config["data"]["path"], label=config["data"]["label_column"],
                           labels=config["data"]["labels"],
                           data_options={k: v for k, v in config["data"].items()
                                         if k in ("label_names", "document")},
                           epsilon=config["budget"]["epsilon"], recipe=config["recipe"]["name"],
                           params=config["recipe"]["params"],
                           generator=config["backends"]["generator"], embedder=memo,
                           seed=config["seed"], output_dir=config["output"]["dir"],
                           output_format=config["output"]["format"], report=False,
                           log_level=None)
    except DpsynthError as exc:
        raise NotAvailable(str(exc)) from None


def _named(args: argparse.Namespace) -> dict:
    """What every row but the real one shares and a grid cell's key holds: `data.label_names`,
    `data.document` and the generator's options, where `--label-names`, `--document` and
    `--generator-options` give them."""
    names, options = json.loads(args.label_names), json.loads(args.generator_options)
    return ({"label_names": names} if names else {}) | (
        {"document": args.document} if args.document else {}) | (
        {"generator_options": options} if options else {})


def _reported(run_dir: Path) -> dict[str, float]:
    """The recipe's own figures from the last diagnostics row (metrics.jsonl): the student
    queries kd_tutor's budget allowed, the training steps of ctcl and dpft."""
    path = run_dir / "metrics.jsonl"
    rows = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    last = json.loads(rows[-1]) if rows else {}
    return {key: float(last[key]) for key in REPORTED if key in last}


def _params_for(recipe: str, raw: str, n: int) -> dict:
    """`--recipe-params` is one params object for every recipe, or one per recipe name; a
    recipe's output size is n unless they set it (its own default is the private set's size,
    and every row is scored at the same n)."""
    params = json.loads(raw)
    params = params.get(recipe, {}) if set(params) & set(RECIPES) else params
    return {"n_output": n} | params


def _generator_calls(run_dir: Path) -> int | None:
    """Generator outputs the run asked for (usage.json `generator.outputs`; API calls for a
    remote backend are `generator.calls`)."""
    path = run_dir / "usage.json"
    if not path.exists():
        return None
    calls = json.loads(path.read_text(encoding="utf-8")).get("generator", {}).get("outputs")
    return int(calls) if calls is not None else None


def _sample(table: TextTable, n: int, seed: int) -> TextTable:
    if len(table) <= n:
        return table
    idx = np.sort(np.random.default_rng(seed).choice(len(table), size=n, replace=False))
    labels = [table.labels[i] for i in idx] if table.labels is not None else None
    return TextTable([table.texts[i] for i in idx], labels, f"{table.source}[sample {seed}]")


def _get(metrics: dict, path: tuple[str, ...]) -> float:
    for key in path:
        if not isinstance(metrics, dict) or key not in metrics:
            return math.nan
        metrics = metrics[key]
    return float(metrics) if isinstance(metrics, int | float) else math.nan  # "skipped: …"


def _majority(test: TextTable) -> str:
    """The accuracy of always answering the test sample's most common label: the floor a
    classifier must beat to have learned anything."""
    top = pd.Series(test.labels).value_counts()
    return (f"Always answering the test sample's most common label ({top.index[0]}) scores "
            f"accuracy {_majority_share(test):.3f}.\n\n")


def _majority_share(test: TextTable) -> float:
    return float(pd.Series(test.labels).value_counts().iloc[0] / len(test.labels))


def _write(rows: list[Row], args: argparse.Namespace, n_test: int, floor: str = "") -> None:
    columns = [c for c in (*METRICS, "wall_s", "generator_calls", "calls_per_kept", *REPORTED)
               if any(not _all_nan(r, c) for r in rows)]
    records, lines = [], []
    header = ["row", "ε", "seeds", *columns, "note"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        record: dict[str, object] = {"row": row.name, "epsilon": row.epsilon,
                                     "seeds": len(row.runs), "note": row.note}
        cells = []
        for col in columns:
            values = np.array([r[col] for r in row.runs if r.get(col) is not None],
                              dtype=float)
            mean = float(values.mean()) if len(values) else math.nan
            std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            record[f"{col}_mean"], record[f"{col}_std"] = mean, std
            cells.append(_cell(mean, std))
        records.append(record)
        lines.append("| " + " | ".join([row.name, row.epsilon, str(len(row.runs)), *cells,
                                         row.note]) + " |")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / "-".join(filter(None, ("utility", args.dataset, args.tag)))
    pd.DataFrame(records).to_csv(stem.with_suffix(".csv"), index=False)
    title = (f"# Utility on {args.dataset}: n = {args.n_synthetic} synthetic records, "
             f"{n_test} real test records, seeds {args.seeds}, embedder "
             f"{args.embedder}, classifier {args.classifier}\n\n")
    stem.with_suffix(".md").write_text(title + floor + "\n".join(lines) + "\n",
                                       encoding="utf-8")
    print(title + floor + "\n".join(lines))
    print(f"\nwrote {stem.with_suffix('.md')} and {stem.with_suffix('.csv')}", file=sys.stderr)


def _all_nan(row: Row, col: str) -> bool:
    return all(r.get(col) is None or math.isnan(r[col]) for r in row.runs)


def _cell(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.4g}" if math.isnan(std) else f"{mean:.4g} ± {std:.2g}"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a folder of the data root with train.csv and test.csv")
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--recipes", default="", help="comma-separated recipe names")
    parser.add_argument("--recipe-params", default="{}", help="JSON for recipe.params")
    parser.add_argument("--epsilons", default="1,2,4,inf")
    parser.add_argument("--seeds", default="0,1,2",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--n-synthetic", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=2000)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--generator", default="offline",
                        help="offline, hf, openai, pool (the shipped public pool) or pool:PATH "
                        "(public texts to select from)")
    parser.add_argument("--edit", default="", help="with a pool: the LM that rewrites what "
                        "was retrieved (offline, hf, openai; --generator-model is its model)")
    parser.add_argument("--pool-max-texts", type=int, default=10_000)
    parser.add_argument("--generator-model", default=None, help="backends.generator.model")
    parser.add_argument("--generator-options", default="{}", help="JSON of further "
                        "backends.generator keys for every row (smollm: temperature, top_p)")
    parser.add_argument("--generator-cache", default=None, help="backends.generator.cache: "
                        "runs that ask the same generator the same things share its outputs "
                        "(pair settings that differ only after generation)")
    parser.add_argument("--label-names", default="{}", help="JSON {label: public name} for "
                        "labels that are codes (data.label_names): what the generator is asked "
                        "for, in every row")
    parser.add_argument("--document", default=None, help="data.document: the kind of "
                        "document the set holds (news article, question), asked for in every "
                        "row")
    parser.add_argument("--classifier", choices=("logistic", "finetune"), default="logistic")
    parser.add_argument("--next-token", action="store_true", help="add next-token accuracy")
    parser.add_argument("--next-token-steps", type=int, default=200)
    parser.add_argument("--no-mauve", action="store_true")
    parser.add_argument("--floor-labels", choices=("balanced", "train"), default="balanced",
                        help="the generator-only row's labels: balanced, or in the train "
                        "split's shares (an oracle reference for macro-F1)")
    parser.add_argument("--no-lower-bound", action="store_true",
                        help="skip the generator-only row (when another table has it)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--tag", default="", help="suffix of the result files' names")
    parser.add_argument("--in-process", action="store_true", help="run the recipes by "
                        "dpsynth.synthesize in this process, each text embedded once for all runs")
    parser.add_argument("--keep-runs", default="", help="keep every run folder under this "
                        "directory (default: deleted after scoring); a finished run found there "
                        "is scored again instead of rerun, and an unfinished one resumes")
    parser.add_argument("--grid", default="", help="append every cell to this grid CSV "
                        "(e.g. benchmarks/results/grid.csv) and skip the cells it holds")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
