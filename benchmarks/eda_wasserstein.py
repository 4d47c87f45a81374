"""Embedding-EDA per iteration (the seed's Fig. 3 and 4): Wasserstein distance between the
synthetic and the private embeddings, parent-set sizes, and the decoder's reconstruction
similarity on the dataset's real test texts.

    python benchmarks/eda_wasserstein.py trec [--epsilon 5] [--n-private 2000]
        [--iterations 5] [--n-public 1000] [--n-offspring 3000] [--n-output 600]
        [--out runs/eda-trec] [--seed 0] [--icl]

    python benchmarks/eda_wasserstein.py --run runs/trec-eda-eps5-seed0 \
        --compare runs/trec-dpga-eps5-seed0 runs/trec-pe-eps5-seed0 [--n-w1 100]

Runs `recipe: eda` (offline generator, MiniLM, shipped decoder) on a seeded sample of the
private train split, or takes a finished run (`--run`, e.g. one kept by `utility.py
--keep-runs`, whose config names its private file), then reads its checkpoints: after
iteration t the checkpoint holds each label's decoded parents S_syn and the Gaussian the
next population is drawn from. The distances use the private embeddings, so they are
computed here, outside the recipe, and are not DP releases. W1 is exact (linear assignment)
between equal-size samples and grows as the samples shrink, so every figure subsamples
both sides to one size (`--n-w1`) and averages a few subsamples; `--compare` scores other
runs' outputs (the seed's constant baseline lines) at that size.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from dpsynth.backends import build_embedder
from dpsynth.backends.config import MiniLMConfig
from dpsynth.checkpoint import CheckpointStore
from dpsynth.config import parse_config
from dpsynth.evaluate.fidelity import wasserstein_distance
from dpsynth.methods.eda import EdaParams, draw_population
from dpsynth.methods.parts.toolbox import allocate
from dpsynth.run import run

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    args = _parse()
    run_dir, train, test = _existing(Path(args.run)) if args.run else _fresh(args)
    embedder = build_embedder(MiniLMConfig())
    private = embedder.encode(train["text"].tolist())
    params = EdaParams(**json.loads((run_dir / "config.json").read_text())["recipe"]["params"])

    def w1(embeddings: np.ndarray) -> float:
        """Mean over `--repeats` subsample seeds of W1 at the fixed size `--n-w1`."""
        return round(float(np.mean([wasserstein_distance(private, embeddings, args.n_w1, s)
                                    for s in range(args.repeats)])), 4)

    store = CheckpointStore(run_dir / "checkpoints")
    steps = sorted(int(p.stem.split("-")[1]) for p in store.folder.glob("step-*.json"))
    rows = []
    for step in steps:
        state = json.loads((store.folder / f"step-{step:05d}.json").read_text())["state"]
        recipe, seed = state["recipe"], state["public_seed"]
        parents = [t for texts in recipe["parents"] for t in texts]
        row: dict = {"iteration": step}
        if step:
            history = recipe["history"][step - 1]
            row.update(selected=history["selected"], kept=history["kept"],
                       epsilon_spent=round(history["epsilon_spent"], 4))
        row["w1_parents"] = w1(embedder.encode(parents)) if parents else float("nan")
        row["w1_next_population"] = w1(_population(recipe, embedder, seed, step,
                                                   params.n_offspring))
        rows.append(row)
    print(f"W1 to the private embeddings ({len(private)}), both sides subsampled to "
          f"{args.n_w1}, mean of {args.repeats} subsamples:")
    print(pd.DataFrame(rows).to_string(index=False))
    finals = {"eda output (synthetic.csv)": run_dir / "synthetic.csv"}
    finals |= {f"{Path(r).name} (synthetic.csv)": Path(r) / "synthetic.csv"
               for r in args.compare}
    for name, path in finals.items():
        print(f"{name}: W1 {w1(embedder.encode(pd.read_csv(path)['text'].tolist()))}")
    print(f"real test sample: W1 {w1(embedder.encode(test['text'][: 5 * args.n_w1].tolist()))}")
    if args.n_reconstruct:
        print(_reconstruction(embedder, test["text"].tolist()[: args.n_reconstruct],
                              args.samples))
    if args.icl:
        print(_icl(pd.read_csv(run_dir / "synthetic.csv"), test))


def _fresh(args: argparse.Namespace) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """Run the recipe on a seeded sample of the dataset's train split."""
    if not args.dataset:
        raise SystemExit("give a dataset, or --run with a finished run folder")
    data = Path(args.data_root) / args.dataset
    out = Path(args.out or ROOT / "runs" / f"eda-{args.dataset}-eps{args.epsilon:g}")
    out.mkdir(parents=True, exist_ok=True)
    full = pd.read_csv(data / "train.csv")
    train = full.sample(n=args.n_private, random_state=args.seed)
    train.to_csv(out / "private.csv", index=False)
    shutil.copy(data / "test.csv", out / "test.csv")  # where `--run` looks for the split
    params = {"iterations": args.iterations, "n_public": args.n_public,
              "n_offspring": args.n_offspring, "n_output": args.n_output}
    raw = {"data": {"path": str((out / "private.csv").resolve()), "label_column": "label",
                    "labels": sorted(map(str, full["label"].unique()))},  # the set's labels
           "budget": {"epsilon": args.epsilon},
           "recipe": {"name": "eda", "params": params},
           "output": {"dir": str(out / "run")}, "seed": args.seed}
    run(parse_config(raw, base_dir=out))
    return out / "run", train, _test(data, args.seed)


def _existing(run_dir: Path) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """A finished eda run: its private file (from its config) and that folder's test split."""
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    if config["recipe"]["name"] != "eda":
        raise SystemExit(f"{run_dir}: recipe {config['recipe']['name']!r}, not eda")
    private = Path(config["data"]["path"])
    return run_dir, pd.read_csv(private), _test(private.parent, config["seed"])


def _test(data: Path, seed: int) -> pd.DataFrame:
    return pd.read_csv(data / "test.csv").sample(frac=1.0, random_state=seed)


def _population(recipe: dict, embedder, seed: int, step: int, n_offspring: int) -> np.ndarray:
    """The population iteration `step + 1` votes on, as the recipe draws it."""
    models = recipe["models"]
    sizes = allocate(n_offspring, np.full(len(models), 1.0 / len(models)))
    parts = []
    for g, model in enumerate(models):
        if model is None:
            parts.append(embedder.encode(recipe["public"][g]))
        else:
            parts.append(draw_population(model, seed, step, g, int(sizes[g])))
    return np.concatenate(parts)


def _reconstruction(embedder, texts: list[str], samples: int) -> str:
    """Greedy and best-of-`samples` (the recipe's default decoding) reconstruction."""
    from dpsynth.backends.offline.inversion import InversionDecoder

    decoder = InversionDecoder()
    emb = embedder.encode(texts)
    lines = []
    for n in sorted({0, samples}):
        back = embedder.encode(decoder.decode_closest(emb, embedder, n))
        cos = np.sum(emb * back, axis=1)
        other = np.sum(np.roll(emb, 1, axis=0) * back, axis=1)
        lines.append(f"decoder reconstruction on {len(texts)} real test texts, "
                     f"{'greedy' if n == 0 else f'best of greedy + {n} samples'}: cosine "
                     f"mean {cos.mean():.3f}, median {np.median(cos):.3f} (to another "
                     f"text: {other.mean():.3f})")
    return "\n".join(lines)


def _icl(synthetic: pd.DataFrame, test: pd.DataFrame) -> str:
    from dpsynth.backends.offline.generator import OfflineGenerator
    from dpsynth.evaluate.icl import IclConfig, icl_accuracy

    result = icl_accuracy(OfflineGenerator(seed=0), synthetic["text"].tolist(),
                          synthetic["label"].astype(str).tolist(), test["text"].tolist(),
                          test["label"].astype(str).tolist(), IclConfig(max_test=200))
    return f"ICL (offline LM, 6-shot): {json.dumps(result)}"


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?")
    parser.add_argument("--run", default=None, help="a finished eda run folder to read")
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--epsilon", type=float, default=5.0)
    parser.add_argument("--n-private", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--n-public", type=int, default=1000)
    parser.add_argument("--n-offspring", type=int, default=3000)
    parser.add_argument("--n-output", type=int, default=600)
    parser.add_argument("--n-reconstruct", type=int, default=200,
                        help="real test texts to decode back (0: skip)")
    parser.add_argument("--n-w1", type=int, default=100, help="W1 sample size, every column")
    parser.add_argument("--repeats", type=int, default=5, help="subsamples averaged per W1")
    parser.add_argument("--compare", nargs="*", default=[],
                        help="other runs (e.g. dpga, pe) whose synthetic.csv is scored too")
    parser.add_argument("--samples", type=int, default=8,
                        help="best-of-n reconstruction reported beside greedy")
    parser.add_argument("--out", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--icl", action="store_true", help="also 6-shot ICL on the offline LM")
    return parser.parse_args()


if __name__ == "__main__":
    main()
