"""Keywords of groups of public text by class-based TF-IDF: terms frequent in one group and
rare in the others. Used on public or synthetic text only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer


def class_keywords(groups: Mapping[str, Sequence[str]], k: int) -> dict[str, list[str]]:
    """Top `k` c-TF-IDF terms per group (BERTopic's weighting: tf · log(1 + A / f_term))."""
    names = list(groups)
    docs = [" ".join(groups[name]) for name in names]
    if not any(d.strip() for d in docs):
        return {name: [] for name in names}
    vectorizer = CountVectorizer(stop_words="english", token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b",
                                 lowercase=True)
    counts = vectorizer.fit_transform(docs).toarray().astype(np.float64)
    terms = vectorizer.get_feature_names_out()
    tf = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    average_words = counts.sum() / len(docs)
    idf = np.log(1.0 + average_words / np.maximum(counts.sum(axis=0), 1.0))
    scores = tf * idf
    out = {}
    for row, name in enumerate(names):
        top = [i for i in np.argsort(-scores[row], kind="stable")[:k] if scores[row, i] > 0]
        out[name] = [str(terms[i]) for i in top]
    return out
