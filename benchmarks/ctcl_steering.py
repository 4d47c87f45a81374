"""Does a DP-fine-tuned CTCL generator follow its conditions? Topic and label steering of a
kept `ctcl` run (benchmarks/utility.py --keep-runs), beside the shipped LM.

    python benchmarks/ctcl_steering.py RUN_DIR [RUN_DIR ...] --data ../shared/data/ag_news
        [--topics 8] [--per-topic 12] [--classifier-train 1000] [--samples 2] [--seed 0]

- label steering: a logistic classifier on MiniLM embeddings of `--classifier-train` real
  train records predicts the label of each text of the run's synthetic.csv; the rate at
  which it agrees with the label the text was conditioned on, beside the same classifier's
  accuracy on real test records and the rate a label-blind generator would get (1/labels);
- topic steering: for the `--topics` public topics most common among the real train records,
  `--per-topic` texts from each topic's keywords alone (no label), by the run's trained model
  and by the shipped LM; the rate at which a text's nearest topic (the topic model CTCL
  conditions on) is the topic it was asked for, beside chance (1/topics probed is an upper
  bound on it). `--samples` texts per topic are printed for the docs.

Public conditions only go to the generators; the real records are benchmark data.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dpsynth.backends import Condition, build_embedder
from dpsynth.backends.config import EmbedderConfig
from dpsynth.backends.offline.generator import OfflineGenerator
from dpsynth.evaluate import read_text_table
from dpsynth.ops.topics import TopicModel

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--per-topic", type=int, default=12)
    parser.add_argument("--classifier-train", type=int, default=1000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from sklearn.linear_model import LogisticRegression

    embedder = build_embedder(EmbedderConfig(name="minilm"))
    rng = np.random.default_rng(args.seed)
    train = read_text_table(args.data / "train.csv", require_labels=True)
    test = read_text_table(args.data / "test.csv", require_labels=True)
    tr = rng.choice(len(train), size=min(args.classifier_train, len(train)), replace=False)
    te = rng.choice(len(test), size=min(args.test, len(test)), replace=False)
    train_emb = embedder.encode([train.texts[i] for i in tr])
    classifier = LogisticRegression(max_iter=2000, random_state=args.seed).fit(
        train_emb, [train.labels[i] for i in tr])
    test_acc = classifier.score(embedder.encode([test.texts[i] for i in te]),
                               [test.labels[i] for i in te])
    topics = TopicModel.load(ROOT / "src/dpsynth/assets/topics")
    common = np.bincount(topics.assign(train_emb), minlength=topics.n_topics)
    probe = [int(t) for t in np.argsort(-common)[: args.topics]]
    labels = sorted(set(train.labels))
    print(f"classifier: {len(tr)} real train records, accuracy {test_acc:.3f} on {len(te)} "
          f"real test records; label-blind rate {1 / len(labels):.3f}")
    print(f"topics probed (most common in real train): {probe}\n")

    rows = [("shipped LM (no fine-tuning)", None)] + [(str(run), run) for run in args.runs]
    results = []
    for name, run in rows:
        row = {"generator": name}
        if run is not None:
            synthetic = read_text_table(run / "synthetic.csv", require_labels=True)
            predicted = classifier.predict(embedder.encode(synthetic.texts))
            row["label_agreement"] = float(np.mean(predicted == np.array(synthetic.labels)))
            row["n_synthetic"] = len(synthetic)
            model = run / "checkpoints" / "model"
        else:
            model = None
        generator = OfflineGenerator(model, seed=args.seed)
        conditions = [Condition(keywords=tuple(topics.keywords[t])) for t in probe
                      for _ in range(args.per_topic)]
        texts = generator.generate(conditions)
        asked = np.repeat(probe, args.per_topic)
        got = topics.assign(embedder.encode([t if t.strip() else "." for t in texts]))
        row["topic_hit_rate"] = float(np.mean(got == asked))
        row["topic_hit_rate_in_probed"] = float(np.mean(np.isin(got, probe)))
        results.append(row)
        print(f"## {name}")
        print(json.dumps(row))
        for k, t in enumerate(probe):
            print(f"- topic {t} ({', '.join(topics.keywords[t][:6])}):")
            for text in texts[k * args.per_topic: k * args.per_topic + args.samples]:
                print(f"    {text[:300]!r}")
        print()
    print(f"chance topic hit rate: about {1 / args.topics:.3f} among the probed topics, "
          f"{1 / topics.n_topics:.3f} over all {topics.n_topics}")


if __name__ == "__main__":
    main()
