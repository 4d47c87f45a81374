"""OfflineGenerator code paths on a tiny model built and briefly trained in the test.

The model only learns that words are separated by spaces; every property checked here is
enforced by the generator itself (seeding, length control, blank handling, crossover prefix)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from dpsynth.backends.base import Condition
from dpsynth.backends.config import OfflineConfig
from dpsynth.backends.factory import build_generator
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.generator import OfflineGenerator
from dpsynth.errors import InputError
from tests.tiny_lm import WORDS


@pytest.fixture
def gen(tiny_lm):
    return OfflineGenerator(tiny_lm, seed=7, temperature=1.0, top_p=0.95)


def test_embeddings_are_untied_for_opacus_ghost_clipping(gen):
    model = gen.model
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()


def test_guide_keywords_contrasts_against_the_condition_without_label_and_keywords(tiny_lm):
    conds = [Condition(keywords=("film",)), Condition(label="positive", keywords=("film",))]
    requests = {}
    for flag in (False, True):
        gen = OfflineGenerator(tiny_lm, seed=1, guide_keywords=flag)
        gen._run = lambda reqs, _, flag=flag: requests.setdefault(flag, reqs) and [[""]] * 2
        gen.generate(conds)
    plain, guided = requests[False], requests[True]
    decode = OfflineGenerator(tiny_lm).tokenizer.decode
    assert plain[0].contrast is None  # keywords alone are not guided by default
    assert "film" in decode(plain[1].contrast) and "positive" not in decode(plain[1].contrast)
    for request in guided:
        assert request.contrast is not None
        assert "film" not in decode(request.contrast)
        assert "positive" not in decode(request.contrast)


def test_same_seed_same_texts_other_seed_other_texts(tiny_lm):
    conds = [Condition(label="positive", keywords=("film",), length=20)] * 4
    a = OfflineGenerator(tiny_lm, seed=3).generate(conds)
    b = OfflineGenerator(tiny_lm, seed=3).generate(conds)
    c = OfflineGenerator(tiny_lm, seed=4).generate(conds)
    assert a == b
    assert a != c
    assert len(set(a)) > 1  # rows of a batch differ


@pytest.mark.parametrize("target", [8, 25, 60])
def test_generate_honours_length_within_slack(gen, target):
    texts = gen.generate([Condition(length=target)] * 6)
    counts = [fmt.count_words(t) for t in texts]
    assert all(0.7 * target <= n <= 1.3 * target + 1 for n in counts), counts


def test_rewrite_keeps_untouched_words_and_length(gen):
    text = " ".join(WORDS[:30])
    low = gen.rewrite([text] * 4, [Condition()] * 4, strength=0.2)
    for out in low:
        assert 0.7 * 30 <= fmt.count_words(out) <= 1.3 * 30
        kept = set(out.split()) & set(text.split())
        assert len(kept) >= 0.5 * len(set(text.split()))
    assert gen.rewrite([text], [Condition()], strength=0.0) == [text]
    fresh = gen.rewrite([text], [Condition()], strength=1.0)[0]
    assert 0.7 * 30 <= fmt.count_words(fresh) <= 1.3 * 30


def test_rewrite_rejects_strength_outside_unit_interval(gen):
    with pytest.raises(InputError, match="strength"):
        gen.rewrite(["a b c"], [Condition()], strength=1.5)


def test_fill_replaces_every_blank_and_keeps_the_rest(gen):
    masked = "the cat _ on a _ _ while rain fell"
    out = gen.fill([masked] * 3, [Condition()] * 3)
    for text in out:
        assert "_" not in text and fmt.BLANK_TOKEN not in text
        assert text.startswith("the cat ")
        assert text.endswith("while rain fell")
        assert 8 <= fmt.count_words(text) <= 14
    assert gen.fill(["no blanks here"], [Condition()]) == ["no blanks here"]


def test_fill_of_a_text_longer_than_the_context_keeps_every_word(gen):
    words = [WORDS[i % len(WORDS)] for i in range(400)]
    words[300] = "_"
    out = gen.fill([" ".join(words)], [Condition()])[0].split()
    assert "_" not in out and fmt.BLANK_TOKEN not in out
    assert out[:300] == words[:300]
    assert out[-99:] == words[301:]


def test_crossover_starts_with_first_parent_and_needs_two(gen):
    parents = ["the cat sat on a mat while rain fell over quiet hills and old stone walls",
               "river town market bread music film review story plot actor great terrible"]
    out = gen.crossover([parents] * 3, [Condition()] * 3)
    for child in out:
        assert child.startswith("the cat sat on")
        assert 0.7 * 14 <= fmt.count_words(child) <= 1.3 * 14 + 1  # mean of 15 and 12 words
    with pytest.raises(InputError, match="two or more"):
        gen.crossover([[parents[0]]], [Condition()])


def test_operations_need_one_condition_per_input(gen):
    with pytest.raises(InputError, match="one condition per input"):
        gen.fill(["a _ b", "c _ d"], [Condition()])


def test_perplexity_ranks_training_like_text_below_noise(gen):
    """The tiny model, trained a few steps on the fixture's word list, must find text made
    of those words likelier than random bytes."""
    rng = np.random.default_rng(0)
    g = gen
    good = g.perplexity([" ".join(rng.choice(WORDS, 20)) for _ in range(4)])
    noise = g.perplexity(["qz#9 xv!! 7$$ pw%k zzq ^^ kk" for _ in range(4)])
    assert good.shape == (4,) and np.all(good > 1)
    assert good.max() < noise.min()


def test_factory_builds_offline_from_config(tiny_lm):
    g = build_generator(OfflineConfig(model=str(tiny_lm), seed=5,
                                      temperature=0.8, top_p=0.9))
    assert isinstance(g, OfflineGenerator)
    assert (g.seed, g.temperature, g.top_p) == (5, 0.8, 0.9)


def test_missing_model_folder_is_named(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path)):
        OfflineGenerator(tmp_path)


def test_state_dict_resumes_the_sampling_stream(tiny_lm):
    cond = [Condition(length=8)] * 3
    whole = OfflineGenerator(tiny_lm, seed=5)
    whole.generate(cond)
    expected = whole.generate(cond)
    first = OfflineGenerator(tiny_lm, seed=5)
    first.generate(cond)
    resumed = OfflineGenerator(tiny_lm, seed=5)
    resumed.load_state_dict(first.state_dict())
    assert resumed.generate(cond) == expected


def test_identity_keys_the_cache_on_the_weights_and_every_sampling_setting(tiny_lm, tmp_path):
    """Generators that sample differently never share cached outputs; equal ones do, even
    from a copy of the model folder elsewhere."""
    import shutil

    import torch
    from transformers import GPT2LMHeadModel

    from dpsynth.backends.cache import CachedGenerator, ContentCache

    copy = shutil.copytree(tiny_lm, tmp_path / "copy")
    retrained = shutil.copytree(tiny_lm, tmp_path / "retrained")
    model = GPT2LMHeadModel.from_pretrained(retrained)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.01)  # same architecture and file sizes, other weights
    model.save_pretrained(retrained)
    cache = ContentCache(tmp_path / "cache.sqlite")
    conds = [Condition(length=6)] * 3

    def cached(folder, **settings):
        return CachedGenerator(OfflineGenerator(folder, **{"seed": 3, **settings}), cache)

    first = cached(tiny_lm)
    texts = first.generate(conds)
    again = cached(copy)
    assert again.identity() == first.identity()
    assert again.generate(conds) == texts and again.hits == len(conds)
    variants = [cached(retrained), cached(tiny_lm, temperature=0.7),
                cached(tiny_lm, top_p=0.8), cached(tiny_lm, label_guidance=1.5),
                cached(tiny_lm, guide_keywords=True),
                cached(tiny_lm, engine="int8"), cached(tiny_lm, engine="reference"),
                cached(tiny_lm, seed=4)]
    identities = [g.identity() for g in [first, *variants]]
    assert all(identities.count(i) == 1 for i in identities)
    for g in variants:
        g.generate(conds)
        assert (g.hits, g.misses) == (0, len(conds)), g.identity()
