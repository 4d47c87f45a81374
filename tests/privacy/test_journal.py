"""The release journal: write-ahead, torn-line safe, and replayed release by release."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpsynth.errors import InputError
from dpsynth.privacy import Gaussian, Laplace
from dpsynth.privacy.journal import Journal, JournalHeader, decode, encode
from dpsynth.privacy.ledger import NOT_DRAWN, PrivacyLedger
from dpsynth.privacy.mechanisms import DisjointSequences, ExponentialSample
from dpsynth.privacy.noise import NoiseSource

HEADER = JournalHeader(2.0, 1e-5, 11, "cryptographic", "record")


def _journaled_ledger(path):
    journal = Journal.open(path, HEADER)
    journal.close()  # these tests reopen the folder in one process
    ledger = PrivacyLedger(2.0, 1e-5, charges=[r.charge for r in journal.releases])
    ledger.on_charge, ledger.on_answer = journal.append_charge, journal.append_output
    ledger.on_part = journal.append_part
    return journal, ledger


def test_answers_round_trip_through_json():
    values = [np.array([1.5, -2.0]), np.array([[1, 2]], dtype=np.int64), [np.array([3.0]), 4],
              None, 7, 0.25, [1, 2]]
    for value in values:
        back = decode(json.loads(json.dumps(encode(value))))
        if isinstance(value, np.ndarray):
            assert back.dtype == value.dtype
            np.testing.assert_array_equal(back, value)
        elif isinstance(value, list) and isinstance(value[0], np.ndarray):
            np.testing.assert_array_equal(back[0], value[0])
            assert back[1] == 4
        else:
            assert back == value


def test_a_restart_gets_each_recorded_answer_back_without_charging_again(tmp_path):
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    first = ledger.release("hist", Laplace(2.0), [5, 9], NoiseSource())
    ledger.charge("step", Gaussian(5.0).event)  # a charge whose noise another library draws
    journal, restarted = _journaled_ledger(path)
    assert [r.output is NOT_DRAWN for r in journal.releases] == [False, True]
    assert restarted.spent() == pytest.approx(ledger.spent())
    restarted.replay(journal.releases)
    again = restarted.release("hist", Laplace(2.0), [5, 9], NoiseSource())
    np.testing.assert_array_equal(again, first)  # the released answer, not a new draw
    restarted.charge("step", Gaussian(5.0).event)
    assert len(restarted.charges) == 2
    assert len(_journaled_ledger(path)[0].releases) == 2  # nothing recorded twice


def test_a_run_that_asks_for_something_else_keeps_every_recorded_charge(tmp_path, caplog):
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    ledger.release("hist", Laplace(2.0), [5, 9], NoiseSource())
    ledger.release("hist", Laplace(2.0), [5, 9], NoiseSource())
    journal, restarted = _journaled_ledger(path)
    restarted.replay(journal.releases)
    with caplog.at_level("WARNING"):
        restarted.release("other", Laplace(4.0), [1], NoiseSource())
    assert "stay charged" in caplog.text
    assert [c.stage for c in restarted.charges] == ["hist", "hist", "other"]


def test_the_next_replayed_release_costs_nothing_more(tmp_path):
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    ledger.release("hist", Laplace(1.0), [1], NoiseSource())
    journal, restarted = _journaled_ledger(path)
    restarted.replay(journal.releases)
    assert restarted.would_spend(Laplace(1.0).event) == pytest.approx(restarted.spent())
    assert restarted.would_spend(Laplace(2.0).event) > restarted.spent()


def test_a_torn_last_line_is_dropped_and_appending_goes_on(tmp_path):
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    ledger.release("hist", Laplace(2.0), [5], NoiseSource())
    with path.open("a") as handle:
        handle.write('{"charge": {"stage": "to')  # the process died mid-write
    journal, restarted = _journaled_ledger(path)
    assert len(journal.releases) == 1
    restarted.release("more", Laplace(2.0), [1], NoiseSource())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [next(iter(e)) for e in lines] == ["header", "charge", "output", "charge", "output"]


def test_a_corrupt_line_inside_the_journal_is_refused(tmp_path):
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    ledger.release("hist", Laplace(2.0), [5], NoiseSource())
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(InputError, match="line 2 is corrupt"):
        Journal.open(path, HEADER)
    Journal.open(path.parent / "other.jsonl", HEADER).close()  # the refusal freed the lock


@pytest.mark.parametrize("other", [JournalHeader(4.0, 1e-5, 11, "cryptographic", "record"),
                                   JournalHeader(2.0, 1e-5, 11, "seeded_not_private", "record"),
                                   JournalHeader(2.0, 1e-5, 11, "cryptographic", "user:3")])
def test_another_budget_noise_mode_or_unit_is_refused(tmp_path, other):
    path = tmp_path / "releases.jsonl"
    Journal.open(path, HEADER).close()
    with pytest.raises(InputError, match="new output folder"):
        Journal.open(path, other)


def test_a_refused_delta_reads_differently_from_the_asked_one(tmp_path):
    path = tmp_path / "releases.jsonl"
    Journal.open(path, JournalHeader(2.0, 1.23456e-5, 11, "cryptographic", "record")).close()
    with pytest.raises(InputError) as refused:
        Journal.open(path, JournalHeader(2.0, 1.23457e-5, 11, "cryptographic", "record"))
    assert "made with δ=1.23456e-05; this config asks for δ=1.23457e-05" in str(refused.value)


def test_a_journal_from_before_the_data_section_was_recorded_resumes(tmp_path):
    path = tmp_path / "releases.jsonl"
    Journal.open(path, HEADER).close()  # data=None: an older journal's header
    now = JournalHeader(2.0, 1e-5, 11, "cryptographic", "record", {"path": "d.csv"})
    Journal.open(path, now).close()
    assert "data" not in json.loads(path.read_text().splitlines()[0])["header"]


def test_the_first_public_seed_is_kept(tmp_path):
    path = tmp_path / "releases.jsonl"
    Journal.open(path, HEADER).close()
    again = Journal.open(path, JournalHeader(2.0, 1e-5, 99, "cryptographic", "record"))
    assert again.header.public_seed == 11


def test_one_run_at_a_time_per_folder(tmp_path):
    path = tmp_path / "releases.jsonl"
    first = Journal.open(path, HEADER)
    with pytest.raises(InputError, match="another run is using this output folder"):
        Journal.open(path, HEADER)
    first.close()
    Journal.open(path, HEADER).close()


def test_a_data_setting_this_version_dropped_does_not_refuse_an_older_folder():
    """`min_examples_per_label` (gone since the label set must be declared) selected no
    record; an older journal recording it still resumes, while a setting that selects
    records is compared."""
    now = {"path": "/d.csv", "labels": ["a", "b"], "max_chars": 4000}
    older = JournalHeader(2.0, 1e-5, 11, "cryptographic", "record",
                          {**now, "min_examples_per_label": 2})
    assert older.changed_data(now) == []
    assert older.changed_data({**now, "max_chars": 100}) == ["max_chars"]


class _Counted(Laplace):
    """A Laplace that counts its draws, to see which releases a restart makes again."""

    draws = 0

    def _release(self, values, noise):
        type(self).draws += 1
        return super()._release(values, noise)


def test_a_replayed_answer_is_not_drawn_again_and_the_stream_goes_on_where_it_was(tmp_path):
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    uninterrupted = NoiseSource(seed=7)
    first = ledger.release("hist", _Counted(2.0), [5, 9], uninterrupted)
    second = ledger.release("hist", _Counted(2.0), [5, 9], uninterrupted)
    _Counted.draws = 0
    journal, restarted = _journaled_ledger(path)
    restarted.replay(journal.releases[:1])  # the restart saw only the first answer journaled
    noise = NoiseSource(seed=7)
    np.testing.assert_array_equal(restarted.release("hist", _Counted(2.0), [5, 9], noise),
                                  first)
    assert _Counted.draws == 0 and noise.draws == 1
    np.testing.assert_array_equal(restarted.release("hist", _Counted(2.0), [5, 9], noise),
                                  second)  # the seeded stream where the first run had it
    assert _Counted.draws == 1


def test_a_journal_without_stream_positions_draws_again_on_replay(tmp_path):
    """Journals written before positions were recorded still replay in step."""
    path = tmp_path / "releases.jsonl"
    _, ledger = _journaled_ledger(path)
    first = ledger.release("hist", _Counted(2.0), [5, 9], NoiseSource(seed=7))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "draws"}) + "\n"
                            for line in lines))
    _Counted.draws = 0
    journal, restarted = _journaled_ledger(path)
    assert journal.releases[0].draws is None
    restarted.replay(journal.releases)
    noise = NoiseSource(seed=7)
    np.testing.assert_array_equal(restarted.release("hist", _Counted(2.0), [5, 9], noise),
                                  first)
    assert _Counted.draws == 1 and noise.draws == 1


class _Sequence:
    """A text of three draws over four candidates whose scores follow the draws so far;
    counts the draws asked of it."""

    asked = 0

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def next_scores(self, drawn):
        type(self).asked += 1
        if len(drawn) == 3:
            return None
        return np.arange(4), np.array([self.offset, len(drawn), 0.5, -1.0])


class _Texts:
    """`_Sequence`s drawn `size` at a time in lockstep (a `GroupedSequences`)."""

    def __init__(self, sequences, size: int = 1) -> None:
        self.sequences, self.size = list(sequences), size

    def __len__(self) -> int:
        return len(self.sequences)

    def groups(self, start):
        return [(a, min(a + self.size, len(self))) for a in range(start, len(self), self.size)]

    def together(self, start, stop):
        return _Together(self.sequences[start:stop])


class _Together:
    def __init__(self, sequences) -> None:
        self.sequences = sequences

    def next_scores(self, drawn):
        return [s.next_scores(d) for s, d in zip(self.sequences, drawn, strict=True)]


class _Killed(Exception):
    pass


def _decode(ledger, noise, sources, layout="one", size=1):
    return ledger.release("decoding", DisjointSequences(ExponentialSample(1.0, 0.5), 3, layout),
                          _Texts(sources, size), noise)


def _killed_after(parts: int, path):
    """A ledger whose journal loses its process right after `parts` parts were written."""
    journal, ledger = _journaled_ledger(path)

    def write_then_die(index, part, value, draws, layout):
        journal.append_part(index, part, value, draws, layout)
        if part + 1 == parts:
            raise _Killed

    ledger.on_part = write_then_die
    return ledger


@pytest.mark.parametrize("written", [1, 3])
def test_a_release_in_parts_resumes_after_the_parts_written_down(tmp_path, written):
    """A seeded run killed inside a long release gets back the parts journaled, draws none of
    them again, and draws the rest as the uninterrupted run did; one charge for all."""
    sources = [_Sequence(float(i)) for i in range(5)]
    uninterrupted = _decode(PrivacyLedger(2.0, 1e-5), NoiseSource(seed=3), sources)
    path = tmp_path / "releases.jsonl"
    with pytest.raises(_Killed):
        _decode(_killed_after(written, path), NoiseSource(seed=3), sources)
    journal, restarted = _journaled_ledger(path)
    assert [len(r.parts) for r in journal.releases] == [written]
    assert journal.releases[0].output is NOT_DRAWN
    restarted.replay(journal.releases)
    _Sequence.asked = 0
    resumed = _decode(restarted, NoiseSource(seed=3), sources)
    assert resumed == uninterrupted
    assert _Sequence.asked == 3 * (5 - written)  # 3 draws for each text left, none before
    assert len(restarted.charges) == 1
    again = _journaled_ledger(path)[0].releases
    assert len(again) == 1 and again[0].output == uninterrupted  # the whole answer now


@pytest.mark.parametrize("written", [1, 2, 3])
def test_a_release_drawn_in_groups_resumes_after_the_parts_written_down(tmp_path, written):
    """Texts drawn two at a time are journaled as their group ends, in order: a run killed
    after part 1 or 2 keeps those, builds and draws only the texts after them, from the noise
    stream past the last part written (so a text of a group cut in half is drawn again with
    fresh noise: nothing of it had left the process); one charge for all."""
    sources = [_Sequence(float(i)) for i in range(5)]
    uninterrupted = _decode(PrivacyLedger(2.0, 1e-5), NoiseSource(seed=3), sources, size=2)
    path = tmp_path / "releases.jsonl"
    with pytest.raises(_Killed):
        _decode(_killed_after(written, path), NoiseSource(seed=3), sources, size=2)
    journal, restarted = _journaled_ledger(path)
    kept = [value for value, _ in journal.releases[0].parts]
    assert len(kept) == written
    restarted.replay(journal.releases)
    _Sequence.asked = 0
    resumed = _decode(restarted, NoiseSource(seed=3), sources, size=2)
    assert resumed[:written] == kept == uninterrupted[:written] and len(resumed) == 5
    if written == 2:  # killed at a group's end: the rest is drawn as the whole run drew it
        assert resumed == uninterrupted
    assert all(len(text) == 3 for text in resumed)
    assert _Sequence.asked == 3 * (5 - written)  # 3 draws for each text left, none before
    assert len(restarted.charges) == 1


def test_an_unseeded_release_in_parts_keeps_its_written_parts_and_draws_the_rest_fresh(
        tmp_path):
    sources = [_Sequence(float(i)) for i in range(4)]
    path = tmp_path / "releases.jsonl"
    with pytest.raises(_Killed):
        _decode(_killed_after(2, path), NoiseSource(), sources)
    journal, restarted = _journaled_ledger(path)
    written = [value for value, _ in journal.releases[0].parts]
    restarted.replay(journal.releases)
    resumed = _decode(restarted, NoiseSource(), sources)
    assert resumed[:2] == written and len(resumed) == 4
    assert all(len(text) == 3 for text in resumed)


def test_only_a_prefix_of_parts_in_order_is_read_back(tmp_path):
    path = tmp_path / "releases.jsonl"
    journal, ledger = _journaled_ledger(path)
    ledger.charge("decoding", DisjointSequences(ExponentialSample(1.0, 0.5), 3, "a").event)
    journal.append_part(0, 0, [1, 2], 3, "a")
    journal.append_part(0, 2, [0, 0], 9, "a")  # part 1 missing: part 2 cannot be used
    with path.open("a") as handle:
        handle.write('{"part": {"output": 0, "index": 1, "val')  # torn by a kill
    reread = _journaled_ledger(path)[0].releases[0]
    assert reread.parts == (([1, 2], 3),) and reread.layout == "a"


def test_parts_drawn_under_another_layout_are_refused_not_continued(tmp_path):
    """A setting that moves records between parts changed since the kill: continuing would
    let one record feed an old part and a new one under one charge."""
    sources = [_Sequence(float(i)) for i in range(4)]
    path = tmp_path / "releases.jsonl"
    with pytest.raises(_Killed):
        _decode(_killed_after(2, path), NoiseSource(seed=3), sources, layout="before")
    journal, restarted = _journaled_ledger(path)
    restarted.replay(journal.releases)
    _Sequence.asked = 0
    with pytest.raises(InputError, match="another layout of the data"):
        _decode(restarted, NoiseSource(seed=3), sources, layout="after")
    assert _Sequence.asked == 0 and len(restarted.charges) == 1
    journal, again = _journaled_ledger(path)
    again.replay(journal.releases)
    assert len(_decode(again, NoiseSource(seed=3), sources, layout="before")) == 4


def test_parts_that_name_no_layout_are_read_and_refused_not_continued(tmp_path):
    """Parts written before layouts were recorded open without error; continuing them is
    refused with the same message, since nothing says which records fed them."""
    path = tmp_path / "releases.jsonl"
    journal, ledger = _journaled_ledger(path)
    ledger.charge("decoding", DisjointSequences(ExponentialSample(1.0, 0.5), 3, "one").event)
    with path.open("a") as handle:
        handle.write(json.dumps({"part": {"output": 0, "index": 0, "value": [1, 2, 0],
                                          "draws": 3}}) + "\n")
    journal, restarted = _journaled_ledger(path)
    assert journal.releases[0].parts == (([1, 2, 0], 3),) and journal.releases[0].layout is None
    restarted.replay(journal.releases)
    with pytest.raises(InputError, match="another layout of the data"):
        _decode(restarted, NoiseSource(seed=3), [_Sequence(0.0)])
