"""Does a CTCL generator follow its conditions? Label and topic steering of the shipped LM and
of the models of kept `ctcl` runs (benchmarks/utility.py --keep-runs), under the ways CTCL can
draw its conditions.

    python benchmarks/ctcl_steering.py --data ../shared/data/ag_news [RUN_DIR ...]
        [--n 240] [--guidance 1,2,3,4] [--draws cells,independent] [--samples 2] [--seed 0]

For each generator, draw and guidance, `--n` texts are sampled from conditions drawn from the
real train records' (label, topic) counts (a benchmark: no DP here, the recipe draws from its
DP histogram):
- `cells`: label and topic drawn together, as ctcl does; `independent`: label and topic drawn
  apart from their marginals (what ctcl did before), `label`: the label alone (dpft);
- guidance g on the label and the topic keywords (the contrast prompt drops both; 1: plain
  sampling).
Printed per row:
- label agreement: a logistic classifier on MiniLM embeddings of 2,000 real train records
  predicts each text's label; the rate at which it is the asked label (label-blind: the
  majority-class rate at most);
- topic hit: the rate at which a text's nearest topic is the topic it was asked for;
- downstream accuracy: a classifier trained on the texts (labelled as asked), scored on 2,000
  other real train records (majority-class rate printed beside it).
For a run, its synthetic.csv's label agreement is printed too. `--samples` texts per row are
printed for the docs. Public conditions only go to the generators.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dpsynth.backends import Condition, build_embedder
from dpsynth.backends.config import MiniLMConfig
from dpsynth.backends.offline.generator import OfflineGenerator
from dpsynth.evaluate import read_text_table
from dpsynth.methods.parts.topics import TopicModel
from dpsynth.private.engine.nearest import nearest_indices

ROOT = Path(__file__).resolve().parents[1]


def draw(kind: str, joint: np.ndarray, n: int, rng) -> tuple[np.ndarray, np.ndarray | None]:
    """Label and topic indices of `n` conditions (topics None for `label`)."""
    if kind == "cells":
        return np.unravel_index(rng.choice(joint.size, size=n, p=joint.ravel()), joint.shape)
    labels = rng.choice(joint.shape[0], size=n, p=joint.sum(1))
    if kind == "label":
        return labels, None
    return labels, rng.choice(joint.shape[1], size=n, p=joint.sum(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--n", type=int, default=240)
    parser.add_argument("--guidance", default="1,2,3,4")
    parser.add_argument("--draws", default="cells,independent")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from sklearn.linear_model import LogisticRegression

    embedder = build_embedder(MiniLMConfig())
    train = read_text_table(args.data / "train.csv", require_labels=True)
    names = sorted(set(train.labels))
    labels = np.array(train.labels)
    perm = np.random.default_rng(args.seed).permutation(len(train))
    fit_rows, score_rows = perm[:2000], perm[-2000:]
    emb = embedder.encode(list(train.texts))
    judge = LogisticRegression(max_iter=2000).fit(emb[fit_rows], labels[fit_rows])
    topics = TopicModel.load(ROOT / "src/dpsynth/assets/topics")
    joint = np.zeros((len(names), topics.n_topics))
    np.add.at(joint, ([names.index(y) for y in labels], nearest_indices(emb, topics.centroids)), 1)
    joint /= joint.sum()
    majority = float(np.mean(labels[score_rows] == max(names, key=list(labels).count)))
    print(f"{args.data.name}: {len(train)} real train records, {len(names)} labels, "
          f"majority-class rate {majority:.3f}, judge accuracy "
          f"{judge.score(emb[score_rows], labels[score_rows]):.3f}\n")

    for run in [None, *args.runs]:
        name = "shipped LM" if run is None else str(run)
        if run is not None:
            synthetic = read_text_table(run / "synthetic.csv", require_labels=True)
            agree = np.mean(judge.predict(embedder.encode(synthetic.texts))
                            == np.array(synthetic.labels))
            print(f"## {name}: synthetic.csv label agreement {agree:.3f} "
                  f"(n = {len(synthetic)})")
        for kind in args.draws.split(","):
            for g in (float(x) for x in args.guidance.split(",")):
                rng = np.random.default_rng(args.seed)
                ys, ts = draw(kind, joint, args.n, rng)
                asked = np.array([names[y] for y in ys])
                conds = [Condition(label=str(y), keywords=() if ts is None else
                                   tuple(topics.keywords[t]))
                         for y, t in zip(asked, ys if ts is None else ts, strict=True)]
                generator = OfflineGenerator(run and run / "checkpoints" / "model",
                                             seed=args.seed, label_guidance=g,
                                             guide_keywords=True)
                texts = generator.generate(conds)
                got = embedder.encode([t if t.strip() else "." for t in texts])
                downstream = (LogisticRegression(max_iter=2000).fit(got, asked)
                              .score(emb[score_rows], labels[score_rows])
                              if len(set(asked)) > 1 else float("nan"))
                row = {"generator": name, "draw": kind, "guidance": g, "n": args.n,
                       "label_agreement": round(float(np.mean(judge.predict(got) == asked)), 3),
                       "topic_hit": None if ts is None else
                       round(float(np.mean(nearest_indices(got, topics.centroids) == ts)), 3),
                       "downstream_accuracy": round(float(downstream), 3)}
                print(json.dumps(row), flush=True)
                for text, y in list(zip(texts, asked, strict=True))[: args.samples]:
                    print(f"    {y}: {text[:200]!r}")
        print()


if __name__ == "__main__":
    main()
