"""The offline LM's sequence format, blank masking and keyword table: pure functions."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.keywords import KeywordExtractor


def test_condition_prefix_keeps_only_given_fields_in_order():
    fields = fmt.Fields(kind="news report", label="positive", keywords=("court", "appeal"),
                        length=30)
    prefix = fmt.condition_prefix(fields)
    assert prefix == ("<|type|> news report<|label|> positive<|keywords|> court, appeal"
                      "<|length|><|len_5|>")
    assert fmt.condition_prefix(fmt.Fields(label="negative")) == "<|label|> negative"
    assert fmt.condition_prefix(fmt.Fields()) == ""


def test_length_buckets_are_monotone_and_cover_all_lengths():
    buckets = [fmt.LENGTH_TOKENS.index(fmt.length_token(n)) for n in range(0, 400)]
    assert buckets == sorted(buckets)
    assert buckets[0] == 0 and buckets[-1] == len(fmt.LENGTH_TOKENS) - 1
    assert fmt.length_token(42) != fmt.length_token(43)


def test_generation_prompt_and_document_sequence_agree():
    fields = fmt.Fields(label="positive")
    seq = fmt.document_sequence(fields, "A  fine\nfilm.")
    assert seq.startswith(fmt.generation_prompt(fields))
    assert seq.endswith(" A fine film." + fmt.EOS)


def test_masked_words_turn_underscore_runs_into_blank_tokens():
    assert fmt.masked_words("the _ sat on _. end") == [
        "the", fmt.BLANK_TOKEN, "sat", "on", fmt.BLANK_TOKEN, ".", "end"]


@given(st.integers(1, 60), st.floats(0.01, 1.0), st.integers(1, 3), st.integers(0, 10**6))
def test_random_spans_hide_the_requested_words_in_at_most_k_runs(n, share, k, seed):
    hidden = max(1, round(share * n))
    mask = fmt.random_spans(n, hidden, k, random.Random(seed))
    assert len(mask) == n and sum(mask) == hidden
    runs = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    assert 1 <= runs <= k


@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_hide_then_merge_gives_back_the_text(mask):
    words = [f"w{i}" for i in range(len(mask))]
    masked, spans = fmt.hide(words, mask)
    assert masked.count(fmt.BLANK_TOKEN) == len(spans)
    assert fmt.merge_spans(masked, spans) == " ".join(words)


def test_infill_sequence_has_one_answer_per_blank():
    masked, spans = fmt.hide(["a", "b", "c", "d", "e"], [False, True, False, True, True])
    seq = fmt.infill_sequence(fmt.Fields(), masked, spans)
    assert seq == "<|masked|> a <|blank|> c <|blank|><|fill|> b<|sep|> d e<|sep|><|endoftext|>"


def test_keywords_rank_by_tfidf_and_skip_stop_words(tmp_path):
    ext = KeywordExtractor({"court": 3.0, "appeal": 2.0, "judge": 5.0, "said": 0.5})
    assert ext.top("The court said the appeal court would rule; the judge said so.", 3) == (
        "court", "judge", "appeal")
    ext.save(tmp_path / "idf.json")
    assert KeywordExtractor.load(tmp_path / "idf.json").idf == ext.idf
    assert ext.top("and the of", 3) == ()
