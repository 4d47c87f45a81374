"""Score synthetic CSVs (text,label) as benchmarks/utility.py scores a run: logistic regression
on MiniLM embeddings, trained on each file and tested on real test records; beside them the
same classifier trained on as many real train records (the real-train row), and the
majority-class rate.

    python benchmarks/score_synthetic.py --train ag_news/train.csv --test ag_news/test.csv
        FILE.csv [FILE.csv ...] [--test-size 0] [--seeds 0,1,2]

`--seeds` draws the real-train reference that many times (mean ± std); each synthetic file is
one sample already. `--test-size 0` keeps the whole test set.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--test-size", type=int, default=0)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()

    import numpy as np
    import pandas as pd

    from dpsynth.backends import build_embedder
    from dpsynth.backends.config import MiniLMConfig
    from dpsynth.evaluate.downstream import downstream_classification

    embedder = build_embedder(MiniLMConfig())
    test = pd.read_csv(args.test)
    if args.test_size:
        test = test.sample(args.test_size, random_state=0)
    test_y = test["label"].astype(str).tolist()
    test_x = embedder.encode(test["text"].astype(str).tolist())
    majority = max(test_y.count(c) for c in set(test_y)) / len(test_y)
    print(f"test: {len(test_y)} records, majority class {majority:.3f}")
    sizes = []
    for file in args.files:
        frame = pd.read_csv(file).dropna()
        scores = downstream_classification(embedder.encode(frame["text"].astype(str).tolist()),
                                           frame["label"].astype(str).tolist(), test_x, test_y)
        words = frame["text"].astype(str).str.split().str.len().mean()
        print(f"{Path(file).name}: n={len(frame)}, accuracy {scores.accuracy:.3f}, macro-F1 "
              f"{scores.macro_f1:.3f}, mean words {words:.1f}, distinct "
              f"{frame['text'].nunique() / len(frame):.3f}")
        sizes.append(len(frame))
    train = pd.read_csv(args.train)
    n = max(sizes)
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        real = train.sample(n, random_state=seed)
        results.append(downstream_classification(
            embedder.encode(real["text"].astype(str).tolist()),
            real["label"].astype(str).tolist(), test_x, test_y))
    acc = np.array([r.accuracy for r in results])
    f1 = np.array([r.macro_f1 for r in results])
    print(f"real train, n={n}: accuracy {acc.mean():.3f} ± {acc.std():.3f}, macro-F1 "
          f"{f1.mean():.3f} ± {f1.std():.3f} ({len(results)} draws)")


if __name__ == "__main__":
    main()
