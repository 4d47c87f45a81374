"""How well KD-Tutor's discriminators tell private from public text (kd-tutor §3.4, Fig. 4).

    python benchmarks/kd_discriminators.py ag_news [--epsilons 1,4] [--teachers 15]
        [--n-private 4000] [--n-heldout 400] [--n-negatives 500] [--n-queries 500]

The same pieces as the recipe (ops/pate.py and the recipe's own budget plan), measured on
data the recipe never shows them: real records of the train split held out of the private
part (label 1) against public candidates the generator wrote but no model trained on
(label 0). Prints, per ε: each teacher's accuracy (mean ± std over teachers), the clean
teacher ensemble's (majority of hard votes, no noise), and the student's (trained on the
noisy votes of as many queries as the budget allowed), with that number of queries.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

import numpy as np

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
)
from dpsynth.private.releases.pate import label_within_budget

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    train = read_text_table(Path(args.data_root) / args.dataset / "train.csv",
                            require_labels=True)
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(train))
    texts = list(dict.fromkeys(train.texts[i] for i in order))  # distinct, as the recipe
    private_texts = texts[: args.n_private]
    heldout_private = texts[args.n_private: args.n_private + args.n_heldout]
    labels = sorted(set(train.labels))

    generator = build_generator(parse_generator({"name": args.generator, "seed": args.seed}))
    n_public = args.n_negatives + args.n_queries + args.n_heldout
    public = [t for t in generator.generate(
        [Condition(label=labels[i % len(labels)]) for i in range(n_public)]) if t.strip()]
    negatives, rest = public[: args.n_negatives], public[args.n_negatives:]
    queries, heldout_public = rest[: args.n_queries], rest[args.n_queries:]

    embedder = build_embedder(MiniLMConfig())
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
    for eps in args.epsilons:
        delta = default_delta(len(private_texts))
        recipe = KdTutor(KdTutorParams(n_queries=len(queries), teachers=args.teachers,
                                       label_mode="none"))
        plan = recipe.budget_plan(private, eps, delta)
        ledger = PrivacyLedger(eps, delta)
        votes = label_within_budget(Teachers(teachers), emb["queries"],
                                    plan.stage(STUDENT_QUERIES).mechanism, 100, ledger,
                                    NoiseSource(), STUDENT_QUERIES)
        clean = np.argmax(teacher_votes(teachers, emb["queries"][: len(votes)]), axis=1)
        line = (f"ε={eps:g}: {len(votes)} student queries (σ "
                f"{plan.stage('student_queries').noise_scale:.2f}, noisy label = clean "
                f"{np.mean(votes == clean):.3f}, ε spent {ledger.spent():.3f})")
        if len(np.unique(votes)) < 2:
            print(line + ": the noisy labels are all one class, no student", file=sys.stdout)
            continue
        student = train_classifier(emb["queries"][: len(votes)], votes, args.seed)
        print(f"{line}; student accuracy {np.mean(student.predict(test_x) == test_y):.3f}")


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
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main()
