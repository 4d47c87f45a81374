"""The inversion decoder on a tiny LM: a self-contained folder, deterministic decoding, what
it learns, and the refusals."""

import json

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from dpsynth.backends.offline.inversion import (
    CONFIG_FILE,
    FROZEN,
    WEIGHTS_FILE,
    InversionDecoder,
)
from dpsynth.errors import InputError
from tests.methods.fakes import HashEmbedder
from tests.tiny_lm import INVERSION_DIM, inversion_texts, one_torch_thread

DIM = INVERSION_DIM


@pytest.fixture
def folders(tiny_inversion):
    with one_torch_thread():
        yield tiny_inversion


def test_decoder_stores_every_weight_and_the_frozen_ones_as_trained_with(folders):
    lm, folder = folders
    with safe_open(str(folder / WEIGHTS_FILE), "pt") as f:
        keys = set(f.keys())
    assert keys >= set(FROZEN)
    assert any(k.startswith("project.") for k in keys)
    assert any(k.startswith("lm.transformer.h.") for k in keys)
    stored, base = load_file(str(folder / WEIGHTS_FILE)), load_file(str(lm / "model.safetensors"))
    for name in FROZEN:
        assert stored[name].half().equal(base[name.removeprefix("lm.")].half()), name


def test_decoding_ignores_a_new_public_lms_embedding_and_head(folders, tmp_path):
    """A retrained public LM (same tokenizer and shape) must not change what the decoder
    writes: it reads its frozen tensors from its own folder."""
    import shutil

    lm, folder = folders
    emb = HashEmbedder(DIM).encode(inversion_texts(8))
    before = InversionDecoder(folder).decode(emb)
    new_lm, copy = tmp_path / "new_lm", tmp_path / "decoder"
    shutil.copytree(lm, new_lm)
    shutil.copytree(folder, copy)
    weights = load_file(str(new_lm / "model.safetensors"))
    for name in FROZEN:
        key = name.removeprefix("lm.")
        weights[key] = weights[key].flip(0).contiguous()
    save_file(weights, str(new_lm / "model.safetensors"))
    spec = json.loads((folder / CONFIG_FILE).read_text())
    (copy / CONFIG_FILE).write_text(json.dumps({**spec, "base_lm": str(new_lm)}))
    assert InversionDecoder(copy).decode(emb) == before


def test_decoding_is_deterministic_and_learned(folders):
    _, folder = folders
    decoder = InversionDecoder(folder)
    texts = inversion_texts(16)
    emb = HashEmbedder(DIM).encode(texts)
    first, second = decoder.decode(emb), decoder.decode(emb)
    assert first == second and all(isinstance(t, str) for t in first)
    back = HashEmbedder(DIM).encode(first)
    own = np.sum(back * emb, axis=1).mean()
    other = np.sum(back * np.roll(emb, 1, axis=0), axis=1).mean()
    assert own > other + 0.1  # trained texts come back closer to their source than others


def test_decode_closest_keeps_the_nearest_hypothesis_reproducibly(folders):
    """Best of greedy + samples: never farther from the target than greedy alone, the same
    texts for the same seed, and each pick is the closest of what `_generate` sampled."""
    _, folder = folders
    decoder = InversionDecoder(folder)
    embedder = HashEmbedder(DIM)
    emb = embedder.encode(inversion_texts(12))
    greedy = decoder.decode(emb)
    best = decoder.decode_closest(emb, embedder, samples=6, seed=3)
    assert best == decoder.decode_closest(emb, embedder, samples=6, seed=3)
    assert decoder.decode_closest(emb, embedder, samples=0) == greedy

    def cosine(texts):
        return np.sum(embedder.encode(texts) * emb, axis=1)

    assert np.all(cosine(best) >= cosine(greedy) - 1e-6)
    sampled = decoder._generate(emb, 6, 3)
    assert len(sampled) == 6 * len(emb)
    for i, text in enumerate(best):
        pool = [greedy[i], *sampled[6 * i : 6 * i + 6]]
        assert text in pool
        sims = embedder.encode(pool) @ emb[i]
        assert sims[pool.index(text)] >= sims.max() - 1e-6
    assert len(set(sampled)) > len(emb)  # sampling does propose other texts
    with pytest.raises(ValueError, match="samples"):
        decoder.decode_closest(emb, embedder, samples=-1)


def test_decoder_refuses_another_embedder_and_a_folder_without_weights(folders, tmp_path):
    _lm, folder = folders
    decoder = InversionDecoder(folder)
    with pytest.raises(InputError, match="32-d embeddings"):
        decoder.check_embedder(HashEmbedder(16))
    decoder.check_embedder(HashEmbedder(DIM))
    with pytest.raises(ValueError, match=r"shape \(n, 32\)"):
        decoder.decode(np.zeros((2, 5), dtype=np.float32))
    spec = json.loads((folder / CONFIG_FILE).read_text())
    copy = tmp_path / "copy"
    copy.mkdir()
    stored = load_file(str(folder / WEIGHTS_FILE))
    save_file({k: v for k, v in stored.items() if k not in FROZEN}, str(copy / WEIGHTS_FILE))
    (copy / CONFIG_FILE).write_text(json.dumps(spec))
    with pytest.raises(InputError, match="missing"):
        InversionDecoder(copy)
    with pytest.raises(InputError, match="no inversion decoder"):
        InversionDecoder(tmp_path / "nowhere")


def test_shipped_decoder_inverts_minilm_better_than_chance():
    """The shipped decoder is weak (its model card: held-out cosine 0.31), but a text's
    reconstruction must sit clearly closer to it than to other texts."""
    from dpsynth.backends import build_embedder
    from dpsynth.backends.config import MiniLMConfig

    texts = ["The team won the championship game in overtime on Sunday night.",
             "What is the capital city of Australia?",
             "The president met foreign leaders to discuss the war.",
             "She opened the door slowly and looked into the dark room.",
             "The new smartphone has a faster processor and a larger screen.",
             "The river flooded the village after days of heavy rain.",
             "The church was built in the twelfth century by the local bishop.",
             "The stock market fell sharply after the central bank raised interest rates."]
    embedder = build_embedder(MiniLMConfig())
    with one_torch_thread():
        decoder = InversionDecoder()
        decoder.check_embedder(embedder)
        emb = embedder.encode(texts)
        back = embedder.encode(decoder.decode(emb))
    sims = back @ emb.T
    own = np.trace(sims) / len(texts)
    other = (sims.sum() - np.trace(sims)) / (sims.size - len(texts))
    assert own > other + 0.15
