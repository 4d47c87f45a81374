"""In-context classification: demonstrations are drawn evenly, reach the prompt, and decide
the prediction; the offline generator's scores are the LM's own log-probabilities."""

import numpy as np
import pytest

from dpsynth.backends.base import BackendError
from dpsynth.evaluate.icl import IclConfig, icl_accuracy, icl_prompt, pick_demonstrations
from tests.methods.fakes import RecordingGenerator, ticket_texts
from tests.tiny_lm import one_torch_thread


class OverlapScorer(RecordingGenerator):
    """Scores a label by the best word overlap between the test text and the prompt's
    demonstrations of that label: a stand-in LM that only learns from its context."""

    def score(self, prompts, continuations):
        out = []
        for prompt, label in zip(prompts, continuations, strict=True):
            *demos, query = prompt.split("\n\n")
            words = set(query.removeprefix("Text: ").removesuffix("\nLabel:").split())
            best = -100.0
            for demo in demos:
                text, shown = demo.removeprefix("Text: ").split("\nLabel: ")
                if shown == label:
                    best = max(best, float(len(words & set(text.split()))))
            out.append(best)
        return np.array(out)


def test_demonstrations_are_spread_over_labels():
    labels = ["a"] * 50 + ["b"] * 5 + ["c"] * 2
    picked = pick_demonstrations(labels, 6, np.random.default_rng(0))
    assert len(picked) == 6 and len(set(picked)) == 6
    assert sorted(labels[i] for i in picked) == ["a", "a", "b", "b", "c", "c"]


def test_informative_demonstrations_beat_shuffled_labels():
    texts, labels = ticket_texts(200, seed=1)
    test_texts, test_labels = ticket_texts(80, seed=2)
    config = IclConfig(shots=8, repeats=2, max_test=80)
    good = icl_accuracy(OverlapScorer(), texts, labels, test_texts, test_labels, config)
    shuffled = list(np.random.default_rng(0).permutation(labels))
    bad = icl_accuracy(OverlapScorer(), texts, shuffled, test_texts, test_labels, config)
    assert good["accuracy_mean"] > 0.6 > bad["accuracy_mean"] + 0.2
    assert good["zero_shot_accuracy"] == pytest.approx(good["majority_class_share"], abs=0.1)
    assert len(good["accuracies"]) == 2


def test_prompt_format_and_a_backend_without_scores():
    prompt = icl_prompt([("one two three", "x")], "four five", max_words=2)
    assert prompt == "Text: one two\nLabel: x\n\nText: four five\nLabel:"
    with pytest.raises(BackendError, match="cannot score"):
        icl_accuracy(RecordingGenerator(), ["a b"], ["x"], ["a"], ["x"])


def test_offline_scores_are_the_lm_log_probabilities(tiny_inversion):
    import torch

    from dpsynth.backends.offline import format as fmt
    from dpsynth.backends.offline.generator import OfflineGenerator

    lm_dir = tiny_inversion[0]
    with one_torch_thread():
        gen = OfflineGenerator(lm_dir, seed=0, batch_size=3)
        prompts = ["the cat sat on", "rain fell over quiet hills and", "a"]
        conts = ["a mat", "old stone walls near the river", "film"]
        batched = gen.score(prompts, conts)
        for prompt, cont, value in zip(prompts, conts, batched, strict=True):
            head = gen.tokenizer.encode(fmt.generation_prompt(fmt.Fields())).ids
            p = head + gen.tokenizer.encode(" " + prompt).ids
            c = gen.tokenizer.encode(" " + cont).ids
            with torch.no_grad():
                logits = gen.model(input_ids=torch.tensor([p + c])).logits[0]
            logp = torch.log_softmax(logits, -1)
            expected = sum(float(logp[len(p) - 1 + i, t]) for i, t in enumerate(c))
            assert value == pytest.approx(expected, abs=1e-3)
        assert np.all(batched < 0)
