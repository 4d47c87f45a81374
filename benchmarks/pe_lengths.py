"""Do pe's texts follow the private set's lengths? pe on a sample of a train set, the same seed,
with and without the DP length histogram: mean and median words of the output against the
data's (docs/recipes/pe.md, "Lengths").

    python benchmarks/pe_lengths.py --data ../shared/data/disaster_tweets [--n 300]
        [--samples 200] [--iterations 2] [--epsilon 4] [--fractions 0,0.1] [--out /tmp/pe-lengths]

Backends are the offline defaults (MiniLM, the offline generator). The data's own lengths are
printed beside the runs' for the reader: a benchmark, not a release.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from dpsynth.config import parse_config
from dpsynth.run import run


def _words(texts: pd.Series) -> str:
    words = texts.str.split().str.len()
    return f"mean {words.mean():.1f} / median {words.median():.0f} words"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--fractions", default="0,0.1")
    parser.add_argument("--out", type=Path, default=Path("/tmp/pe-lengths"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    private = pd.read_csv(args.data / "train.csv").sample(args.n, random_state=0)
    private.to_csv(args.out / "private.csv", index=False)
    print(f"{args.data.name}: {args.n} records, {_words(private['text'])}")
    for fraction in (float(f) for f in args.fractions.split(",")):
        raw = {"data": {"path": str(args.out / "private.csv"), "label_column": "label",
                        "labels": sorted(private["label"].astype(str).unique().tolist())},
               "budget": {"epsilon": args.epsilon},
               "recipe": {"name": "pe", "params": {"iterations": args.iterations,
                                                    "n_output": args.samples,
                                                    "length_fraction": fraction}},
               "backends": {"embedder": {"name": "minilm"}, "generator": {"name": "offline"}},
               "output": {"dir": str(args.out / f"{args.data.name}-{fraction}")}, "seed": 0}
        start = time.time()
        outputs = run(parse_config(raw, base_dir=args.out))
        synthetic = pd.read_csv(outputs.synthetic, keep_default_na=False)
        print(f"length_fraction {fraction}: {len(synthetic)} texts, "
              f"{_words(synthetic['text'])}, {time.time() - start:.0f} s, "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
