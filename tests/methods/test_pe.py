"""pe's selection: the last draw holds each text once, in proportion to the noisy votes; its
labels follow a DP label histogram by default, and the private votes with `labels_from:
votes`."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from dpsynth.methods.pe import PeParams, PrivateEvolution, _distinct_quotas, _weighted_order
from dpsynth.run import run
from tests.methods.fakes import VOCAB, HashEmbedder, RecordingGenerator, ticket_dataset
from tests.methods.test_recipes import make_config


def test_weighted_order_draws_in_proportion_and_puts_unvoted_last():
    rng = np.random.default_rng(0)
    weights = np.array([0.0, 5.0, 1.0, 0.0, 2.0])
    orders = np.array([_weighted_order(weights, rng) for _ in range(6000)])
    first = np.bincount(orders[:, 0], minlength=5) / len(orders)
    assert first == pytest.approx([0, 5 / 8, 1 / 8, 0, 2 / 8], abs=0.02)
    assert all(set(o[3:]) == {0, 3} for o in orders)  # no votes: after every voted item
    assert all(sorted(o) == list(range(5)) for o in orders)  # a permutation, no repeats
    assert {tuple(o[3:]) for o in orders} == {(0, 3), (3, 0)}  # unvoted ones shuffled


def test_a_label_short_of_candidates_passes_its_quota_on_instead_of_repeating():
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    quotas = _distinct_quotas(np.array([40, 30, 20, 10]), np.array([5, 60, 0, 100]), probs)
    # 55 short: 41 and 14 offered by probs 0.3 : 0.1, the first capped at 60, 11 more to the last
    assert list(quotas) == [5, 60, 0, 35]
    np.testing.assert_array_equal(  # too few candidates in all: fewer outputs, no repeat
        _distinct_quotas(np.array([5, 5]), np.array([2, 3]), np.array([0.5, 0.5])), [2, 3])


class DistinctGenerator(RecordingGenerator):
    """Every output a new text, so a repeated output can only come from the selection."""

    def generate(self, conditions):
        self.calls += 1
        return [f"{c.label} {' '.join(self._text(c, ('g', self.calls, i)).split()[:6])} "
                f"g{self.calls}x{i}" for i, c in enumerate(conditions)]

    def rewrite(self, texts, conditions, strength=0.5):
        self.calls += 1
        return [f"{t.split()[0]} {' '.join(self._text(c, ('r', t)).split()[:6])} "
                f"r{self.calls}x{i}" for i, (t, c) in enumerate(zip(texts, conditions,
                                                                     strict=True))]


def test_the_output_holds_each_selected_text_once(tmp_path, tickets):
    config = make_config(tmp_path, tickets, "pe", n_output=24, epsilon=0.5)
    synthetic = pd.read_csv(run(config, embedder=HashEmbedder(),
                                generator=DistinctGenerator()).synthetic)
    assert len(synthetic) == 24
    assert synthetic["text"].is_unique  # drawn with replacement, a few texts would repeat


def test_labels_follow_a_dp_label_histogram_by_default(tmp_path, tickets):
    private = ticket_dataset(tickets)
    default = PrivateEvolution.from_config({}).budget_plan(private, 2.0, 1e-4)
    assert default.stage("label_histogram").spec.fraction == PeParams().label_fraction > 0
    uniform = PrivateEvolution.from_config({"label_fraction": 0}).budget_plan(private, 2.0, 1e-4)
    assert [s.spec.name for s in uniform.stages] == ["length_histogram", "voting"]
    config = make_config(tmp_path, tickets, "pe", label_fraction=PeParams().label_fraction)
    outputs = run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    assert (outputs.privacy.read_text().count('"label_histogram"')) >= 1


class MisreadingGenerator(RecordingGenerator):
    """Misreads every label it is asked for as the next one: its conditioning steers, but
    to the wrong place, as a pool retrieving by a label's name may."""

    def generate(self, conditions):
        return super().generate(self._misread(conditions))

    def rewrite(self, texts, conditions, strength=0.5):
        return super().rewrite(texts, self._misread(conditions), strength)

    def fill(self, masked_texts, conditions):
        return super().fill(masked_texts, self._misread(conditions))

    @staticmethod
    def _misread(conditions):
        labels = sorted(VOCAB)
        return [dataclasses.replace(c, label=labels[(labels.index(c.label) + 1) % len(labels)])
                for c in conditions]


def _agreement(synthetic: pd.DataFrame) -> float:
    """The share of samples whose label's words are the most frequent in their text."""
    def words_of(text):
        counts = {y: sum(w in VOCAB[y] for w in text.split()) for y in VOCAB}
        return max(counts, key=counts.get)
    return float(np.mean([words_of(t) == y for t, y in zip(synthetic["text"],
                                                           synthetic["label"], strict=True)]))


@pytest.mark.parametrize("recipe,size", [("pe", {"n_output": 16, "length_fraction": 0.0}),
                                         ("dpga", {})])  # pe: all ε but labels' on the votes
def test_labels_from_votes_follow_the_private_records_not_the_generator(tmp_path, tickets,
                                                                        recipe, size):
    """With a generator that misreads labels, labels as generated disagree with the text;
    taken from the votes, they agree with the words of the records that voted."""
    agreement = {}
    for source in ("generation", "votes"):
        config = make_config(tmp_path, tickets, recipe, out=source, epsilon=8.0,
                             noise="seeded_not_private", labels_from=source, **size)
        outputs = run(config, embedder=HashEmbedder(), generator=MisreadingGenerator())
        agreement[source] = _agreement(pd.read_csv(outputs.synthetic))
    assert agreement["generation"] < 0.2 and agreement["votes"] > 0.75  # 12 or 16 samples


def test_the_executors_search_finds_every_vote(tmp_path, tickets, monkeypatch):
    """`backends.executor.search` reaches the voters: every vote of the run searches with it."""
    from dpsynth.backends.config import ExecutorConfig
    from dpsynth.private.engine import nearest

    used, searcher = [], nearest.searcher
    monkeypatch.setattr(nearest, "searcher", lambda c, s: (used.append(s), searcher(c, s))[1])
    config = make_config(tmp_path, tickets, "pe", n_output=24)
    config = config.model_copy(update={"backends": config.backends.model_copy(
        update={"executor": ExecutorConfig(search="hnsw")})})
    assert len(pd.read_csv(run(config, embedder=HashEmbedder(),
                               generator=DistinctGenerator()).synthetic)) == 24
    assert used and set(used) == {"hnsw"}


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_the_last_vote_chooses_among_twice_the_output(tmp_path, tickets, iterations):
    """Drawn without replacement, N outputs from N candidates would take them all and the
    last vote would change nothing (issue 41's wasted last vote): it chooses among 2N, or
    among N rewrites and their distinct parents (drawn with replacement, some repeat)."""
    import json

    config = make_config(tmp_path, tickets, "pe", n_output=16, iterations=iterations)
    outputs = run(config, embedder=HashEmbedder(), generator=DistinctGenerator())
    rows = [json.loads(line) for line in outputs.metrics.read_text().splitlines()]
    last = [r for r in rows if "population" in r][-1]
    assert last["population"] == 32 if iterations == 1 else 16 < last["population"] <= 32
    assert len(pd.read_csv(outputs.synthetic)) == 16


def test_the_last_votes_answer_decides_the_output(tmp_path, tickets, monkeypatch):
    """Two runs that differ only in the last vote's noisy answer give different outputs."""
    from dpsynth.privacy.ledger import PrivacyLedger

    release = PrivacyLedger.release
    outputs = {}
    for favoured in ("first", "second"):
        calls = []

        def answer(self, stage, mechanism, values, noise, favoured=favoured, calls=calls):
            result = release(self, stage, mechanism, values, noise)
            if stage == "voting":
                calls.append(1)
                if len(calls) == 2:  # the last vote: all weight on one half
                    result = np.zeros_like(result)
                    half = len(result) // 2
                    result[:half] = 100.0 if favoured == "first" else 0.0
                    result[half:] = 0.0 if favoured == "first" else 100.0
            return result

        monkeypatch.setattr(PrivacyLedger, "release", answer)
        config = make_config(tmp_path, tickets, "pe", out=favoured, n_output=16, iterations=2,
                             label_fraction=0, labels_from="generation", seed=3,
                             noise="seeded_not_private")  # the first vote is the same
        run_outputs = run(config, embedder=HashEmbedder(), generator=DistinctGenerator())
        outputs[favoured] = set(pd.read_csv(run_outputs.synthetic)["text"])
    assert len(outputs["first"] & outputs["second"]) <= 8  # of 16: the last vote chose
