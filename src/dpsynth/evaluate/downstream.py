"""Downstream classification: train on synthetic, test on real.

The default model is a logistic regression on sentence embeddings: cheap, deterministic, and
sensitive to the label–content association the synthetic data must carry. The seeds fine-tune
RoBERTa instead; `dpsynth.evaluate.finetune` does that with a small local encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score, recall_score

from dpsynth.errors import InputError


class ConstantClassifier:
    """What a classifier trained on a single class can do: always answer that class."""

    def __init__(self, label: str) -> None:
        self.classes_ = np.array([label])

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.full(len(x), self.classes_[0], dtype=object)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.ones((len(x), 1))


@dataclass(frozen=True)
class ClassificationScores:
    accuracy: float
    macro_f1: float
    per_class_recall: dict[str, float]
    n_train: int
    n_test: int
    classes_missing_from_train: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1,
                "per_class_recall": self.per_class_recall, "n_train": self.n_train,
                "n_test": self.n_test,
                "classes_missing_from_train": list(self.classes_missing_from_train)}


def fit_classifier(x: np.ndarray, y: Sequence[str], seed: int = 0,
                   c: float = 1.0) -> LogisticRegression | ConstantClassifier:
    """A multinomial logistic regression on embeddings (or a constant for one class)."""
    if len(x) != len(y):
        raise InputError(f"fit_classifier: {len(x)} embeddings but {len(y)} labels")
    classes = sorted(set(y))
    if not classes:
        raise InputError("fit_classifier: no training examples")
    if len(classes) == 1:
        return ConstantClassifier(classes[0])
    model = LogisticRegression(C=c, max_iter=2000, random_state=seed)
    return model.fit(x, np.asarray(y, dtype=object))


def score_classifier(model: LogisticRegression | ConstantClassifier, x: np.ndarray,
                     y: Sequence[str], n_train: int) -> ClassificationScores:
    """Accuracy, macro-F1 and per-class recall of `model` over the classes of the test set."""
    return scores_from_predictions(y, model.predict(x), model.classes_, n_train)


def scores_from_predictions(y: Sequence[str], predicted: Sequence[str],
                            train_classes: Sequence[str], n_train: int) -> ClassificationScores:
    """The scores of predictions against the true labels, over the test set's classes."""
    y_true = np.asarray(y, dtype=object)
    y_pred = np.asarray(predicted, dtype=object)
    classes = sorted(set(y))
    recalls = recall_score(y_true, y_pred, labels=classes, average=None, zero_division=0)
    return ClassificationScores(
        accuracy=float(accuracy_score(y_true, y_pred)),
        macro_f1=float(f1_score(y_true, y_pred, labels=classes, average="macro",
                                zero_division=0)),
        per_class_recall={c: float(r) for c, r in zip(classes, recalls, strict=True)},
        n_train=n_train,
        n_test=len(y_true),
        classes_missing_from_train=tuple(c for c in classes if c not in set(train_classes)),
    )


def downstream_classification(train_x: np.ndarray, train_y: Sequence[str], test_x: np.ndarray,
                              test_y: Sequence[str], seed: int = 0) -> ClassificationScores:
    """Train on (synthetic) `train_*`, score on (real) `test_*`."""
    model = fit_classifier(train_x, train_y, seed)
    return score_classifier(model, test_x, test_y, n_train=len(train_y))


def true_label_probability(model: LogisticRegression | ConstantClassifier, x: np.ndarray,
                           y: Sequence[str]) -> np.ndarray:
    """The probability the model gives each example's true label (0 for an unseen class):
    the membership-inference score of a loss attack."""
    proba = model.predict_proba(x)
    column = {c: i for i, c in enumerate(model.classes_)}
    out = np.zeros(len(y))
    for row, label in enumerate(y):
        if label in column:
            out[row] = proba[row, column[label]]
    return out
