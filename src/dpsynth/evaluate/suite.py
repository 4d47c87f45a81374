"""`evaluate`: every metric of a synthetic set against real data, in one call.

Utility and fidelity compare the synthetic set with the real *test* split. The privacy
diagnostics need the real *train* split (the private data the synthetic set came from) and
are only computed when it is given; they are marked private-only everywhere they appear.

Both real splits are real people's data, so both are kept out of every store:
`encode_uncached` (batched, never cached; no vote depends on these vectors, so the exact but
slower `encode_private` is not needed) and no remote embedder without
`allow_remote_on_private`. Only synthetic text goes through `encode`, and so into an embedding
cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from sklearn.decomposition import PCA

from dpsynth import __version__
from dpsynth.backends.base import Embedder
from dpsynth.backends.config import EmbedderChoice, MiniLMConfig
from dpsynth.errors import InputError
from dpsynth.evaluate import distributions, fidelity, privacy
from dpsynth.evaluate.distributions import word_lengths
from dpsynth.evaluate.downstream import (
    downstream_classification,
    fit_classifier,
    true_label_probability,
)
from dpsynth.evaluate.finetune import FinetuneConfig, finetune_classification
from dpsynth.evaluate.next_token import NextTokenConfig, next_token_accuracy
from dpsynth.evaluate.result import EvalResult
from dpsynth.evaluate.tables import TextTable, read_text_table

log = logging.getLogger(__name__)


class EvalConfig(BaseModel):
    """What `evaluate` computes and with which models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    embedder: EmbedderChoice = MiniLMConfig()
    text_column: str = "text"
    label_column: str | None = "label"
    seed: int = 0
    classifier: Literal["logistic", "finetune"] = Field(
        "logistic", description="logistic regression on embeddings, or fine-tuning an encoder")
    finetune: FinetuneConfig = FinetuneConfig()
    max_samples: int = Field(2000, ge=10, description="rows per set for the quadratic metrics")
    knn_k: int = Field(3, ge=1)
    mauve: bool = True
    next_token: NextTokenConfig | None = Field(
        NextTokenConfig(), description="None skips the next-token metric")
    near_duplicate_threshold: float = Field(0.95, gt=0, le=1)
    attack_records: int = Field(1000, ge=10, description="members (and non-members) attacked")
    map_points: int = Field(500, ge=10, description="points per set on the 2-D embedding map")
    public_test: bool = Field(
        False, description="the real test split is public data (a published benchmark "
        "split), so metrics on it may go into a public report; it is embedded as private data "
        "all the same")


def _refuse_disjoint_labels(synth: TextTable, test: TextTable) -> None:
    """A synthetic set none of whose labels occurs in the real test split (names on one side,
    codes on the other) would score 0 and say nothing: stop before embedding. Only the
    synthetic labels are named; the test split's are private."""
    if synth.labels is None or test.labels is None or set(synth.labels) & set(test.labels):
        return
    shown = sorted(set(synth.labels))
    raise InputError(f"{synth.source}: none of its labels ({', '.join(shown[:10])}"
                     f"{', ...' if len(shown) > 10 else ''}) is a label of {test.source}; "
                     "label both files the same way (the same names, or the same codes)")


def evaluate(synthetic: str | Path | TextTable, real_test: str | Path | TextTable,
             real_train: str | Path | TextTable | None = None,
             config: EvalConfig | None = None, embedder: Embedder | None = None,
             output: str | Path | None = None) -> EvalResult:
    """Read, embed and measure; with `output`, write metrics.json and figures.json there."""
    config = config or EvalConfig()
    tables = [_synthetic_table(synthetic, config),
              *(_table(t, config) if t is not None else None for t in (real_test, real_train))]
    synth, test, train = tables
    _refuse_disjoint_labels(synth, test)
    if embedder is None:
        from dpsynth.backends.factory import build_embedder

        embedder = build_embedder(config.embedder)
    if embedder.is_remote:
        if not config.embedder.allow_remote_on_private:
            raise InputError("refusing to send the real test and train splits (private data) "
                             "to a remote embedder; use a local one or set "
                             "embedder.allow_remote_on_private")
        log.warning("real texts are being sent to a remote embedder (explicit opt-in)")
    started = time.perf_counter()
    embeddings = [embedder.encode(synth.texts),
                  *(embedder.encode_uncached(t.texts) if t is not None else None
                    for t in (test, train))]
    log.info("embedded %s records in %.1fs", "/".join(str(len(t)) for t in tables if t),
             time.perf_counter() - started)
    result = evaluate_embedded(synth, embeddings[0], test, embeddings[1], train, embeddings[2],
                               config)
    result.metrics["meta"]["embedder"] = config.embedder.model_dump(mode="json")
    if output is not None:
        path = result.write(output)
        log.info("wrote %s", path)
    return result


def evaluate_embedded(synth: TextTable, synth_emb: np.ndarray, test: TextTable,
                      test_emb: np.ndarray, train: TextTable | None = None,
                      train_emb: np.ndarray | None = None,
                      config: EvalConfig | None = None) -> EvalResult:
    """The metrics from tables whose embeddings are already computed (benchmarks reuse the
    real splits' embeddings across many synthetic sets)."""
    config = config or EvalConfig()
    timings: dict[str, float] = {}
    metrics: dict = {
        "meta": {"dpsynth_version": __version__, "seed": config.seed,
                 "synthetic": _describe(synth),
                 "real_test": _describe(test) | {"private": not config.public_test},
                 "real_train": (_describe(train) | {"private": True}
                                if train is not None else None),
                 "seconds": timings},
        "utility": {},
        "fidelity": {},
    }
    with _timer(timings, "classification"):
        metrics["utility"]["classification"] = _classification(synth, synth_emb, test,
                                                                test_emb, config)
    if config.next_token is not None:
        with _timer(timings, "next_token"):
            metrics["utility"]["next_token"] = next_token_accuracy(
                synth.texts, test.texts, config.next_token, config.seed)
    with _timer(timings, "fidelity"):
        metrics["fidelity"] = _fidelity(synth, synth_emb, test, test_emb, config)
    if train is not None and train_emb is not None:
        reference = _real_train_reference(train, train_emb, test, test_emb, config)
        if reference is not None:
            metrics["reference"] = reference
        with _timer(timings, "privacy"):
            metrics["privacy"] = _privacy(synth, synth_emb, test, test_emb, train, train_emb,
                                          config)
    return EvalResult(metrics, _figures(synth, synth_emb, test, test_emb, config))


def _classification(synth: TextTable, synth_emb: np.ndarray, test: TextTable,
                    test_emb: np.ndarray, config: EvalConfig) -> dict:
    if synth.labels is None or test.labels is None:
        return {"skipped": "needs labels on the synthetic and the real test set"}
    if config.classifier == "finetune":
        scores = finetune_classification(synth.texts, synth.labels, test.texts, test.labels,
                                         config.finetune, config.seed)
    else:
        scores = downstream_classification(synth_emb, synth.labels, test_emb, test.labels,
                                           config.seed)
    return {"model": config.classifier, **scores.to_dict(),
            **_majority(test.labels)}


def _majority(labels: list[str]) -> dict:
    """The accuracy of always answering the real test split's most common label: the floor a
    classifier trained on synthetic data must clear to be worth anything."""
    values, counts = np.unique(np.asarray(labels, dtype=object), return_counts=True)
    return {"majority_class": str(values[counts.argmax()]),
            "majority_class_rate": float(counts.max() / counts.sum())}


def _real_train_reference(train: TextTable, train_emb: np.ndarray, test: TextTable,
                          test_emb: np.ndarray, config: EvalConfig) -> dict | None:
    """The same linear classifier trained on the real train split (the private data) and
    tested on the real test split: the ceiling synthetic data is measured against. Computed
    from private records, so private-only, like the privacy diagnostics."""
    if train.labels is None or test.labels is None:
        return None
    scores = downstream_classification(train_emb, train.labels, test_emb, test.labels,
                                       config.seed)
    return {"notice": privacy.PRIVATE_NOTICE,
            "real_train_classification": {"model": "logistic", "accuracy": scores.accuracy,
                                          "macro_f1": scores.macro_f1,
                                          "n_train": scores.n_train}}


def _fidelity(synth: TextTable, synth_emb: np.ndarray, test: TextTable, test_emb: np.ndarray,
              config: EvalConfig) -> dict:
    """Each metric, or a `skipped: why` string where a set is too small for it."""
    n, seed, r, s = config.max_samples, config.seed, test_emb, synth_emb
    metrics: dict[str, Callable[[], object]] = {
        "frechet_distance": lambda: fidelity.frechet_distance(r, s),
        "knn_precision_recall": lambda: fidelity.knn_precision_recall(r, s, config.knn_k, n,
                                                                      seed),
        "wasserstein_distance": lambda: fidelity.wasserstein_distance(r, s, n, seed),
        "self_similarity": lambda: {"synthetic": fidelity.self_similarity(s, n, seed),
                                    "real_test": fidelity.self_similarity(r, n, seed)},
        "length": lambda: distributions.length_distances(test.texts, synth.texts),
    }
    if config.mauve:
        metrics["mauve"] = lambda: fidelity.mauve_score(r, s, n, seed)
    if synth.labels is not None and test.labels is not None:
        metrics["labels"] = lambda: distributions.label_distances(test.labels, synth.labels)
    out: dict = {}
    for name, compute in metrics.items():
        try:
            value = compute()
        except InputError as exc:
            value = f"skipped: {exc}"
        if name == "knn_precision_recall":
            both = value if isinstance(value, tuple) else (value, value)
            out["knn_precision"], out["knn_recall"] = both
        else:
            out[name] = value
    return out


def _privacy(synth: TextTable, synth_emb: np.ndarray, test: TextTable, test_emb: np.ndarray,
             train: TextTable, train_emb: np.ndarray, config: EvalConfig) -> dict:
    """Private-only diagnostics; returns numbers and synthetic row indices, never text."""
    to_private = privacy.nearest_similarity(synth_emb, train_emb)
    baseline = privacy.nearest_similarity(test_emb, train_emb)
    members, nonmembers = privacy.balanced_indices(len(train), len(test),
                                                   config.attack_records, config.seed)
    distance_auc = privacy.membership_auc(
        privacy.nearest_similarity(train_emb[members], synth_emb),
        privacy.nearest_similarity(test_emb[nonmembers], synth_emb))
    attack = {"n_per_side": len(members), "distance_attack_auc": distance_auc}
    if synth.labels is not None and train.labels is not None and test.labels is not None:
        model = fit_classifier(synth_emb, synth.labels, config.seed)
        attack["loss_attack_auc"] = privacy.membership_auc(
            true_label_probability(model, train_emb[members],
                                   [train.labels[i] for i in members]),
            true_label_probability(model, test_emb[nonmembers],
                                   [test.labels[i] for i in nonmembers]))
    out = {
        "notice": privacy.PRIVATE_NOTICE,
        "nearest_private_similarity": {
            "synthetic": privacy.similarity_histogram(to_private),
            "real_test_baseline": privacy.similarity_histogram(baseline),
        },
        "copies": privacy.copies_of_private(synth.texts, train.texts, to_private,
                                            config.near_duplicate_threshold),
        "membership_inference": attack,
    }
    log.info("privacy diagnostics (private only): %d exact and %d near copies, "
             "distance-attack AUC %.3f", out["copies"]["exact"], out["copies"]["near"],
             distance_auc)
    return out


def _figures(synth: TextTable, synth_emb: np.ndarray, test: TextTable, test_emb: np.ndarray,
             config: EvalConfig) -> dict:
    """Plot data for the report: word lengths and a PCA map fitted on both sets."""
    n, seed = config.map_points, config.seed
    a, b = fidelity.subsample(test_emb, n, seed), fidelity.subsample(synth_emb, n, seed + 1)
    pca = PCA(n_components=2, random_state=seed).fit(np.vstack([a, b]))
    limit = config.max_samples
    figures: dict = {
        "lengths": {"real_test": word_lengths(test.texts)[:limit].tolist(),
                    "synthetic": word_lengths(synth.texts)[:limit].tolist()},
        "embedding_map": {"real_test": np.round(pca.transform(a), 4).tolist(),
                          "synthetic": np.round(pca.transform(b), 4).tolist(),
                          "explained_variance": pca.explained_variance_ratio_.tolist()},
    }
    if synth.labels is not None and test.labels is not None:
        figures["labels"] = distributions.label_distances(test.labels, synth.labels)
    return figures


def _table(source: str | Path | TextTable, config: EvalConfig) -> TextTable:
    if isinstance(source, TextTable):
        return source
    return read_text_table(source, config.text_column, config.label_column)


def _synthetic_table(source: str | Path | TextTable, config: EvalConfig) -> TextTable:
    """The synthetic set; `dpsynth run` writes it with `text` and `label` columns whatever the
    private data's were called, so those are read where the configured ones are missing."""
    if isinstance(source, TextTable):
        return source
    from dpsynth.data import read_table

    columns = set(read_table(Path(source)).columns)
    text, label = config.text_column, config.label_column
    if text not in columns and "text" in columns:
        text = "text"
    if label is not None and label not in columns and "label" in columns:
        label = "label"
    if (text, label) != (config.text_column, config.label_column):
        log.info("%s: reading its columns '%s' and '%s', as dpsynth run writes them", source,
                 text, label)
    return read_text_table(source, text, label)


def _describe(table: TextTable) -> dict:
    return {"source": table.source, "records": len(table),
            "labels": sorted(set(table.labels)) if table.labels is not None else None}


@contextmanager
def _timer(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 3)
