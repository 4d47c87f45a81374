"""Profile one `dpsynth run` end to end with cProfile and write a short summary.

    python benchmarks/profile_run.py main            # the README's job (bundled example)
    python benchmarks/profile_run.py pe  [--n 200]   # pe / dpga / eda on an ag_news sample
    python benchmarks/profile_run.py eda [--n 200] [--private 1000] [--out DIR]
    python benchmarks/profile_run.py dpga --n 1000 --private 2000 --generator pool

`main` runs the bundled example as `dpsynth run` does. The others run the recipe at a modest
size (`--n` synthetic records, a few iterations; see `sizes`) on a sample of `--private`
records of ../shared/data/ag_news/train.csv, MiniLM embedder, the offline generator or
(`--generator pool`) the shipped public pool. The
summary (wall and CPU time, load average, the top functions by cumulative and by own time)
goes to benchmarks/results/profile-NAME[-TAG].txt; the raw profile to OUT/NAME.prof. Numbers are
wall-clock on a shared machine: read them as shares of the run, not as absolute speeds.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "ag_news" / "train.csv"


def sizes(n: int) -> dict[str, dict]:
    """Recipe params at `n` synthetic records, the seeds' shapes scaled down."""
    return {
        "dpga": {"iterations": 3, "n_init": 2 * n, "n_output": n, "n_rewrite": n // 2,
                 "n_fill": n // 2, "n_crossover": n // 2, "n_generate": n // 2,
                 "length_bins": 20, "max_words": 120, "keyword_probe_samples": 10},
        "pe": {"iterations": 3, "n_output": n},
        "eda": {"iterations": 2, "n_public": n, "n_offspring": n, "n_output": n,
                "domain_size": max(10, n // 8), "n_parents": max(5, n // 20),
                "calibration_size": min(200, n)},
    }


def write_config(name: str, params: dict, private: int, folder: Path,
                 generator: str = "offline") -> Path:
    """A run config for recipe `name` on `private` ag_news records (shared with
    recipe_speed.py); its output goes to FOLDER/NAME."""
    import pandas as pd

    if not SHARED.is_file():
        raise SystemExit(f"{SHARED} is missing: recipes other than 'main' read ag_news")
    data = pd.read_csv(SHARED).sample(private, random_state=0)
    data["label"] = data["label"].astype(str)
    data.to_csv(folder / "private.csv", index=False)
    config = {
        "data": {"path": str(folder / "private.csv"), "text_column": "text",
                 "label_column": "label", "labels": sorted(data["label"].unique().tolist())},
        "budget": {"epsilon": 4.0},
        "recipe": {"name": name, "params": params},
        "backends": {"embedder": {"name": "minilm"}, "generator": {"name": generator}},
        "output": {"dir": str(folder / name)},
        "seed": 0,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def summary(prof: Path, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(str(prof), stream=out)
    stats.strip_dirs().sort_stats("cumulative").print_stats(top)
    out.write("\n---- by own time ----\n")
    stats.sort_stats("tottime").print_stats(top // 2)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=["main", "dpga", "pe", "eda"])
    parser.add_argument("--n", type=int, default=200, help="synthetic records")
    parser.add_argument("--private", type=int, default=1000, help="private records")
    parser.add_argument("--generator", choices=["offline", "pool"], default="offline")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--tag", default="", help="suffix of the summary's name (before, after)")
    args = parser.parse_args()
    from dpsynth.cli import main as cli

    folder = args.out or Path(tempfile.mkdtemp(prefix=f"dpsynth-profile-{args.name}-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.name == "main":
        argv = ["run", "--output", str(folder / "run"), "--log-level", "warning"]
        what = "dpsynth run (the bundled example: dpga, its public forum pool, MiniLM)"
    else:
        argv = ["run", str(write_config(args.name, sizes(args.n)[args.name], args.private,
                                        folder, args.generator)),
                "--log-level", "warning"]
        what = (f"{args.name}, {args.n} synthetic records from {args.private} ag_news records, "
                f"{args.generator} generator, params {sizes(args.n)[args.name]}")
    load0 = os.getloadavg()
    wall, cpu = time.perf_counter(), time.process_time()
    prof = folder / f"{args.name}.prof"
    profiler = cProfile.Profile()
    try:
        profiler.runcall(cli, argv)
    except SystemExit as stop:  # typer exits
        if stop.code not in (0, None):
            raise
    profiler.dump_stats(str(prof))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    head = (f"# profile of {what}\n"
            f"# command: python benchmarks/profile_run.py {args.name}"
            + ("" if args.name == "main" else f" --n {args.n} --private {args.private} "
                                              f"--generator {args.generator}") + "\n"
            f"# wall {wall:.0f} s, CPU {cpu:.0f} s (CPU/wall {cpu / wall:.2f}), "
            f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} at start, "
            f"{os.getloadavg()[0]:.1f} at end\n")
    args.results.mkdir(parents=True, exist_ok=True)
    target = args.results / f"profile-{args.name}{'-' + args.tag if args.tag else ''}.txt"
    target.write_text(head + summary(prof, args.top))
    print(head + f"summary: {target}\nraw profile: {prof}")


if __name__ == "__main__":
    main()
