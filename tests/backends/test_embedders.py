"""TF-IDF and OpenAI-compatible embedders, and the refusal of remote embedders on private data."""

import logging

import numpy as np
import pytest

from dpsynth.backends import BackendError, build_embedder
from dpsynth.backends.config import OpenAIEmbeddingsConfig, TfidfConfig
from dpsynth.backends.embedders.tfidf import TfidfEmbedder
from dpsynth.data.private import PrivateDataset
from dpsynth.errors import ConfigError, InputError

from .conftest import FAST_HTTP

PUBLIC = [
    "the parcel arrived late and the box was damaged",
    "my parcel never arrived, where is my order",
    "the invoice charged me twice this month",
    "please refund the double charge on my invoice",
    "i cannot log in to my account after the password reset",
    "password reset email never arrives for my account",
    "the wifi router drops the connection every evening",
    "internet connection keeps dropping on the router",
]


def check_unit_float32(vectors: np.ndarray, n: int, dim: int) -> None:
    assert vectors.shape == (n, dim) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_tfidf_is_normalised_deterministic_and_semantic(tmp_path):
    path = tmp_path / "public.txt"
    path.write_text("\n".join(PUBLIC), encoding="utf-8")
    first = build_embedder(TfidfConfig(fit_texts=path, dim=4))
    second = build_embedder(TfidfConfig(fit_texts=path, dim=4))
    queries = ["where is my parcel order", "charged twice on the invoice",
               "zzz qqq unknown words"]
    a, b = first.encode(queries), second.encode(queries)
    check_unit_float32(a, 3, 4)
    np.testing.assert_array_equal(a, b)
    assert not first.is_remote and first.identity() == second.identity()
    corpus = first.encode(PUBLIC)
    assert int(np.argmax(corpus @ a[0])) in (0, 1)  # nearest public text is about a parcel
    assert int(np.argmax(corpus @ a[1])) in (2, 3)
    assert first.encode([]).shape == (0, 4)


def test_tfidf_embeds_a_private_text_as_it_does_alone():
    """Row by row (a sparse product): a private text's bits do not depend on the texts
    embedded with it, so one record cannot move another's vote (docs/privacy.md)."""
    embedder = TfidfEmbedder(PUBLIC, dim=6)
    rng = np.random.default_rng(0)
    words = " ".join(PUBLIC).replace(",", "").split()
    texts = [" ".join(rng.choice(words, rng.integers(1, 60))) for _ in range(300)]
    alone = np.stack([embedder.encode_private([t])[0] for t in texts[::7]])
    order = rng.permutation(len(texts))
    together = PrivateDataset([texts[i] for i in order]).embed(embedder, block_rows=41)
    np.testing.assert_array_equal(together[np.argsort(order)[::7]], alone)


def test_tfidf_reads_a_table_and_refuses_private_or_missing_fit_text(tmp_path):
    table = tmp_path / "public.csv"
    table.write_text("body\n" + "\n".join(f'"{t}"' for t in PUBLIC), encoding="utf-8")
    emb = build_embedder(TfidfConfig(fit_texts=table, fit_text_column="body",
                                     dim=3))
    assert emb.dim == 3
    with pytest.raises(InputError, match="no column 'text'"):
        build_embedder(TfidfConfig(fit_texts=table))
    with pytest.raises(ConfigError, match="fit_texts"):
        build_embedder(TfidfConfig())
    with pytest.raises(TypeError, match="public text only"):
        TfidfEmbedder(PrivateDataset(PUBLIC))


def test_tfidf_relative_paths_follow_the_config_folder(tmp_path):
    (tmp_path / "public.txt").write_text("\n".join(PUBLIC), encoding="utf-8")
    emb = build_embedder(TfidfConfig(fit_texts="public.txt", dim=2),
                         base_dir=tmp_path)
    assert emb.dim == 2


def openai_embedder(server, **overrides):
    fields = {"name": "openai", "base_url": server.url, "model": "loopback-embed",
              "batch_size": 3, "concurrency": 2, "http": FAST_HTTP}
    return build_embedder(OpenAIEmbeddingsConfig(**{**fields, **overrides}))


def test_openai_embedder_batches_normalises_and_is_deterministic(server):
    emb = openai_embedder(server)
    vectors = emb.encode(PUBLIC)
    check_unit_float32(vectors, len(PUBLIC), 32)
    assert sorted(len(r.body["input"]) for r in server.records) == [2, 3, 3]
    np.testing.assert_array_equal(vectors, emb.encode(PUBLIC))
    assert emb.is_remote and emb.dim == 32
    assert emb.usage()["prompt_tokens"] == 2 * sum(len(t.split()) for t in PUBLIC)
    sized = openai_embedder(server, dim=16)
    assert sized.encode(["x"]).shape == (1, 16) and server.records[-1].body["dimensions"] == 16


def test_openai_embedder_retries_then_fails_loudly(server):
    emb = openai_embedder(server)
    server.inject("429")
    assert emb.encode(["a b"]).shape == (1, 32)
    server.inject("malformed")
    with pytest.raises(BackendError, match="embeddings request failed"):
        emb.encode(["a b"])


def test_remote_embedder_on_private_data_needs_the_opt_in(server, caplog):
    private = PrivateDataset(["private record one", "private record two"])
    emb = openai_embedder(server)
    with pytest.raises(InputError, match="allow_remote_on_private"):
        private.embed(emb)
    assert server.records == []  # nothing was sent
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        vectors = private.embed(emb, allow_remote=True)
    assert vectors.shape == (2, 32) and "remote embedder" in caplog.text
    assert "private record" not in caplog.text
