"""kd_tutor's selection stage by stage, on one run's candidates and student: what ranking by
the student adds over the candidates themselves (issue 40).

    python benchmarks/kd_selection.py ag_news --epsilon 4 --seeds 0,1,2 --n-output 500 \
        --generator smollm [--test-size 1000] [--data-root ../shared/data]

Per seed, one kd_tutor run (`dpsynth.synthesize`, the recipe's defaults at `--n-output`)
records its candidates, the labels they were generated for, the student's scores and the
label quotas where the recipe selects. The same candidates are then chosen four ways, each at
the same quotas, and scored downstream (MiniLM + logistic regression on real test records):

    random   uniformly among each label's candidates (what the candidates alone are worth)
    top      the highest student scores (the seed's §3.6; `selection: top`)
    sample   drawn in proportion to the scores (`selection: sample`)
    filter   uniformly among the candidates scored at least their label's median
    bottom   the lowest scores (does the student's order carry the signal at all?)

`--save DIR` keeps each seed's candidates, labels and scores (public: DP outputs and their
post-processing) in DIR/seed-S.npz for other rules later.

Every choice is post-processing of the same DP run: one privacy spend per seed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

import dpsynth
from dpsynth.backends import build_embedder
from dpsynth.backends.config import parse_embedder
from dpsynth.evaluate import EvalConfig, TextTable, evaluate_embedded, read_text_table
from dpsynth.methods.kd_tutor import KdTutor

ROOT = Path(__file__).resolve().parents[1]
RULES = ("random", "top", "sample", "filter", "bottom")


def captured_run(args: argparse.Namespace, seed: int) -> dict:
    """One kd_tutor run; what its selection saw."""
    seen: dict = {}
    candidates, scores, select = KdTutor._candidates, KdTutor._scores, KdTutor._select

    def keep_candidates(self, ctx, groups):
        texts, labels, negatives = candidates(self, ctx, groups)
        seen.update(texts=texts[negatives:], groups=groups)
        return texts, labels, negatives

    def keep_scores(self, private, proba, generated):
        seen["scores"] = scores(self, private, proba, generated)
        return seen["scores"]

    def keep_quota(self, scored, probs, rng):
        seen["probs"] = probs
        return select(self, scored, probs, rng)

    KdTutor._candidates, KdTutor._scores, KdTutor._select = (keep_candidates, keep_scores,
                                                             keep_quota)
    try:
        data = Path(args.data_root) / args.dataset / "train.csv"
        dpsynth.synthesize(str(data), labels=args.labels, epsilon=args.epsilon,
                           recipe="kd_tutor", params={"n_output": args.n_output},
                           generator={"name": args.generator}, seed=seed, report=False,
                           log_level=None)
    finally:
        KdTutor._candidates, KdTutor._scores, KdTutor._select = candidates, scores, select
    return seen


def chosen(seen: dict, rule: str, n: int, seed: int) -> list[tuple[int, int]]:
    """(candidate, label) pairs by `rule` at the run's quotas."""
    scores = seen["scores"]
    rng = np.random.default_rng([seed, 7])
    if rule == "random":
        scores = np.where(np.isfinite(scores), rng.random(scores.shape), -np.inf)
    elif rule == "filter":
        finite = np.where(np.isfinite(scores), scores, np.nan)
        above = np.isfinite(scores) & (scores >= np.nanmedian(finite, axis=0))
        scores = np.where(above, 1.0 + rng.random(scores.shape),
                          np.where(np.isfinite(scores), rng.random(scores.shape), -np.inf))
    elif rule == "bottom":
        scores = np.where(np.isfinite(scores), 1.0 - scores, -np.inf)
    recipe = KdTutor.from_config({"n_output": n,
                                  "selection": "sample" if rule == "sample" else "top"})
    return recipe._select(scores, seen["probs"], rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--n-output", type=int, default=500)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--generator", default="smollm")
    parser.add_argument("--save", default="", help="keep each seed's candidates and scores")
    args = parser.parse_args()
    root = Path(args.data_root) / args.dataset
    train = read_text_table(root / "train.csv", require_labels=True)
    args.labels = sorted(set(train.labels))
    test = read_text_table(root / "test.csv", require_labels=True)
    keep = np.random.default_rng(0).permutation(len(test.texts))[: args.test_size]
    test = TextTable([test.texts[i] for i in keep], [test.labels[i] for i in keep], "test")
    embedder = build_embedder(parse_embedder({"name": "minilm"}))
    test_emb = embedder.encode(test.texts)
    print(f"# {args.dataset}, kd_tutor at its defaults, n_output {args.n_output}, ε "
          f"{args.epsilon:g}, generator {args.generator}; {len(test.texts)} test records; "
          f"load {os.getloadavg()[0]:.1f}")
    results: dict[str, list[float]] = {rule: [] for rule in RULES}
    for seed in map(int, args.seeds.split(",")):
        started = time.perf_counter()
        seen = captured_run(args, seed)
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            np.savez(Path(args.save) / f"seed-{seed}.npz", texts=np.array(seen["texts"]),
                     groups=np.array(seen["groups"]), scores=seen["scores"],
                     probs=seen["probs"])
        pool_emb = embedder.encode(seen["texts"])
        line = []
        for rule in RULES:
            pairs = chosen(seen, rule, args.n_output, seed)
            rows = [i for i, _ in pairs]
            table = TextTable([seen["texts"][i] for i in rows],
                              [seen["groups"][g] for _, g in pairs], rule)
            metrics = evaluate_embedded(table, pool_emb[rows], test, test_emb,
                                        config=EvalConfig(seed=seed, mauve=False)).metrics
            scored = metrics["utility"]["classification"]
            results[rule].append(scored["accuracy"])
            line.append(f"{rule} {scored['accuracy']:.3f} (macro-F1 {scored['macro_f1']:.3f})")
        print(f"seed {seed} ({len(seen['texts'])} candidates, "
              f"{time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.1f}): "
              + ", ".join(line), flush=True)
    for rule, got in results.items():
        print(f"{rule}: {np.mean(got):.3f} ± {np.std(got, ddof=1) if len(got) > 1 else 0:.3f}")


if __name__ == "__main__":
    main()
