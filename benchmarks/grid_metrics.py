"""Every metric of the recipe rows in `benchmarks/utility.py` result files, as one table.

    python benchmarks/grid_metrics.py benchmarks/results/utility-trec-n1000-*.csv

The grid (results/grid-n1000.md) quotes accuracy; issue 19 also asks for macro-F1, kNN
precision and recall, wall time and generator calls per kept record. Those are in each
cell's CSV; this gathers them so the grid's cells can be read side by side, one row per
(file, recipe, ε), the file named so every figure traces back to its run.
"""

from __future__ import annotations

import argparse
import csv
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="utility-*.csv result files")
    args = parser.parse_args()
    header = ["set", "recipe", "ε", "seeds", *COLUMNS, "file"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows(args.files):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
