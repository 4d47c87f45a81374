"""DP decoding: the per-token exponential mechanism checked exactly on neighbouring batches,
its accounting against dp_accounting, the fixed-shape forward passes, the disjoint batches,
and the recipe's refusals."""

from __future__ import annotations

import contextlib
import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from dp_accounting import dp_event, pld, rdp

from dpsynth.backends.generators.context_lm import SLOT
from dpsynth.config import parse_config
from dpsynth.data import PrivateDataset
from dpsynth.errors import ConfigError, InputError
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import DisjointSequences, ExponentialSample
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.releases.decoding import (
    GRID,
    DecodingSetup,
    GroupScores,
    TextRequest,
    record_batches,
    row_widths,
)
from dpsynth.private.releases.decoding import batch_of as decoding_batch_of
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder, RecordingGenerator, ticket_texts

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def one_torch_thread():
    from tests.tiny_lm import one_torch_thread

    with one_torch_thread():
        yield


# -- the mechanism, exactly ------------------------------------------------------------------

def _scores(public: np.ndarray, contributions: np.ndarray, clip: float, b: int) -> np.ndarray:
    """u = p + Σ clip(v_i, -C, C) / B, as GroupScores computes it (without the grid)."""
    return public + np.clip(contributions, -clip, clip).sum(axis=0) / b


@pytest.mark.parametrize("clip,b,temperature", [(0.5, 4, 1.0), (2.0, 8, 0.7), (5.0, 2, 1.5)])
def test_one_record_more_moves_each_token_probability_within_e_to_the_epsilon(
        clip, b, temperature):
    """The formula, on synthetic vectors (this test's own `_scores` and
    `mechanism.probabilities`, which the release path does not call; the release's own
    scores are checked end to end by
    `test_one_record_more_moves_the_real_law_of_every_token_within_epsilon`): for random
    batches and records, and for adversarial records (+C on one token, −C on the others),
    every token's probability ratio between D and D' = D plus one record lies in
    [e^-ε, e^ε], and all the log-ratios of one pair of batches lie in one interval of width
    ε (bounded range), with ε = 2C/(B·T) as charged. The random adversarial records reach at
    least 0.495·ε (half the range each way, within 1%); with two tokens, one dominating, the
    one-sided ratio reaches ε itself (within a relative 1e-6): the charge is not loose."""
    mechanism = ExponentialSample(temperature, 2 * clip / b)
    eps = mechanism.epsilon
    assert eps == pytest.approx(2 * clip / (b * temperature))
    rng = np.random.default_rng(0)
    worst = 0.0
    for trial in range(400):
        vocab = int(rng.integers(2, 12))
        public = rng.normal(0, 3, vocab)
        batch = rng.normal(0, 3 * clip, (int(rng.integers(0, 2 * b)), vocab))
        if trial % 2:  # the adversarial record: all its weight on one token
            extra = np.full(vocab, -10 * clip)
            extra[rng.integers(vocab)] = 10 * clip
        else:
            extra = rng.normal(0, 3 * clip, vocab)
        p = mechanism.probabilities(_scores(public, batch, clip, b))
        q = mechanism.probabilities(_scores(public, np.vstack([batch, extra]), clip, b))
        ratios = np.log(q) - np.log(p)
        assert np.abs(ratios).max() <= eps + 1e-12
        assert ratios.max() - ratios.min() <= eps + 1e-12
        worst = max(worst, float(np.abs(ratios).max()))
    assert worst >= 0.99 * eps * 0.5  # an adversarial record reaches half the range each way
    # with two tokens and a dominating token the one-sided ratio approaches ε itself
    two = mechanism.probabilities(_scores(np.array([0.0, -50.0]), np.zeros((0, 2)), clip, b))
    up = np.array([[-clip, clip]])
    moved = mechanism.probabilities(_scores(np.array([0.0, -50.0]), up, clip, b))
    assert math.log(moved[1] / two[1]) == pytest.approx(eps, rel=1e-6)


def test_the_gumbel_max_draw_samples_the_exponential_mechanism():
    """The draw follows softmax(u / T): frequencies over 20,000 seeded draws within 4 standard
    errors of the exact probabilities."""
    mechanism = ExponentialSample(0.8, 0.1)
    scores = np.array([0.0, -0.5, 1.0, -np.inf, 0.3])
    noise = NoiseSource(3)
    draws = np.array([mechanism._release(scores, noise) for _ in range(20_000)])
    expected = mechanism.probabilities(scores)
    counts = np.bincount(draws, minlength=5) / len(draws)
    assert counts[3] == 0  # -inf: outside the public candidate set, never drawn
    assert np.all(np.abs(counts - expected) <= 4 * np.sqrt(expected * (1 - expected)
                                                           / len(draws)) + 1e-12)


@pytest.mark.parametrize("eps_token,tokens,delta", [(0.05, 64, 1e-5), (0.3, 48, 1e-6),
                                                    (1.0, 4, 1e-5)])
def test_the_decoding_charge_is_dp_accountings_composition_of_its_tokens(eps_token, tokens,
                                                                         delta):
    """One decoding release (any number of disjoint texts) spends what dp_accounting composes
    for `tokens` bounded-range draws: the smaller of the PLD of `tokens` ε-DP draws and the
    RDP bound of `tokens` ε²/8-zCDP draws, both computed here with dp_accounting itself."""
    step = ExponentialSample(1.0, eps_token)
    ledger = PrivacyLedger(epsilon=100.0, delta=delta)
    ledger.charge("decoding", DisjointSequences(step, tokens, "one").event,
                  mechanism="disjoint_sequences")
    by_pld = pld.privacy_loss_distribution.from_privacy_parameters(
        pld.common.DifferentialPrivacyParameters(eps_token, 0.0),
        value_discretization_interval=1e-4).self_compose(tokens).get_epsilon_for_delta(delta)
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_event.ZCDpEvent(tokens * eps_token**2 / 8))
    by_rdp = accountant.get_epsilon(delta)
    assert ledger.spent() == pytest.approx(min(by_pld, by_rdp), rel=1e-3)
    assert ledger.spent() <= tokens * eps_token + 1e-9  # never above basic composition


# -- the forward passes ----------------------------------------------------------------------

def _setup(**overrides) -> DecodingSetup:
    return DecodingSetup(**{"batch_size": 4, "clip": 0.7, "top_k": 20,
                            "max_example_tokens": 12, "forward_batch": 3, "max_tokens": 6,
                            "cached_rows": 256,
                            **overrides})


REQUEST = TextRequest(0, 0, "write a new text about billing",
                      f"here is a text about billing {SLOT} write a new text about billing")


class OneText:
    """One text's scores through `GroupScores`: a group of one."""

    def __init__(self, lm, setup, request, batch, widths=None) -> None:
        self.group = GroupScores(lm, setup, [request], [batch], widths)
        self._chunks = self.group._chunks

    def next_scores(self, drawn: list[int]):
        return self.group.next_scores([drawn])[0]


def _private_logp(scores: OneText) -> list[np.ndarray]:
    """Each record's log-probabilities after the prompt, in batch order."""
    return [row for state in scores._chunks for row in state.value[0][: state.owners.size]]


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_records_distribution_does_not_depend_on_its_companions(precision):
    """Fixed-shape forward passes: a record's log-probabilities are bit for bit the same
    whatever records share its chunk (longer, shorter, none; a chunk of rows all cut at
    max_example_tokens too), in either precision."""
    from tests.methods.fakes import tiny_context_lm

    lm = tiny_context_lm().at_precision(precision)
    texts = ticket_texts(12)[0]
    for target, groups in (
            ("refund invoice charge card fee",
             ([texts[3]], texts[4:6], [texts[7] * 5, texts[8]])),
            (texts[9] * 5, ([texts[7] * 5, texts[8] * 5], [texts[2]]))):
        alone = _private_logp(OneText(lm, _setup(), REQUEST, [target]))[0]
        for companions in groups:
            for at in range(len(companions) + 1):
                batch = [*companions[:at], target, *companions[at:]]
                assert np.array_equal(_private_logp(OneText(lm, _setup(), REQUEST,
                                                            batch))[at], alone)


@pytest.mark.parametrize("cached_rows", [1, 3])  # rows held: one chunk either way
def test_a_batch_past_cached_rows_is_replayed_to_the_same_scores_bit_for_bit(cached_rows):
    """A batch larger than its noisy count promised holds KV caches for `cached_rows` rows
    only; its other chunks are replayed at every token and give the very same scores, so
    its KV memory is bounded whatever the noise drew, at no change to the release."""
    from tests.methods.fakes import tiny_context_lm

    lm, texts = tiny_context_lm(), ticket_texts(20)[0][:10]
    held = OneText(lm, _setup(), REQUEST, texts)
    bounded = OneText(lm, _setup(cached_rows=cached_rows), REQUEST, texts)  # 1 chunk held
    assert [type(c).__name__ for c in bounded._chunks] == ["_State"] + ["_Replay"] * 3
    assert all(type(c).__name__ == "_State" for c in held._chunks)
    drawn: list[int] = []
    for _ in range(_setup().max_tokens):
        (ids, u), (ids2, u2) = held.next_scores(drawn), bounded.next_scores(drawn)
        assert np.array_equal(ids, ids2) and np.array_equal(u, u2)
        drawn.append(int(ids[np.argmax(u)]))


@pytest.mark.parametrize("cached_rows", [256, 2])  # every row held; most rows replayed
def test_a_text_decoded_with_others_scores_as_it_would_alone_bit_for_bit(cached_rows):
    """Texts decoded together share forward passes (their rows mixed in fixed-shape chunks,
    their public rows in one pass, all at the row lengths of the run's prompts): each text's
    scores are bit for bit those it gets decoded alone, with texts of another label beside it,
    while another text of the group has stopped (its rows fed the pad token, then dropped),
    and whether its rows hold KV caches or are replayed."""
    from tests.methods.fakes import tiny_context_lm

    lm, setup = tiny_context_lm(), _setup(cached_rows=cached_rows, texts_together=4)
    texts = ticket_texts(20)[0]
    batches = [texts[:3], texts[3:6], texts[7:9], texts[10:13]]
    other = TextRequest(1, 0, "write a new text about a password reset of an account",
                        f"here is a text about logins {SLOT} now write a longer new text "
                        "about a password reset of an account")
    requests = [REQUEST, other, REQUEST, other]
    widths = row_widths(lm, setup, requests)
    assert widths[0] > row_widths(lm, setup, [REQUEST])[0]  # the other label's is longer
    group = GroupScores(lm, setup, requests, batches, widths)
    alone = [OneText(lm, setup, r, b, widths) for r, b in zip(requests, batches, strict=True)]
    # the public rows share one pass, and texts 2 and 3 share a chunk
    assert len(group._chunks) + 1 < sum(len(a._chunks) + 1 for a in alone)
    assert any(len(set(c.owners)) > 1 for c in group._chunks)
    drawn: list[list[int]] = [[], [], [], []]
    for round_ in range(setup.max_tokens):
        together = group.next_scores(drawn)
        for text, (scores, one) in enumerate(zip(together, alone, strict=True)):
            if text == 1 and round_ == 3:  # text 1 ended its turn last round
                assert scores is None
                continue
            if text == 1 and round_ > 3:
                continue
            expected = one.next_scores(drawn[text])
            assert np.array_equal(scores[0], expected[0])
            assert np.array_equal(scores[1], expected[1])
            drawn[text].append(lm.eos_id if (text, round_) == (1, 2)
                               else int(scores[0][np.argmax(scores[1])]))
    assert len(drawn[1]) == 3 and len(drawn[0]) == setup.max_tokens
    if cached_rows == 256:  # the chunk of text 1's rows alone was dropped once it stopped
        assert [c.value is None for c in group._chunks] == [False, True, False, False]


def test_one_record_more_moves_every_token_score_within_an_interval_of_2c_over_b():
    """Along one token path, the scores of D's batch and of D's batch plus one record differ,
    on every candidate, by amounts within one interval of width 2C/B (the charged range)."""
    from tests.methods.fakes import tiny_context_lm

    lm, setup = tiny_context_lm(), _setup()
    texts = ticket_texts(20)[0]
    for extra in (texts[9], "password " * 40, texts[2]):
        d, d2 = (OneText(lm, setup, REQUEST, texts[:5]),
                 OneText(lm, setup, REQUEST, [*texts[:5], extra]))
        drawn: list[int] = []
        for _ in range(setup.max_tokens):
            (ids, u), (ids2, u2) = d.next_scores(drawn), d2.next_scores(drawn)
            assert np.array_equal(ids, ids2)  # the candidates are public
            moved = u2 - u
            assert moved.max() - moved.min() <= 2 * setup.clip / setup.batch_size + 1e-9
            assert np.abs(moved).max() <= setup.clip / setup.batch_size + GRID
            drawn.append(int(ids[np.argmax(u)]))


def _log_law(scores: np.ndarray, temperature: float) -> np.ndarray:
    """log softmax(u / T): the law the release's Gumbel-max draw samples."""
    z = scores / temperature
    return z - (z.max() + np.log(np.exp(z - z.max()).sum()))


@pytest.mark.parametrize("clip,temperature,tight", [
    (2.0**-10, 0.01, True),  # C far below every shift: each record's term saturates at ±C
    (0.7, 1.0, False)])
def test_one_record_more_moves_the_real_law_of_every_token_within_epsilon(clip, temperature,
                                                                         tight):
    """End to end on the release's own code: D and D' = D plus one record go through the real
    `record_batches` (digest buckets) and `GroupScores` (fixed-shape forwards, the grid, the
    clip, the top-k+ set) of the tiny GPT-2; along several token paths the law
    softmax(u / T) of every candidate moves by at most ε_token = 2C/(B·T) in log-probability,
    and where every term saturates and the law sits on one token (small T), the added record
    moves some token by at least 0.9·ε_token: the per-token charge is the real worst case."""
    from tests.methods.fakes import tiny_context_lm

    lm, setup = tiny_context_lm(), _setup(clip=clip, max_tokens=5)
    eps = 2 * clip / (setup.batch_size * temperature)
    texts, labels = ticket_texts(40)
    names = sorted(set(labels))
    requests = [TextRequest(g, j, f"write a new text about {y}",
                            f"here is a text about {y} {SLOT} write a new text about {y}")
                for g, y in enumerate(names) for j in range(2)]
    buckets, seed = [3] * len(names), 5
    target = requests[0]  # bucket 0 of the first label
    extra = next(x for x in (f"password reset locked login {i} " * 6 for i in range(200))
                 if decoding_batch_of(x, buckets[0], seed) == 0)

    def batches(t, y):
        return record_batches(PrivateDataset(t, labels=y, label_names=names), requests,
                              buckets, seed)

    d, d2 = batches(texts, labels), batches([*texts, extra], [*labels, names[0]])
    moved = [i for i, (a, b) in enumerate(zip(d, d2, strict=True)) if a != b]
    assert moved == [0] and d2[0] == [*d[0], extra]  # one more record, in one batch only
    rng = np.random.default_rng(0)
    worst = 0.0
    for path in range(4):  # greedy, sampled from D's law, sampled from D''s law, random
        a = OneText(lm, setup, target, d[0])
        b = OneText(lm, setup, target, d2[0])
        drawn: list[int] = []
        for _ in range(setup.max_tokens):
            step_a, step_b = a.next_scores(drawn), b.next_scores(drawn)
            if step_a is None:
                break
            (ids, u), (ids2, u2) = step_a, step_b
            assert np.array_equal(ids, ids2)  # the candidates are public
            law, law2 = _log_law(u, temperature), _log_law(u2, temperature)
            ratio = law2 - law
            assert np.abs(ratio).max() <= eps * (1 + 1e-9) + 1e-12
            worst = max(worst, float(np.abs(ratio).max()))
            pick = [int(np.argmax(u)), int(rng.choice(ids.size, p=np.exp(law))),
                    int(rng.choice(ids.size, p=np.exp(law2))), int(rng.integers(ids.size))]
            drawn.append(int(ids[pick[path]]))
    if tight:
        assert worst >= 0.9 * eps


def test_a_nan_shift_counts_as_no_shift():
    """A record whose log-probabilities are NaN (an overflowed forward) moves no score: the
    NaN becomes 0 before the clip (a rule that does not look at the data)."""
    from tests.methods.fakes import tiny_context_lm

    lm, setup = tiny_context_lm(), _setup()
    texts = ticket_texts(8)[0]
    without = OneText(lm, setup, REQUEST, texts[:2]).next_scores([])
    scores = OneText(lm, setup, REQUEST, [*texts[:2], texts[5]])
    logp, mask, cache = scores._chunks[0].value
    logp = logp.copy()
    logp[2] = np.nan
    scores._chunks[0].value = (logp, mask, cache)
    ids, u = scores.next_scores([])
    assert np.all(np.isfinite(u))
    assert np.array_equal(ids, without[0]) and np.array_equal(u, without[1])


def test_long_records_are_cut_by_the_tokenizer_without_a_length_warning():
    """transformers warns (with the token count) about a text longer than the model's
    maximum; a private record is cut by the tokenizer itself, so nothing is logged, and the
    cut keeps the record's first tokens."""
    import copy
    import logging

    from transformers.utils import logging as hf_logging

    from tests.methods.fakes import tiny_context_lm

    lm = copy.deepcopy(tiny_context_lm())
    lm.tokenizer.model_max_length = 8
    lm.tokenizer.deprecation_warnings = {}  # it warns once per tokenizer: maybe earlier
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # whatever an earlier test left it at
    record = "password reset locked login account " * 20
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        cut = lm.encode(record, 12)
        assert not records
        assert cut == lm.encode(record)[:12]
        assert records  # the uncut encoding does warn: the check above can see one
    finally:
        logger.removeHandler(handler)
        hf_logging.set_verbosity(verbosity)


def test_each_record_joins_one_batch_by_its_own_text():
    """Adding a record adds it to at most one batch and moves no other record."""
    texts, labels = ticket_texts(60)
    requests = [TextRequest(g, j, "p", SLOT) for g in range(4) for j in range(3)]
    buckets = [5, 5, 5, 5]

    def batches(t, y):
        return record_batches(PrivateDataset(t, labels=y, label_names=sorted(set(labels))),
                              requests, buckets, seed=3)

    before = batches(texts, labels)
    assert sum(map(len, before)) < len(texts)  # buckets 3 and 4 of each label are unused
    for new, label in (("a brand new billing text", "billing"), (texts[5], "account")):
        after = batches([new, *texts], [label, *labels])
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        assert len(changed) <= 1
        for i in changed:
            assert sorted(after[i]) == sorted([*before[i], new])


# -- the recipe ------------------------------------------------------------------------------

PARAMS = {"n_output": 8, "batch_size": 4, "max_tokens": 6, "max_example_tokens": 16,
          "forward_batch": 4}


def _config(tmp_path, data=None, backends=None, **params):
    texts, labels = ticket_texts(120)
    if not (tmp_path / "private.csv").exists():  # written once: a resume reads the same file
        pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                              index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label",
                    "labels": sorted(set(labels)), **(data or {})},
           "budget": {"epsilon": 2.0}, "seed": 1,
           "recipe": {"name": "dp_decoding", "params": {**PARAMS, **params}},
           "output": {"dir": str(tmp_path / "out")}}
    if backends:
        raw["backends"] = backends
    return parse_config(raw, base_dir=tmp_path)


def _nothing_charged(tmp_path) -> bool:
    journal = tmp_path / "out" / "checkpoints" / "releases.jsonl"
    return not journal.exists() or '"charge"' not in journal.read_text()


class RemoteGenerator(RecordingGenerator):
    is_remote = True


def test_a_remote_generator_is_refused_before_any_release(tmp_path):
    with pytest.raises(ConfigError, match="local generator"):
        run(_config(tmp_path), embedder=HashEmbedder(), generator=RemoteGenerator())
    journal = tmp_path / "out" / "checkpoints" / "releases.jsonl"
    assert not journal.exists() or '"charge"' not in journal.read_text()


class OffCpuGenerator(RecordingGenerator):
    """A local generator whose model sits on another device (the meta device stands in for
    cuda here: both fail at the release's `.numpy()`)."""

    def context_lm(self):
        import copy
        import dataclasses

        lm = super().context_lm()
        return dataclasses.replace(lm, model=copy.deepcopy(lm.model).to("meta"))


def test_a_model_off_the_cpu_is_refused_before_any_release(tmp_path):
    with pytest.raises(ConfigError, match="on the CPU.*meta"):
        run(_config(tmp_path), embedder=HashEmbedder(), generator=OffCpuGenerator())
    assert _nothing_charged(tmp_path)


def test_a_label_name_holding_the_example_slot_is_refused_before_any_release(tmp_path):
    config = _config(tmp_path, data={"label_names": {"billing": "bills like {example}"}})
    with pytest.raises(ConfigError, match=r"example slot 3 times, not once"):
        run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    assert _nothing_charged(tmp_path)


def test_rows_longer_than_the_models_context_are_refused_before_any_release(tmp_path):
    """The tiny GPT-2 has 512 positions: 480 example tokens + the prompt + 40 tokens do not
    fit."""
    config = _config(tmp_path, max_example_tokens=480, max_tokens=40)
    with pytest.raises(ConfigError, match="512 positions"):
        run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    assert _nothing_charged(tmp_path)


@pytest.mark.parametrize("generator,match", [
    ({"name": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}, "remote"),
    ({"name": "hf", "model": "some-folder", "device": "cuda"}, "device is cuda")])
def test_the_plan_refuses_a_remote_or_off_cpu_generator(tmp_path, generator, match):
    from dpsynth.preflight import make_plan

    with pytest.raises(ConfigError, match=match):
        make_plan(_config(tmp_path, backends={"generator": generator}))


def test_the_plan_derives_the_clip_from_epsilon_and_charges_max_tokens_draws(tmp_path):
    outputs = run(_config(tmp_path), embedder=HashEmbedder(), generator=RecordingGenerator())
    privacy = json.loads(outputs.privacy.read_text())
    decoding = [c for c in privacy["charges"] if c["stage"] == "decoding"]
    assert len(decoding) == 1  # one release for all texts: parallel over disjoint batches
    event = decoding[0]["event"]
    assert event["count"] == PARAMS["max_tokens"]
    metrics = json.loads(outputs.metrics.read_text().splitlines()[-1])
    eps_token = event["event"]["epsilon"]
    assert metrics["clip"] == pytest.approx(eps_token * PARAMS["batch_size"] / 2)
    assert privacy["spent"]["epsilon"] == pytest.approx(2.0, abs=0.02)
    assert metrics["texts_decoded"] == PARAMS["n_output"]
    assert 0 < metrics["synthetic"] <= PARAMS["n_output"]


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_lm_decodes_in_its_precision_on_a_copy(tmp_path, monkeypatch, precision):
    """`precision` casts a copy of the LM for the decoding: the generator's own model, which
    other runs in the process may share, keeps its float32 weights."""
    from dpsynth.private.releases import decoding

    generator = RecordingGenerator()
    seen = []
    real = decoding.GroupScores.__init__

    def recording(self, lm, *args):
        seen.append(next(lm.model.parameters()).dtype)
        real(self, lm, *args)

    monkeypatch.setattr(decoding.GroupScores, "__init__", recording)
    outputs = run(_config(tmp_path, precision=precision), embedder=HashEmbedder(),
                  generator=generator)
    assert seen and set(seen) == {getattr(torch, precision)}
    assert next(generator.context_lm().model.parameters()).dtype == torch.float32
    metrics = [json.loads(x) for x in outputs.metrics.read_text().splitlines()]
    assert any(m.get("precision") == precision for m in metrics)


def test_label_fraction_zero_is_refused():
    """The DP counts size the batches; without them a batch would hold N_y / n_y records."""
    from dpsynth.methods.dp_decoding import DpDecoding

    with pytest.raises(ConfigError, match="label_fraction"):
        DpDecoding.from_config({"label_fraction": 0})


def test_unlabelled_data_sizes_its_batches_from_one_dp_record_count(tmp_path, monkeypatch):
    """Without labels the label stage releases one cell (the DP record count), and the
    batches hold about B records, not N / n_output."""
    from dpsynth.private.releases import decoding

    seen = []
    real = decoding.record_batches

    def spy(*args, **kwargs):
        seen.extend(real(*args, **kwargs))
        return seen[-len(args[1]):]

    monkeypatch.setattr(decoding, "record_batches", spy)
    texts = ticket_texts(120)[0]
    pd.DataFrame({"text": texts}).to_csv(tmp_path / "private.csv", index=False)
    config = parse_config({"data": {"path": "private.csv"}, "budget": {"epsilon": 2.0},
                           "seed": 1, "recipe": {"name": "dp_decoding", "params": {
                               **PARAMS, "n_output": 2, "max_tokens": 2}},
                           "output": {"dir": str(tmp_path / "out")}}, base_dir=tmp_path)
    outputs = run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    privacy = json.loads(outputs.privacy.read_text())
    assert [c["stage"] for c in privacy["charges"]] == ["label_histogram", "decoding"]
    assert len(seen) == 2
    assert all(len(batch) <= 3 * PARAMS["batch_size"] for batch in seen)  # not 60 each


def test_prompts_must_hold_the_example_slot_once():
    from dpsynth.methods.dp_decoding import DpDecoding

    with pytest.raises(ConfigError, match="prompt"):
        DpDecoding.from_config({"prompt": "no example here"})
    with pytest.raises(ConfigError, match="public_prompt"):
        DpDecoding.from_config({"public_prompt": "with {example}"})


def test_decoded_texts_are_tidied_into_one_output_cell():
    """A byte-level LM can draw a lone \\r, control bytes, or half a UTF-8 character."""
    from dpsynth.methods.dp_decoding import tidy

    assert tidy(" a\rb\r\nc\x07\x19d\ufffde\t f ") == "a\nb\ncde\t f"


def test_finish_continues_a_reply_to_a_sentence_end_within_its_token_bound():
    from dpsynth.backends.generators.context_lm import SENTENCE_END
    from tests.methods.fakes import tiny_context_lm

    lm = tiny_context_lm()
    start = lm.encode("billing refund")
    for seed in range(5):
        out = lm.finish("Write a ticket.", start, 12, 20, 1.0, np.random.default_rng(seed))
        assert out[: len(start)] == start and len(start) < len(out) <= len(start) + 12
        done = out[-1] == lm.eos_id or SENTENCE_END.search(lm.decode(out))
        assert done or len(out) == len(start) + 12
        again = lm.finish("Write a ticket.", start, 12, 20, 1.0, np.random.default_rng(seed))
        assert again == out  # a public seed fixes the continuation
    assert lm.finish("Write a ticket.", start, 0, 20, 1.0, np.random.default_rng(0)) == start
    ended = lm.encode("billing refund.")
    assert lm.finish("Write a ticket.", ended, 12, 20, 1.0, np.random.default_rng(0)) == ended


def test_texts_cut_at_max_tokens_are_finished_from_their_public_prompt_alone(tmp_path,
                                                                           monkeypatch):
    """The continuation is post-processing: it sees each text's public prompt and released
    tokens, never a record, and charges nothing."""
    from dpsynth.backends.generators.context_lm import ContextLM

    calls = []

    def finish(self, instruction, ids, max_new_tokens, top_k, temperature, rng):
        calls.append((instruction, list(ids), max_new_tokens))
        return [*ids, *self.encode(" done.")]

    monkeypatch.setattr(ContextLM, "finish", finish)
    outputs = run(_config(tmp_path, finish_tokens=7), embedder=HashEmbedder(),
                  generator=RecordingGenerator())
    metrics = json.loads(outputs.metrics.read_text().splitlines()[-1])
    assert len(calls) == PARAMS["n_output"] - metrics["ended_before_max_tokens"] > 0
    private = set(ticket_texts(120)[0])
    for instruction, ids, max_new in calls:
        assert instruction.startswith("Write a new short text about") and max_new == 7
        assert SLOT not in instruction and not any(x in instruction for x in private)
        assert len(ids) == PARAMS["max_tokens"]
    texts = pd.read_csv(outputs.synthetic)["text"]
    assert sum(t.endswith("done.") for t in texts) >= 1
    assert metrics["ending_mid_sentence"] <= metrics["ended_before_max_tokens"]
    privacy = json.loads(outputs.privacy.read_text())
    assert [c["stage"] for c in privacy["charges"]] == ["label_histogram", "decoding"]


class _Killed(Exception):
    pass


@contextlib.contextmanager
def _killed_after_three_parts(monkeypatch):
    """The run inside dies right after the journal writes its third text."""
    from dpsynth.privacy.journal import Journal

    write = Journal.append_part

    def write_then_die(journal, index, part, value, draws, layout):
        write(journal, index, part, value, draws, layout)
        if part == 2:
            raise _Killed

    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(Journal, "append_part", write_then_die)
        yield


def test_a_run_killed_while_decoding_resumes_after_the_texts_journaled(tmp_path, monkeypatch):
    """Each text is journaled as it is drawn: the resumed run keeps the texts written down,
    builds no batch for them, decodes only the rest, and charges nothing again."""
    from dpsynth.private.releases import decoding

    with _killed_after_three_parts(monkeypatch):
        run(_config(tmp_path), embedder=HashEmbedder(), generator=RecordingGenerator())
    lines = [json.loads(x) for x in
             (tmp_path / "out" / "checkpoints" / "releases.jsonl").read_text().splitlines()]
    written = [x["part"]["value"] for x in lines if "part" in x]
    assert len(written) == 3 and not any("output" in x and x["output"] == 1 for x in lines)

    with pytest.raises(InputError, match="another layout of the data"):  # records move
        run(_config(tmp_path, n_output=12), embedder=HashEmbedder(),
            generator=RecordingGenerator())
    data = tmp_path / "private.csv"
    kept = data.stat()
    edited = pd.read_csv(data)
    edited.loc[0, "text"] = "an edited record moves to another batch"
    edited.to_csv(data, index=False)
    with pytest.raises(InputError, match="or the data file changed"):
        run(_config(tmp_path), embedder=HashEmbedder(), generator=RecordingGenerator())
    pd.read_csv(data).assign(text=lambda f: f["text"].where(f.index > 0, ticket_texts(120)[0][0])
                             ).to_csv(data, index=False)
    os.utime(data, ns=(kept.st_atime_ns, kept.st_mtime_ns))  # the very file it started from
    built = []
    monkeypatch.setattr(decoding, "GroupScores",
                        lambda *args: built.extend(args[2]) or GroupScores(*args))
    outputs = run(_config(tmp_path), embedder=HashEmbedder(), generator=RecordingGenerator())
    assert len(built) == PARAMS["n_output"] - 3  # texts given a batch again: none journaled
    lines = [json.loads(x) for x in
             (tmp_path / "out" / "checkpoints" / "releases.jsonl").read_text().splitlines()]
    answer = next(x["value"] for x in lines if x.get("output") == 1)
    assert answer[:3] == written and len(answer) == PARAMS["n_output"]
    privacy = json.loads(outputs.privacy.read_text())
    assert [c["stage"] for c in privacy["charges"]] == ["label_histogram", "decoding"]


def test_a_resume_on_an_in_memory_table_is_refused_not_continued(tmp_path, monkeypatch):
    """An in-memory table (a DataFrame or Dataset handed to `dpsynth.synthesize`) has no
    identity on disk that a resume could be checked against: continuing its journaled texts
    on the table the resume is given would let an edited record feed an old text and a new
    one under the one charge, as an edited file would. The resume is refused, as after a
    changed file; the texts already journaled are never drawn again."""
    from dpsynth.data.load import IN_MEMORY
    from dpsynth.run import Run

    texts, labels = ticket_texts(120)
    frame = pd.DataFrame({"text": texts, "label": labels})
    config = _config(tmp_path, data={"path": IN_MEMORY})
    with _killed_after_three_parts(monkeypatch):
        Run(config, frame, embedder=HashEmbedder(), generator=RecordingGenerator()).execute()
    edited = frame.copy()
    edited.loc[0, "text"] = "an edited record moves to another batch"
    for table in (edited, frame):  # the same table cannot be told from an edited one
        with pytest.raises(InputError, match="in-memory table"):
            Run(config, table, embedder=HashEmbedder(),
                generator=RecordingGenerator()).execute()


def test_copies_of_a_text_are_run_once_and_counted_once_per_record():
    """Copies of one text all join one batch (their digest is one), so a batch's memory and
    passes followed how often the private set repeats a text, after the release's charge: a
    text held 60 times ran 20 chunks of KV caches where one would do. Each distinct row now
    runs once, its clipped shift counted once per copy: the same scores as the copies' sum."""
    from tests.methods.fakes import tiny_context_lm

    lm, setup = tiny_context_lm(), _setup()
    a, b = "refund invoice charge card fee", ticket_texts(4)[0][2]

    def shifts(text):  # one record's clipped shift on the grid, from a batch of it alone
        ids, u = OneText(lm, setup, REQUEST, [text]).next_scores([])
        ids0, u0 = OneText(lm, setup, REQUEST, []).next_scores([])
        assert np.array_equal(ids, ids0)
        return ids, np.rint((u - u0) * setup.batch_size / GRID).astype(np.int64), u0

    ids, shift_a, public = shifts(a)
    shift_b = shifts(b)[1]
    scores = OneText(lm, setup, REQUEST, [a] * 30 + [b] + [a] * 30)
    assert len(scores._chunks) == 1  # two distinct rows, in one chunk of forward_batch 3
    got_ids, u = scores.next_scores([])
    assert np.array_equal(got_ids, ids)
    assert np.array_equal(u, public + (60 * shift_a + shift_b) * GRID / setup.batch_size)
