"""Every metric of the recipe rows in `benchmarks/utility.py` result files, as one table.

    python benchmarks/grid_metrics.py benchmarks/results/utility-trec-n1000-*.csv
    python benchmarks/grid_metrics.py --grid benchmarks/results/grid.csv > grid.md

The grid (results/grid-n1000.md) quotes accuracy; issue 19 also asks for macro-F1, kNN
precision and recall, wall time and generator calls per kept record. Those are in each
cell's CSV; this gathers them so the grid's cells can be read side by side, one row per
(file, recipe, ε), the file named so every figure traces back to its run. `--grid` renders the
one-line-per-seed grid file `utility.py --grid` appends to: mean ± std over its seeds.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from pathlib import Path

COLUMNS = ("accuracy", "macro_f1", "knn_precision", "knn_recall", "wall_s", "calls_per_kept")
BOUNDS = ("real train", "generator, no private data")


def cell(row: dict[str, str], metric: str) -> str:
    """`mean ± std` to the grid's three decimals (seconds whole); blank where the run did not
    report the metric. One seed has no std: utility.py writes it empty."""
    mean, std = row.get(f"{metric}_mean", ""), row.get(f"{metric}_std", "")
    if not mean:
        return ""
    digits = 0 if metric == "wall_s" else 3
    text = f"{float(mean):.{digits}f}"
    return f"{text} ± {float(std):.{digits}f}" if std else text


def dataset_of(path: Path) -> str:
    """The set a result file is about: its name up to the tag's `-nN` (utility.py's names)."""
    match = re.fullmatch(r"utility-(.+?)(?:-n\d+.*)?", path.stem)
    return match.group(1) if match else path.stem


def rows(paths: list[Path]) -> list[list[str]]:
    out = []
    for path in paths:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["row"].startswith(BOUNDS):
                    continue
                out.append([dataset_of(path), row["row"], row["epsilon"], row["seeds"],
                            *(cell(row, m) for m in COLUMNS), path.name])
    return sorted(out, key=lambda r: (r[0], r[1], float(r[2]) if r[2] else 0.0))


def grid_rows(path: Path) -> list[list[str]]:
    """One row per (set, recipe, generator, ε, n, params) of a grid file, over its seeds."""
    with path.open(newline="", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    cells: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for line in lines:
        key = tuple(line[k] for k in ("dataset", "recipe", "generator", "epsilon", "n",
                                      "params"))
        cells.setdefault(key, []).append(line)
    out = []
    for (dataset, recipe, generator, eps, n, params), seeds in cells.items():
        kept = [float(s["kept"]) for s in seeds]
        generated = recipe != "real"  # real train: no generator, no cost to show
        calls = [float(s["generator_calls"]) / k if generated and k else math.nan
                 for s, k in zip(seeds, kept, strict=True)]
        wall = [float(s["wall_s"]) if generated else math.nan for s in seeds]
        out.append([dataset, recipe, generator, eps, n, str(len(seeds)),
                    *(spread([float(s[m]) for s in seeds], 3) for m in ("accuracy", "macro_f1")),
                    spread(wall, 0), spread(calls, 1),
                    seeds[0]["majority"], params])
    order = {"real": 0, "generator_only": 1}
    return sorted(out, key=lambda r: (r[0], order.get(r[1], 2), r[1], r[2],
                                      float(r[3]) if r[3] else 0.0))


def spread(values: list[float], digits: int) -> str:
    """`mean ± std` (sample std; one seed: the value alone, NaN-free values only)."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return ""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="utility-*.csv result files")
    parser.add_argument("--grid", type=Path, help="a grid file (utility.py --grid)")
    args = parser.parse_args()
    if args.grid:
        header = ["set", "recipe", "generator", "ε", "n", "seeds", "accuracy", "macro_f1",
                  "wall_s", "calls_per_kept", "majority", "params"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in grid_rows(args.grid):
            print("| " + " | ".join(row) + " |")
        return
    header = ["set", "recipe", "ε", "seeds", *COLUMNS, "file"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows(args.files):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
