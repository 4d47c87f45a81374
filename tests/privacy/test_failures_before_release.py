"""A record the embedder cannot take must stop a run before its first release, or not at all:
a failure between two releases would tell, uncharged, that such a record is in the data
(docs/privacy.md, "No failure after a release"). Neighbouring datasets D and D' = D plus one
such record."""

import json

import numpy as np
import pandas as pd
import pytest

from dpsynth.backends.base import BackendError
from dpsynth.config import parse_config
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder, RecordingGenerator, ticket_texts
from tests.methods.test_unseeded import TINY, tiny_stand_ins

ODD = "zzz " * 400
"""The one record the embedders below cannot take."""


class ServerLimit(HashEmbedder):
    """A remote embeddings server answering an input over its limit with an error (the
    private record's; the generator's public texts, some long, are not the point here)."""

    def encode_private(self, texts):
        if any(len(text) > 1000 for text in texts):
            raise BackendError("backends.embedder: an embeddings request failed")
        return super().encode_private(texts)


class NotFinite(HashEmbedder):
    """A custom embedder that answers NaN for one text."""

    def encode(self, texts):
        out = super().encode(texts)
        out[[i for i, text in enumerate(texts) if text.startswith("zzz")]] = np.nan
        return out


def _run(tmp_path, recipe, params, embedder, odd: bool, n: int = 40, seed: int = 0):
    texts, labels = ticket_texts(n)
    if odd:
        texts, labels = [*texts, ODD], [*labels, labels[0]]
    return _run_table(tmp_path, recipe, params, embedder, texts, labels, seed)


def _run_table(tmp_path, recipe, params, embedder, texts, labels, seed: int = 0):
    tmp_path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label",
                    "labels": sorted(set(labels))},
           "budget": {"epsilon": 4.0}, "recipe": {"name": recipe, "params": params},
           "output": {"dir": str(tmp_path / "out")}, "seed": seed}
    try:
        run(parse_config(raw, base_dir=tmp_path), embedder=embedder,
            generator=RecordingGenerator())
        failure = None
    except BackendError as exc:
        failure = exc
    privacy = tmp_path / "out" / "privacy.json"
    releases = ({k: v["releases"] for k, v in json.loads(privacy.read_text())["breakdown"].items()}
                if privacy.exists() else {})
    return failure, releases


@pytest.mark.parametrize("recipe", ["pe", "dpga", "eda", "kd_tutor"])
def test_a_record_the_embedder_refuses_stops_the_run_before_anything_is_charged(
        tmp_path, recipe, request):
    params, embedder = tiny_stand_ins(recipe, tmp_path, request.getfixturevalue)
    embedder = ServerLimit(embedder.dim)
    failure, releases = _run(tmp_path / "d", recipe, params, embedder, odd=False)
    assert failure is None and releases  # D runs to the end
    failure, releases = _run(tmp_path / "d2", recipe, params, embedder, odd=True)
    assert failure is not None
    assert not any(releases.values())  # D': refused before its first release


def test_a_record_embedded_as_nan_changes_no_release_or_outcome(tmp_path):
    """dpga's self-similarity reads the pair a keyed digest puts in one bucket: a NaN record
    used to fail that release after its charge, depending on the key: with 4 records and one
    bucket, the NaN record is in the pair under some of the seeds below."""
    params = dict(TINY["dpga"], similarity_suppression=True, similarity_buckets=1)
    outcomes = []
    for odd in (False, True):
        for seed in range(6):
            failure, releases = _run(tmp_path / f"{odd}-{seed}", "dpga", params, NotFinite(),
                                     odd=odd, n=4, seed=seed)
            outcomes.append((failure, releases))
    assert all(failure is None for failure, _ in outcomes)
    assert len({json.dumps(r, sort_keys=True) for _, r in outcomes}) == 1


class HugeButFinite(HashEmbedder):
    """A custom embedder that does not normalise: finite float32 rows of size 1e20, signs from
    the text, for the odd records (two of them in one bucket overflow a float32 product)."""

    def encode(self, texts):
        out = super().encode(texts)
        for i, text in enumerate(texts):
            if text.startswith("zzz"):
                signs = np.random.default_rng(len(text)).choice([-1.0, 1.0], out.shape[1])
                out[i] = 1e20 * signs
        return out


def test_a_huge_but_finite_embedding_changes_no_release_or_outcome(tmp_path):
    """D holds one such record, D' a second: with one bucket, under some seeds the two are
    τ's pair, whose float32 cosine was NaN, and the charged release failed."""
    params = dict(TINY["dpga"], similarity_suppression=True, similarity_buckets=1)
    outcomes = []
    for odd in (False, True):
        for seed in range(5):
            texts, labels = ticket_texts(3)
            extra = ["zzz odd record"] + (["zzz another odd record"] if odd else [])
            failure, releases = _run_table(tmp_path / f"{odd}-{seed}", "dpga", params,
                                           HugeButFinite(), [*texts, *extra],
                                           [*labels, *[labels[0]] * len(extra)], seed)
            outcomes.append((failure, releases))
    assert all(failure is None for failure, _ in outcomes)
    assert len({json.dumps(r, sort_keys=True) for _, r in outcomes}) == 1


def test_a_non_finite_embedding_is_read_as_zero():
    from dpsynth.data import PrivateDataset

    embedded = PrivateDataset(["fine text", ODD, "another"]).embed(NotFinite(),
                                                                  allow_remote=True)
    assert np.isfinite(embedded).all()
    assert not embedded[1].any() and embedded[0].any() and embedded[2].any()


def test_an_embedding_past_float32s_range_is_zero_without_a_warning():
    import warnings

    from dpsynth.data import PrivateDataset

    class Huge(HashEmbedder):
        def encode(self, texts):
            out = super().encode(texts).astype(np.float64)
            out[[i for i, text in enumerate(texts) if text.startswith("zzz")]] = 1e300
            return out

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would say that some record did this
        embedded = PrivateDataset(["fine text", ODD]).embed(Huge(), allow_remote=True)
    assert embedded[0].any() and not embedded[1].any()


def test_kd_tutor_on_ray_plans_with_a_remote_embedder(tmp_path):
    """Ray's teachers learn from the embeddings the voters took before the first release
    (tests/ops/test_sharded.py), so nothing is embedded after it and a remote embedder, which
    could refuse one record in a new request, is not refused for them."""
    from dpsynth.preflight import make_plan

    pd.DataFrame({"text": [f"ticket {i}" for i in range(40)],
                  "label": ["a", "b"] * 20}).to_csv(tmp_path / "private.csv", index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": ["a", "b"]},
           "budget": {"epsilon": 4.0}, "recipe": {"name": "kd_tutor"},
           "output": {"dir": str(tmp_path / "out")},
           "backends": {"embedder": {"name": "openai", "base_url": "http://127.0.0.1:9",
                                     "allow_remote_on_private": True},
                        "executor": {"name": "ray"}}}
    plan = make_plan(parse_config(raw, base_dir=tmp_path))
    assert plan.recipe.name == "kd_tutor" and plan.budget.epsilon == 4.0
