"""What eda's decoder loses: the evolved embeddings against their decodings, at negligible
noise, for eda's decoders side by side on the same embeddings.

    python benchmarks/eda_decoder.py [--dataset ag_news] [--per-label 25] [--seeds 0,1,2]
        [--decodings inversion,generator] [--rewrite-neighbours 0] [--generator smollm]
        [--test-size 1000]
        [--cache runs/eda-decoder] [--out benchmarks/results/eda_decoder.md]

Per seed:
1. The initial population: `--n-public` texts written by the pool generator from the label
   names (the grid's setting; it writes in no time, and it gives the generator decoder the
   same public texts to start from as a run on the pool would).
2. eda's loop without its decoder and without noise (the top k vote counts: LimitedDomain as
   ε grows, the grid's "negligible noise"): T iterations of private nearest-neighbour votes
   per label, k parents, Alg. 2's Gaussian, `--n-offspring` draws.
3. The targets: per label some of its last k parents (as S_syn; their share of a run's
   `--n-output`), then draws of its last Gaussian (as the output's top-up), `--per-label`
   in all; every decoder gets the same ones.
4. Each decoding as the recipe runs it (`Eda._decode`): the parents decoded with the label's
   initial texts as public sources, then the draws with those decoded parents added (a run
   has all k decoded parents as sources).

Reported per decoding: cosine between each decoding's MiniLM embedding and its target, and
the accuracy / macro-F1 of logistic regression on MiniLM trained on the decoded texts and
tested on `--test-size` real test records, beside the same classifier trained on the targets
themselves (what the embeddings hold). The private embeddings are used here, outside the
recipe, for the votes only. The perplexity filter is left out (every decoding is scored).
Each decoding's texts are written beside the cache (`texts-DECODING-seedS.csv`).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from dpsynth.backends import build_embedder, build_generator
from dpsynth.backends.base import Condition
from dpsynth.backends.config import MiniLMConfig, PoolConfig, parse_generator
from dpsynth.evaluate.downstream import downstream_classification
from dpsynth.methods.eda import Eda
from dpsynth.methods.parts.gaussian import estimate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def main() -> None:
    args = _parse()
    embedder = build_embedder(MiniLMConfig())
    train = pd.read_csv(DATA / args.dataset / "train.csv")
    test = pd.read_csv(DATA / args.dataset / "test.csv").sample(args.test_size, random_state=0)
    private = _cached(Path(args.cache) / f"{args.dataset}-train.npy",
                      lambda: embedder.encode(train["text"].tolist()))
    test_x = embedder.encode_uncached(test["text"].tolist())
    labels = sorted(train["label"].unique())
    majority = float(test["label"].value_counts(normalize=True).max())
    generator = build_generator(parse_generator({"name": args.generator, "seed": 0,
                                                 "threads": args.threads}))
    rows = []
    for seed in args.seeds:
        pool = build_generator(PoolConfig(seed=seed))
        targets, public = _evolve(args, seed, labels, pool, embedder, private,
                                  train["label"].to_numpy())
        y = [g for g in labels for _ in range(args.per_label)]
        flat = np.concatenate(targets)
        score = downstream_classification(flat, y, test_x, test["label"].tolist(), seed)
        rows.append({"seed": seed, "decoding": "(targets, undecoded)", "cosine": 1.0,
                     "accuracy": score.accuracy, "macro_f1": score.macro_f1,
                     "s_per_text": 0.0, "load": os.getloadavg()[0]})
        for decoding in args.decodings:
            start = time.perf_counter()
            texts = _decode(args, decoding, seed, labels, targets, public, generator, embedder)
            seconds = (time.perf_counter() - start) / len(flat)
            back = embedder.encode([t or "." for t in texts])
            pd.DataFrame({"label": y, "text": texts,  # for reading, beside the cache
                          "cosine": np.sum(back * flat, axis=1)}).to_csv(
                Path(args.cache) / f"texts-{decoding}-seed{seed}.csv", index=False)
            score = downstream_classification(back, y, test_x, test["label"].tolist(), seed)
            rows.append({"seed": seed, "decoding": decoding,
                         "cosine": float(np.mean(np.sum(back * flat, axis=1))),
                         "accuracy": score.accuracy, "macro_f1": score.macro_f1,
                         "s_per_text": seconds, "load": os.getloadavg()[0]})
            print(rows[-1], flush=True)
            for g in range(len(labels)):
                print(f"  {labels[g]}: {texts[g * args.per_label][:160]!r}", flush=True)
        _report(args, pd.DataFrame(rows), majority, len(train))  # after each seed


def _evolve(args, seed, labels, pool, embedder, private, private_labels):
    """Per label: the targets (last parents, then draws of the last Gaussian) and the
    initial public texts."""
    per = args.n_public // len(labels)
    offspring = args.n_offspring // len(labels)
    targets, public = [], []
    for g, label in enumerate(labels):
        texts = pool.generate([Condition(label=label, length=args.text_words)] * per)
        population = embedder.encode(texts)
        voters = private[private_labels == label]
        for t in range(args.iterations):
            votes = np.bincount((voters @ population.T).argmax(axis=1),
                                minlength=len(population))
            parents = population[np.argsort(-votes, kind="stable")[:args.parents]]
            model = estimate(parents, args.alpha, args.top_r)
            population = model.sample(offspring, np.random.default_rng([seed, t, g]))
        head = _parents_share(args, len(labels))
        drawn = model.sample(args.per_label - head,
                             np.random.default_rng([seed, args.iterations, g]))
        targets.append(np.concatenate([parents[:head], drawn]))
        public.append(texts)
    return targets, public


def _parents_share(args, labels: int) -> int:
    """Targets a label that are last parents: their share of a label's output in a run
    (k of n_output / labels; the rest are draws of the last Gaussian), at least one."""
    return max(1, min(args.per_label, round(args.per_label * args.parents * labels
                                            / args.n_output)))


def _decode(args, decoding, seed, labels, targets, public, generator, embedder):
    """Each label's targets decoded as `Eda._decode` decodes them: the parents first (its
    initial texts as public sources), then the draws (the decoded parents added)."""
    recipe = Eda.from_config({"decoding": decoding, "rewrite_samples": args.rewrite_samples,
                              "rewrite_neighbours": args.rewrite_neighbours,
                              "decode_samples": args.decode_samples})
    ctx = SimpleNamespace(seed=seed, embedder=embedder, generator=generator,
                          embed_public=embedder.encode)
    out = []
    for g, label in enumerate(labels):
        head = _parents_share(args, len(labels))
        parents = recipe._decode(ctx, targets[g][:head], (99, g), label, public[g])
        rest = targets[g][head:]
        out += parents + (recipe._decode(ctx, rest, (100, g), label,
                                         public[g] + [t for t in parents if t])
                          if len(rest) else [])
    return out


def _report(args, frame: pd.DataFrame, majority: float, n_private: int) -> None:
    summary = frame.groupby("decoding", sort=False).agg(
        cosine=("cosine", "mean"), cosine_std=("cosine", "std"),
        accuracy=("accuracy", "mean"), accuracy_std=("accuracy", "std"),
        macro_f1=("macro_f1", "mean"), s_per_text=("s_per_text", "mean"),
        load=("load", "mean")).reset_index()
    lines = [f"# eda's decoders at negligible noise ({args.dataset})", "",
             "```bash", "python benchmarks/eda_decoder.py " + " ".join(args.argv), "```", "",
             f"{n_private:,} private records, {args.iterations} noise-free iterations "
             f"(k = {args.parents}, N_cld = {args.n_offspring}, N_pb = {args.n_public} from the "
             f"pool), {args.per_label} targets a label, seeds {args.seeds}; logistic "
             f"regression on MiniLM, {args.test_size} real test records, majority class "
             f"{majority:.3f}; generator {args.generator}, 2 shared CPU cores.", "",
             "| decoding | cosine to target | accuracy | macro-F1 | s a text | load |",
             "|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        lines.append(f"| {r.decoding} | {r.cosine:.3f} ± {_std(r.cosine_std)} | "
                     f"{r.accuracy:.3f} ± {_std(r.accuracy_std)} | {r.macro_f1:.3f} | "
                     f"{r.s_per_text:.2f} | {r.load:.1f} |")
    lines += ["", "Per seed:", "", "| " + " | ".join(frame.columns) + " |",
              "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row)
              + " |" for row in frame.itertuples(index=False)]
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


def _std(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.3f}"


def _cached(path: Path, compute) -> np.ndarray:
    if path.exists():
        return np.load(path)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, value)
    return value


def _parse() -> argparse.Namespace:
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ag_news")
    parser.add_argument("--per-label", type=int, default=25)
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")],
                        default=[0, 1, 2])
    parser.add_argument("--decodings", type=lambda s: s.split(","),
                        default=["inversion", "generator"])
    parser.add_argument("--generator", default="smollm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rewrite-samples", type=int, default=4)
    parser.add_argument("--rewrite-neighbours", type=int, default=0)
    parser.add_argument("--decode-samples", type=int, default=8)
    parser.add_argument("--n-public", type=int, default=1000)
    parser.add_argument("--n-offspring", type=int, default=1200)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--parents", type=int, default=30)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--top-r", type=int, default=10)
    parser.add_argument("--text-words", type=int, default=20)
    parser.add_argument("--n-output", type=int, default=1000,
                        help="the run's output size: sets the parents' share of the targets")
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--cache", default=str(ROOT / "runs" / "eda-decoder"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    return args


if __name__ == "__main__":
    main()
