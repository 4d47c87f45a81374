"""A DP estimate of the private set's self-similarity: dpga-textsyn's threshold τ.

The paper sets τ to "the noised mean" of the private self-similarity matrix and leaves the
release unaccounted. We release it with a stated sensitivity. Each unit is hashed, with a
secret per-run key, into one of B buckets; bucket b contributes the cosine similarity of its
two units with the smallest hashes. Adding or removing one unit touches only its own bucket,
whose value appears, disappears, or changes within [-1, 1]: so the centred sum moves by at most
2 and the count by at most 1 — an ε-DP noisy mean over values clipped to [-2, 2] covers it.
The hash depends on the unit's own text only, so no other unit's bucket moves. B is a public
parameter (the recipe's config): a B derived from the data's size, such as N // 4, would differ
between neighbours and re-hash every unit.
"""

from __future__ import annotations

import hashlib

import numpy as np

from dpsynth.data import Access, PrivateDataset
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import NoisyMean
from dpsynth.privacy.noise import NoiseSource


def bucket_pair_similarities(embeddings: np.ndarray, texts: list[str], n_buckets: int,
                             key: bytes, rows: np.ndarray | None = None) -> np.ndarray:
    """One cosine similarity per bucket holding at least two units. `texts[i]` is the text of
    embedding row `rows[i]` (row i without `rows`): only the paired rows are read, so an
    out-of-core array is never gathered whole."""
    digests = [int.from_bytes(hashlib.blake2b(t.encode("utf-8"), key=key,
                                              digest_size=8).digest(), "big") for t in texts]
    digests_arr = np.asarray(digests, dtype=np.uint64)
    buckets = digests_arr % np.uint64(n_buckets)
    order = np.lexsort((digests_arr, buckets))
    values = []
    for start in np.flatnonzero(np.r_[True, buckets[order][1:] != buckets[order][:-1]]):
        if start + 1 < len(order) and buckets[order[start]] == buckets[order[start + 1]]:
            a, b = order[start], order[start + 1]
            if rows is not None:
                a, b = rows[a], rows[b]
            # clipped: the sensitivity of 2 assumes cosines, whatever embedder is passed; the
            # coordinates too, in float64 (a unit vector's are in [-1, 1] already): two finite
            # but huge rows of an embedder that does not normalise overflowed float32 to NaN,
            # and the release, charged already, refused it
            x, y = (np.clip(np.asarray(embeddings[i], dtype=np.float64), -1.0, 1.0)
                    for i in (a, b))
            values.append(float(np.clip(x @ y, -1.0, 1.0)))
    return np.asarray(values, dtype=np.float64)


def dp_self_similarity(private: PrivateDataset, private_embeddings: np.ndarray,
                       mechanism: NoisyMean, n_buckets: int, ledger: PrivacyLedger,
                       noise: NoiseSource, stage: str) -> float:
    """DP mean pairwise cosine similarity of the private set (one record per unit used)."""
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
    texts = private.texts(Access.LEDGERED_OP)
    _, first = np.unique(private.unit_ids(), return_index=True)
    values = bucket_pair_similarities(private_embeddings, [texts[i] for i in first],
                                      n_buckets, noise.random_key(), rows=first)
    if mechanism.lower > -2.0 or mechanism.upper < 2.0:
        raise ValueError("the bucket-pair mean needs bounds covering [-2, 2]")
    return float(np.clip(ledger.release(stage, mechanism, values, noise), -1.0, 1.0))
