"""eda's generator decoding (methods/parts/decoding.py): the candidate closest to the target
is kept, only public text and the label reach a prompt, and the readability filter scores
with the generator where it can."""

import json
import math

import numpy as np
import pytest

from dpsynth.backends.base import BackendError, Condition
from dpsynth.methods.parts.decoding import (
    DecodeSources,
    GeneratorDecoder,
    GeneratorPerplexity,
    closest,
)
from dpsynth.run import run
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator, ticket_dataset
from tests.methods.test_eda import DIM, PARAMS, make_config
from tests.tiny_lm import one_torch_thread

CANDIDATES = ["invoice refund charge", "parcel courier delivery box", "wifi crash battery"]


class Scripted(RecordingGenerator):
    """Rewrites into the texts of `CANDIDATES` in turn, whatever it is asked; keeps every
    rewrite request."""

    def __init__(self) -> None:
        super().__init__()
        self.rewrites: list[tuple[str, Condition]] = []

    def rewrite(self, texts, conditions, strength=0.5):
        self._record(list(texts), [repr(c) for c in conditions])
        self.rewrites += list(zip(texts, conditions, strict=True))
        return [CANDIDATES[i % len(CANDIDATES)] for i in range(len(texts))]


class Scoring(RecordingGenerator):
    """Scores every word at log-probability −2: per-word perplexity e² for any text."""

    def score(self, prompts, continuations):
        return np.array([-2.0 * len(c.split()) for c in continuations])


@pytest.fixture
def decoder_dir(tiny_inversion):
    with one_torch_thread():
        yield tiny_inversion[1]


def _public(embedder, texts, label="billing", hypotheses=None):
    return DecodeSources(label, texts, embedder.encode(texts), hypotheses)


def test_the_candidate_closest_to_each_target_is_kept():
    embedder = HashEmbedder(DIM)
    targets = embedder.encode(["parcel courier delivery box late", "wifi crash battery sync",
                               "invoice refund charge fee"])
    decoder = GeneratorDecoder(Scripted(), embedder, samples=3, neighbours=1)
    out = decoder.decode(targets, _public(embedder, ["a public text", "another one"]))
    assert out == [CANDIDATES[1], CANDIDATES[2], CANDIDATES[0]]
    # a closer text of another decoder wins over every rewrite
    hypotheses = ["", "wifi crash battery sync", ""]
    out = decoder.decode(targets, _public(embedder, ["a public text"], hypotheses=hypotheses))
    assert out[1] == "wifi crash battery sync"


def test_closest_is_the_argmax_of_the_cosine():
    embedder = HashEmbedder(DIM)
    rng = np.random.default_rng(0)
    words = "invoice refund parcel courier wifi crash login reset screen card".split()
    rows = [[" ".join(rng.choice(words, 4)) for _ in range(5)] for _ in range(20)]
    targets = embedder.encode([" ".join(rng.choice(words, 6)) for _ in range(20)])
    for target, row, kept in zip(targets, rows, closest(targets, rows, embedder), strict=True):
        assert kept in row
        assert embedder.encode([kept])[0] @ target == pytest.approx(
            (embedder.encode(row) @ target).max())
    assert closest(targets[:2], [[], ["x"]], embedder) == ["", "x"]


def test_the_prompts_hold_the_nearest_public_texts_the_label_and_a_length_only():
    embedder = HashEmbedder(DIM)
    public = ["invoice refund charge payment", "parcel courier delivery", "wifi screen crash"]
    generator = Scripted()
    decoder = GeneratorDecoder(generator, embedder, samples=4, neighbours=1)
    decoder.decode(embedder.encode(["parcel courier late"]),
                   _public(embedder, public, "shipping", ["decoded text here"]))
    # 4 rewrites, alternating the nearest public text and the other decoder's text
    assert [t for t, _ in generator.rewrites] == ["parcel courier delivery",
                                                  "decoded text here"] * 2
    for text, condition in generator.rewrites:
        assert condition == Condition(label="shipping", length=max(5, len(text.split())))


def test_the_scorer_is_the_generator_where_it_scores_else_the_fallback():
    embedder = HashEmbedder(DIM)
    scorer = GeneratorDecoder(Scoring(), embedder).scorer(fallback=lambda: "fallback")
    assert isinstance(scorer, GeneratorPerplexity)
    np.testing.assert_allclose(scorer.perplexity(["one two three", "four"]), math.e ** 2)
    assert scorer.perplexity([""])[0] == np.inf  # nothing to read: never kept
    assert GeneratorDecoder(Scripted(), embedder).scorer(fallback=lambda: "fallback") \
        == "fallback"
    with pytest.raises(BackendError):
        GeneratorDecoder(Scripted(), embedder).scorer()


def test_eda_decodes_through_the_generator_from_public_text_only(tmp_path, tickets,
                                                                 decoder_dir, monkeypatch):
    """Every text the generator is asked to rewrite is one the run wrote itself (the initial
    public texts, the inversion decoder's and the generator's own outputs), never a record."""
    from dpsynth.backends.offline.inversion import InversionDecoder

    inverted: list[str] = []
    original = InversionDecoder.decode_closest

    def recording(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        inverted.extend(out)
        return out

    monkeypatch.setattr(InversionDecoder, "decode_closest", recording)
    generator = Scripted()
    written: list[str] = []
    generate = generator.generate
    generator.generate = lambda conditions: written.extend(generate(conditions)) or written[
        -len(conditions):]
    outputs = run(make_config(tmp_path, tickets, decoder_dir), embedder=HashEmbedder(DIM),
                  generator=generator)
    assert generator.rewrites, "generator decoding is the default"
    # by default only the inversion decoder's texts are rewritten; with a neighbour, the
    # label's generator-written texts and decoded parents too
    assert {text for text, _ in generator.rewrites} <= set(inverted)
    assert {c.label for _, c in generator.rewrites} <= set(tickets[1])
    sent = "\n".join(generator.inputs)
    assert not [t for t in tickets[0] if t in sent] and CANARY not in sent
    assert set(outputs.result.texts) <= set(CANDIDATES) | set(inverted)
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())["generator"]
    assert usage["outputs_generate"] == PARAMS["n_public"]
    assert usage["outputs_rewrite"] == len(generator.rewrites)
    generator.rewrites.clear()
    neighbours = run(make_config(tmp_path, tickets, decoder_dir, out="n1",
                                 rewrite_neighbours=1),
                     embedder=HashEmbedder(DIM), generator=generator)
    public = set(written) | set(inverted) | set(CANDIDATES)
    assert {text for text, _ in generator.rewrites} <= public
    assert {text for text, _ in generator.rewrites} & set(written)
    assert not [t for t in tickets[0] if t in "\n".join(generator.inputs)]
    assert CANARY not in neighbours.result.texts


def test_a_scoring_generator_sets_the_readability_threshold(tmp_path, tickets, decoder_dir):
    outputs = run(make_config(tmp_path, tickets, decoder_dir), embedder=HashEmbedder(DIM),
                  generator=Scoring())
    rows = [json.loads(r) for r in outputs.metrics.read_text().splitlines()]
    assert rows[0]["perplexity_threshold"] == pytest.approx(math.e ** 2)
    assert all(r["kept"] == r["selected"] for r in rows)  # every text at the threshold


def test_inversion_decoding_never_asks_the_generator_to_rewrite(tmp_path, tickets,
                                                               decoder_dir):
    generator = Scoring()
    generator.rewrite = None  # any call fails
    outputs = run(make_config(tmp_path, tickets, decoder_dir, decoding="inversion"),
                  embedder=HashEmbedder(DIM), generator=generator)
    rows = [json.loads(r) for r in outputs.metrics.read_text().splitlines()]
    assert rows[0]["perplexity_threshold"] != pytest.approx(math.e ** 2)  # its own LM's


def test_the_plan_counts_the_rewrites(tickets):
    from dpsynth.methods.eda import Eda

    private = ticket_dataset(tickets)
    params = {"iterations": 2, "n_parents": 3, "domain_size": 10, "n_output": 10,
              "n_public": 50, "calibration_size": 20, "rewrite_samples": 2}
    assert Eda.from_config(params).expected_generations(private) == {
        "generate": 50, "rewrite": (20 + 2 * 3 * 4 + 2 * 10) * 2}
    assert Eda.from_config({**params, "decoding": "inversion"}).expected_generations(
        private) == {"generate": 50}
