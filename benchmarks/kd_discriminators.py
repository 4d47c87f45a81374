"""How well KD-Tutor's discriminators tell private from public text (kd-tutor §3.4, Fig. 4).

    python benchmarks/kd_discriminators.py ag_news [--epsilons 1,4] [--teachers 15]
        [--n-private 4000] [--n-heldout 400] [--n-negatives 500] [--n-queries 500]
        [--seeds 0,1,2] [--cache gen.sqlite]

The same pieces as the recipe (private/engine/teachers.py, private/releases/pate.py and the
recipe's own budget plan), measured on data the recipe never shows them: real records of the
train split held out of the private part (label 1) against public candidates the generator
wrote but no model trained on (label 0). Prints, per seed: each teacher's accuracy (mean ±
std over teachers), the clean teacher ensemble's (majority of hard votes, no noise); per ε
and per vote (hard, soft; the same teachers, candidates and noise seed), the student's
accuracy and ROC AUC (the rank the recipe selects by), trained on the noisy votes of as many
queries as the budget allowed, with that number of queries; then each figure's mean ± std
over the seeds. A seed draws the private part, the generator's texts and the noise.
"""

from __future__ import annotations

import argparse
import secrets
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from dpsynth.backends import Condition, build_embedder, build_generator
from dpsynth.backends.config import MiniLMConfig, parse_generator
from dpsynth.data import PrivateDataset
from dpsynth.evaluate import read_text_table
from dpsynth.methods.kd_tutor import KdTutor, KdTutorParams
from dpsynth.privacy.config import default_delta
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource
from dpsynth.privacy.stages import STUDENT_QUERIES
from dpsynth.private.engine.teachers import (
    Teachers,
    partition_units,
    teacher_votes,
    train_classifier,
    train_on_shares,
)
from dpsynth.private.releases.pate import label_within_budget

ROOT = Path(__file__).resolve().parents[1]
VOTES = ("hard", "soft")


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    train = read_text_table(Path(args.data_root) / args.dataset / "train.csv",
                            require_labels=True)
    embedder = build_embedder(MiniLMConfig())
    scores: dict[tuple[float, str], list[tuple[float, float]]] = defaultdict(list)
    for seed in args.seeds:
        print(f"-- seed {seed}")
        for key, score in measure(args, train, embedder, seed).items():
            scores[key].append(score)
    print(f"-- over seeds {','.join(map(str, args.seeds))}: student accuracy, AUC (mean ± std)")
    for (eps, votes), got in scores.items():
        acc, auc = np.array(got).T
        print(f"ε={eps:g} {votes}: accuracy {acc.mean():.3f} ± {acc.std():.3f}, "
              f"AUC {auc.mean():.3f} ± {auc.std():.3f}")


def measure(args: argparse.Namespace, train, embedder, seed: int
            ) -> dict[tuple[float, str], tuple[float, float]]:
    """One seed's teachers, and per ε and vote the student's (accuracy, AUC)."""
    order = np.random.default_rng(seed).permutation(len(train))
    texts = list(dict.fromkeys(train.texts[i] for i in order))  # distinct, as the recipe
    private_texts = texts[: args.n_private]
    heldout_private = texts[args.n_private: args.n_private + args.n_heldout]
    labels = sorted(set(train.labels))

    generator = build_generator(parse_generator({"name": args.generator, "seed": seed,
                                                 "cache": args.cache}))
    n_public = args.n_negatives + args.n_queries + args.n_heldout
    public = [t for t in generator.generate(
        [Condition(label=labels[i % len(labels)]) for i in range(n_public)]) if t.strip()]
    negatives, rest = public[: args.n_negatives], public[args.n_negatives:]
    queries, heldout_public = rest[: args.n_queries], rest[args.n_queries:]

    emb = {name: embedder.encode(t) for name, t in (
        ("private", private_texts), ("negatives", negatives), ("queries", queries),
        ("heldout_private", heldout_private), ("heldout_public", heldout_public))}
    test_x = np.vstack([emb["heldout_private"], emb["heldout_public"]])
    test_y = np.r_[np.ones(len(heldout_private)), np.zeros(len(heldout_public))]

    parts = partition_units(private_texts, args.teachers, secrets.token_bytes(16))
    negatives_y = np.zeros(len(negatives), dtype=np.int64)
    teachers = [train_classifier(np.vstack([emb["private"][parts == m], emb["negatives"]]),
                                 np.r_[np.ones((parts == m).sum(), np.int64), negatives_y], m)
                for m in range(args.teachers) if (parts == m).any()]
    single = [float(np.mean(t.predict(test_x) == test_y)) for t in teachers]
    ensemble = np.argmax(teacher_votes(teachers, test_x), axis=1)
    print(f"{args.dataset}: {len(private_texts)} private records in {len(teachers)} "
          f"partitions, {len(negatives)} public negatives; test: {len(heldout_private)} "
          f"held-out private vs {len(heldout_public)} unseen public candidates")
    print(f"teacher accuracy {np.mean(single):.3f} ± {np.std(single):.3f} "
          f"(min {min(single):.3f}, max {max(single):.3f})")
    print(f"clean ensemble (majority vote) accuracy {np.mean(ensemble == test_y):.3f}")

    private = PrivateDataset(private_texts)
    out = {}
    for eps in args.epsilons:
        for votes in VOTES:
            soft_key = np.random.default_rng([seed, 2]).bytes(16) if votes == "soft" else None
            recipe = KdTutor(KdTutorParams(n_queries=len(queries), teachers=args.teachers,
                                           label_mode="none", votes=votes))
            plan = recipe.budget_plan(private, eps, default_delta(len(private_texts)))
            ledger = PrivacyLedger(eps, plan.delta)
            shares = label_within_budget(Teachers(teachers), emb["queries"],
                                         plan.stage(STUDENT_QUERIES).mechanism, 100, ledger,
                                         NoiseSource(seed), STUDENT_QUERIES, soft_key=soft_key)
            clean = teacher_votes(teachers, emb["queries"][: len(shares)], soft_key=soft_key)
            line = (f"ε={eps:g} {votes}: {len(shares)} student queries (σ "
                    f"{plan.stage(STUDENT_QUERIES).noise_scale:.2f}, noisy label = clean "
                    f"{np.mean(shares.argmax(axis=1) == clean.argmax(axis=1)):.3f}, mean "
                    f"private share {shares[:, 1].mean():.3f}, ε spent {ledger.spent():.3f})")
            if np.count_nonzero(shares.sum(axis=0)) < 2:
                out[eps, votes] = (float(np.mean(test_y == shares.argmax(axis=1)[0])), 0.5)
                print(f"{line}: the noisy labels are all one class, no student (accuracy "
                      f"{out[eps, votes][0]:.3f}, AUC 0.5)")
                continue
            student = train_on_shares(emb["queries"][: len(shares)], shares, seed)
            private_proba = student.predict_proba(test_x)[:, 1]
            out[eps, votes] = (float(np.mean((private_proba > 0.5) == test_y)),
                               float(roc_auc_score(test_y, private_proba)))
            print(f"{line}; student accuracy {out[eps, votes][0]:.3f}, "
                  f"AUC {out[eps, votes][1]:.3f}")
    return out


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--epsilons", default="1,4",
                        type=lambda s: [float(x) for x in s.split(",")])
    parser.add_argument("--teachers", type=int, default=15)
    parser.add_argument("--n-private", type=int, default=4000)
    parser.add_argument("--n-heldout", type=int, default=400)
    parser.add_argument("--n-negatives", type=int, default=500)
    parser.add_argument("--n-queries", type=int, default=500)
    parser.add_argument("--generator", default="offline")
    parser.add_argument("--seeds", default="0", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--cache", default=None,
                        help="SQLite file caching the generator's texts (public)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
