"""Canary exposure per recipe end to end: plant canaries, run, look for them in the output.

    python benchmarks/canary_exposure.py CONFIG [--grid benchmarks/configs/canary_grid.yaml]
        [--recipes dpga,pe] [--epsilons 1,4,none] [--repeats 1,4] [--k 20] [--seed 0]
        [--generator-json '{"name": "openai", "model": "m", "dry_run": true}'] [--out DIR]

For every cell recipe × ε × repeats: plants k canaries, each `repeats` times (and keeps k
never-planted references), in a copy of the config's private file, runs `dpsynth run` on the
config pointed at that copy, and prints one table row with the exposure of the planted
canaries in the synthetic output (membership AUC, exposure in bits, verbatim copies) beside
the power of the test: the half-width of the 95% band a random scorer's AUC stays within at
k, and the AUC that DP itself allows. A first row scores the planted private file itself:
what a recipe that copied its input would show. ε `none` is the near-non-private limit (ε = 100).

The grid file names the recipes, their params and how the copies of a repeated canary are
counted (`units`): `user` puts every copy under one user (data.max_records_per_user raised to
the repeats); `record` gives each copy its own user, for recipes that clip one record per
unit. Without --grid the config's own recipe runs with its params and `user` units.

The canaries are pseudo-words, not private text; planted copies live in a temporary folder.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from dpsynth.data import DataConfig, load_private, read_table, write_table
from dpsynth.evaluate.canaries import Canaries, canary_exposure, plant_canaries_in_file
from dpsynth.evaluate.tables import read_text_table

ROOT = Path(__file__).resolve().parents[1]
NON_PRIVATE_EPSILON = 100.0
"""ε for `none`: the largest budget a config takes (accountants overflow far above it: Laplace,
SVT and LimitedDomain PLDs at exp(ε) > ~709). At 100 the noise is already small beside the
counts of these sets; the table from the first version of this script used 1000."""

COLUMNS = ("recipe", "ε", "repeats", "units", "private records", "k", "synthetic", "auc",
           "random ±95%", "DP bound", "mean exposure", "max exposure", "verbatim", "wall_s",
           "note")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    config_path = Path(args.config).resolve()
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    grid = (yaml.safe_load(Path(args.grid).read_text(encoding="utf-8")) if args.grid else
            {config["recipe"]["name"]: {"params": config["recipe"].get("params", {})}})
    recipes = args.recipes.split(",") if args.recipes else list(grid)
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS), flush=True)
    rows = [_copy_control(config, config_path, args)]
    print("| " + " | ".join(_fmt(rows[0].get(c, "")) for c in COLUMNS) + " |", flush=True)
    for recipe in recipes:
        for eps in args.epsilons.split(","):
            for repeats in map(int, args.repeats.split(",")):
                row = _cell(config, config_path, recipe, grid[recipe], eps, repeats, args)
                print("| " + " | ".join(_fmt(row.get(c, "")) for c in COLUMNS) + " |",
                      flush=True)
                rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"canary-exposure-{config_path.stem}.json").write_text(json.dumps(rows, indent=2))
    return 0


def _cell(base: dict, config_path: Path, recipe: str, spec: dict, eps: str, repeats: int,
          args: argparse.Namespace) -> dict:
    """One grid cell: plant, run, score; a failed run is a row with its reason."""
    config = copy.deepcopy(base)
    config["recipe"] = {"name": recipe, "params": spec.get("params", {})}
    config["budget"] = {**config.get("budget", {}), "epsilon": parse_epsilon(eps)}
    data = config["data"]
    source = _source(data, config_path)
    users = data.get("user_column")
    units = "user" if users and spec.get("units", "user") == "user" else "record"
    row = {"recipe": recipe, "ε": eps, "repeats": repeats, "units": units, "k": args.k,
           "random ±95%": random_auc_halfwidth(args.k),
           "DP bound": dp_auc_bound(parse_epsilon(eps) * (repeats if units == "record" else 1))}
    with tempfile.TemporaryDirectory(prefix="dpsynth-canaries-") as tmp:
        planted_path = Path(tmp) / f"planted{source.suffix}"
        canaries = plant_canaries_in_file(
            source, planted_path, args.k, args.seed, data.get("text_column", "text"),
            data.get("label_column"), users, repeats)
        data["path"] = str(planted_path)
        if repeats > 1:
            data["duplicates"] = "keep"
            if units == "user":
                data["max_records_per_user"] = max(repeats, data.get("max_records_per_user", 1))
            elif users:
                _one_user_per_copy(planted_path, data.get("text_column", "text"), users,
                                   canaries)
        row["private records"] = load_private(DataConfig.model_validate(data)).n_records
        if args.generator_json:
            config.setdefault("backends", {})["generator"] = json.loads(args.generator_json)
        _absolute_paths(config, config_path.parent)
        run_dir = Path(tmp) / "run"
        config["output"] = {**config.get("output", {}), "dir": str(run_dir), "format": "csv"}
        config["seed"] = args.seed
        run_config = Path(tmp) / "config.yaml"
        run_config.write_text(yaml.safe_dump(config), encoding="utf-8")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "dpsynth", "run", str(run_config),
                               "--log-level", "warning"], capture_output=True, text=True,
                              cwd=ROOT)
        row["wall_s"] = time.perf_counter() - started
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            return row | {"note": f"run failed: {lines[-1] if lines else done.returncode}"}
        synthetic = read_text_table(run_dir / "synthetic.csv", label_column=None)
        exposure = canary_exposure(canaries, synthetic.texts)
    return row | {"synthetic": len(synthetic), "auc": exposure["auc"],
                  "mean exposure": exposure["mean_exposure_bits"],
                  "max exposure": exposure["max_exposure_bits"],
                  "verbatim": exposure["verbatim"]}


def _copy_control(config: dict, config_path: Path, args: argparse.Namespace) -> dict:
    """The planted private texts scored as if they were the output: what a recipe that copied
    its input would show, so the power of the test against a verbatim leak."""
    data = config["data"]
    source = _source(data, config_path)
    text_column = data.get("text_column", "text")
    with tempfile.TemporaryDirectory(prefix="dpsynth-canaries-") as tmp:
        planted_path = Path(tmp) / f"planted{source.suffix}"
        canaries = plant_canaries_in_file(source, planted_path, args.k, args.seed, text_column,
                                          data.get("label_column"), data.get("user_column"))
        texts = read_table(planted_path)[text_column].astype(str).tolist()
    exposure = canary_exposure(canaries, texts)
    return {"recipe": "copy of the input (control)", "ε": "—", "repeats": 1, "k": args.k,
            "private records": len(texts), "synthetic": len(texts), "auc": exposure["auc"],
            "random ±95%": random_auc_halfwidth(args.k),
            "mean exposure": exposure["mean_exposure_bits"],
            "max exposure": exposure["max_exposure_bits"], "verbatim": exposure["verbatim"]}


def parse_epsilon(text: str) -> float:
    """`none` is the non-private limit; anything else a finite ε."""
    return NON_PRIVATE_EPSILON if text == "none" else float(text)


def random_auc_halfwidth(k: int) -> float:
    """1.96 standard errors of the AUC of k planted vs k reference canaries under no leak
    (Mann-Whitney, no ties): an AUC inside 0.5 ± this is what a random scorer gives."""
    return 1.96 * math.sqrt((2 * k + 1) / (12 * k * k))


def dp_auc_bound(epsilon: float) -> float:
    """The largest membership AUC an ε-DP release allows (δ ignored): TPR ≤ e^ε·FPR and
    1 − FPR ≥ e^−ε·(1 − TPR) enclose an area of e^ε / (1 + e^ε)."""
    return 1.0 / (1.0 + math.exp(-min(epsilon, 700.0)))


def _source(data: dict, config_path: Path) -> Path:
    """The private file, read relative to the config's folder as `dpsynth run` does."""
    path = Path(data["path"])
    return path if path.is_absolute() else config_path.parent / path


def _one_user_per_copy(path: Path, text_column: str, user_column: str,
                       canaries: Canaries) -> None:
    """Give each copy of a planted canary its own user, so that a recipe bounding users to
    one record keeps every copy (record-level units for the canaries)."""
    frame = read_table(path)
    copies = frame[text_column].isin(canaries.planted)
    frame.loc[copies, user_column] = [f"{user}-copy{i}" for i, user in
                                      enumerate(frame.loc[copies, user_column])]
    write_table(frame, path)


def _absolute_paths(config: dict, base: Path) -> None:
    """The run config moves to a temporary folder: paths that name files beside the original
    config (a pool, an embedder's fit texts, a model or decoder, a held-out split) are made
    absolute so that they still resolve."""
    def walk(section: object) -> None:
        if not isinstance(section, dict):
            return
        for key, value in section.items():
            if isinstance(value, dict):
                walk(value)
            elif key in PATH_KEYS and isinstance(value, str) \
                    and not Path(value).is_absolute() and (base / value).exists():
                section[key] = str((base / value).resolve())

    for name in ("backends", "recipe", "held_out"):
        walk(config.get(name))


PATH_KEYS = {"model", "cache", "prompts", "path", "fit_texts", "decoder", "topic_model"}


def _fmt(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a dpsynth run config (YAML): data and backends")
    parser.add_argument("--grid", default=None,
                        help="YAML: recipe name → {params, units}; default the config's recipe")
    parser.add_argument("--recipes", default=None, help="comma-separated subset of the grid")
    parser.add_argument("--epsilons", default="1,4,none", help="'none': non-private limit")
    parser.add_argument("--repeats", default="1,4", help="copies of each canary")
    parser.add_argument("--k", type=int, default=20, help="canaries planted")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generator-json", default=None,
                        help="replace backends.generator with this JSON object")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
