"""In-context learning (embedding-eda §4.4): classify real test texts with k synthetic
demonstrations in the prompt, through any generator that can score continuations.

Each repeat draws k demonstrations spread evenly over the labels (the seed uses 6), builds

    Text: <demo>\\nLabel: <label>\\n\\n ... Text: <test text>\\nLabel:

and predicts the label whose name has the highest summed log-probability as the
continuation. Repeats with different demonstrations give the mean and spread the seed
reports; zero-shot (no demonstrations) is the ε = 0 baseline. The real test texts go into
the prompts, so with a remote backend they leave the machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsynth.backends.base import Generator
from dpsynth.errors import InputError
from dpsynth.evaluate.downstream import scores_from_predictions


class IclConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shots: int = Field(6, ge=1, description="demonstrations per prompt")
    repeats: int = Field(3, ge=1, description="demonstration draws to average over")
    max_test: int = Field(200, ge=1, description="real test texts classified per repeat")
    max_words: int = Field(60, ge=1, description="each text cut to this many words")
    seed: int = 0


def pick_demonstrations(labels: Sequence[str], shots: int,
                        rng: np.random.Generator) -> list[int]:
    """`shots` indices spread as evenly as possible over the labels present (labels in a
    random order get the remainder), shuffled."""
    by_label: dict[str, list[int]] = {}
    for i, y in enumerate(labels):
        by_label.setdefault(y, []).append(i)
    order = list(by_label)
    rng.shuffle(order)
    picked: list[int] = []
    for j, label in enumerate(order):
        want = shots // len(order) + (1 if j < shots % len(order) else 0)
        pool = by_label[label]
        picked += rng.choice(pool, size=min(want, len(pool)), replace=False).tolist()
    rng.shuffle(picked)
    return picked


def icl_prompt(demos: Sequence[tuple[str, str]], text: str, max_words: int) -> str:
    def cut(t: str) -> str:
        return " ".join(t.split()[:max_words])

    shown = "".join(f"Text: {cut(x)}\nLabel: {y}\n\n" for x, y in demos)
    return f"{shown}Text: {cut(text)}\nLabel:"


def classify(generator: Generator, demos: Sequence[tuple[str, str]], texts: Sequence[str],
             classes: Sequence[str], max_words: int) -> list[str]:
    """The highest-scoring label name for each text."""
    prompts = [icl_prompt(demos, t, max_words) for t in texts]
    flat_prompts = [p for p in prompts for _ in classes]
    flat_labels = [c for _ in prompts for c in classes]
    scores = np.asarray(generator.score(flat_prompts, flat_labels)).reshape(len(texts),
                                                                              len(classes))
    return [classes[i] for i in scores.argmax(1)]


def icl_accuracy(generator: Generator, synth_texts: Sequence[str], synth_labels: Sequence[str],
                 test_texts: Sequence[str], test_labels: Sequence[str],
                 config: IclConfig | None = None) -> dict[str, object]:
    """Accuracy of k-shot classification with synthetic demonstrations, per repeat and on
    average, beside zero-shot."""
    config = config or IclConfig()
    if len(synth_texts) != len(synth_labels) or len(test_texts) != len(test_labels):
        raise InputError(f"icl: texts and labels differ in length (synthetic "
                         f"{len(synth_texts)}/{len(synth_labels)}, test "
                         f"{len(test_texts)}/{len(test_labels)})")
    if not synth_texts or not test_texts:
        raise InputError("icl: needs synthetic demonstrations and test texts")
    rng = np.random.default_rng(config.seed)
    rows = rng.permutation(len(test_texts))[: config.max_test]
    texts = [test_texts[i] for i in rows]
    truth = [test_labels[i] for i in rows]
    classes = sorted(set(test_labels) | set(synth_labels))
    accuracies, macro_f1 = [], []
    for _ in range(config.repeats):
        demos = [(synth_texts[i], synth_labels[i])
                 for i in pick_demonstrations(synth_labels, config.shots, rng)]
        predicted = classify(generator, demos, texts, classes, config.max_words)
        scores = scores_from_predictions(truth, predicted, sorted(set(synth_labels)),
                                         config.shots)
        accuracies.append(scores.accuracy)
        macro_f1.append(scores.macro_f1)
    zero = scores_from_predictions(truth, classify(generator, [], texts, classes,
                                                   config.max_words), classes, 0)
    return {"shots": config.shots, "repeats": config.repeats, "n_test": len(texts),
            "accuracy_mean": float(np.mean(accuracies)),
            "accuracy_std": float(np.std(accuracies)), "accuracies": accuracies,
            "macro_f1_mean": float(np.mean(macro_f1)),
            "zero_shot_accuracy": zero.accuracy,
            "majority_class_share": float(max(truth.count(c) for c in set(truth))
                                          / len(truth))}
