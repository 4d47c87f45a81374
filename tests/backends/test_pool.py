"""The pool generator: retrieval by condition, rewrite distance, distinct outputs, seeding,
stored embeddings, loading errors, and pe end to end on a pool."""

import json

import numpy as np
import pandas as pd
import pytest

from dpsynth.backends.base import Condition
from dpsynth.backends.config import MiniLMConfig, OfflineConfig, PoolConfig
from dpsynth.backends.factory import GENERATORS, build_embedder, build_generator
from dpsynth.backends.pool.edit import EditedPool
from dpsynth.backends.pool.generator import PoolGenerator
from dpsynth.backends.pool.texts import read_pool_texts, refuse_private_pool
from dpsynth.errors import ConfigError, DataError
from dpsynth.run import run
from tests.methods.fakes import VOCAB, HashEmbedder, RecordingGenerator, ticket_texts
from tests.methods.test_recipes import make_config

pytest.importorskip("faiss")


DIM = 1024
"""Wide enough that the tiny pool's words do not collide in the hashed bag of words."""


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(DIM)
        self.embedded = 0
        self.texts: list[str] = []

    def encode(self, texts):
        self.embedded += len(texts)
        self.texts += list(texts)
        return super().encode(texts)


def pool_lines(per_label: int = 6) -> list[str]:
    """Texts built from each label's vocabulary, of growing length, all distinct."""
    lines = []
    for label, words in VOCAB.items():
        for i in range(per_label):
            lines.append(" ".join([label, *words[: 2 + i], f"note{label}{i}"]))
    return lines


@pytest.fixture
def pool_file(tmp_path):
    path = tmp_path / "public.txt"
    path.write_text("\n".join(pool_lines()) + "\n", encoding="utf-8")
    return path


def make_pool(path, **kwargs):
    return PoolGenerator(path, kwargs.pop("embedder", HashEmbedder(DIM)),
                         **{"seed": 3, "candidates": 4, **kwargs})


def test_generate_retrieves_texts_of_the_conditions_label(pool_file):
    pool = make_pool(pool_file)
    out = pool.generate([Condition(label="shipping")] * 3 + [Condition(label="billing")] * 3)
    assert all(t.startswith("shipping") for t in out[:3])
    assert all(t.startswith("billing") for t in out[3:])


def test_generate_follows_keywords_and_prefers_the_target_length(pool_file):
    pool = make_pool(pool_file, candidates=1)
    [text] = pool.generate([Condition(keywords=("wifi", "screen"))])
    assert text.startswith("technical")
    short, long = pool.generate([Condition(label="account", length=4),
                                 Condition(label="account", length=9)])
    assert len(short.split()) <= 5  # within 25% of the target
    assert len(long.split()) >= 6  # the nearest, at 4 words, is too short


def test_no_text_twice_within_a_call_until_the_pool_runs_out(pool_file):
    pool = make_pool(pool_file)
    out = pool.generate([Condition(label="billing")] * 24)
    assert len(set(out)) == 24  # the whole pool, each text once
    more = pool.generate([Condition(label="billing")] * 30)
    assert len(set(more)) == 24
    assert pool.usage()["pool_repeats"] == 1


def test_rewrite_strength_sets_the_distance_to_the_parent(pool_file):
    pool = make_pool(pool_file, candidates=8)
    parent = pool_lines()[8]
    vectors = {t: v for t, v in zip(pool.index.texts, pool.index.vectors, strict=True)}
    sims = []
    for strength in (0.0, 0.5, 1.0):
        [child] = pool.rewrite([parent], [Condition()], strength)
        assert child != parent and child in vectors
        sims.append(float(vectors[child] @ vectors[parent]))
    assert sims[0] > sims[1] > sims[2]
    nearest = max((t for t in vectors if t != parent), key=lambda t: vectors[t] @ vectors[parent])
    assert pool.rewrite([parent], [Condition()], 0.0) == [nearest]


def test_rewrite_crossover_and_fill_stay_with_the_conditions_label(pool_file):
    pool = make_pool(pool_file, candidates=8)
    between = " ".join(VOCAB["billing"][:3] + VOCAB["shipping"][:3])  # as near one as the other
    for label in ("billing", "shipping"):
        condition = [Condition(label=label)]
        outputs = (pool.rewrite([between], condition, 0.0)
                   + pool.crossover([[between, between]], condition)
                   + pool.fill([between], condition))
        assert [text.split()[0] for text in outputs] == [label] * 3


def test_crossover_and_fill_return_near_pool_texts(pool_file):
    pool = make_pool(pool_file)
    parents = [pool_lines()[0], pool_lines()[1]]  # two billing texts
    [child] = pool.crossover([parents], [Condition()])
    assert child.startswith("billing") and child not in parents
    [filled] = pool.fill(["shipping parcel _ _ delivery"], [Condition()])
    assert filled.startswith("shipping")


def test_same_seed_same_outputs_and_resume_continues(pool_file):
    conditions = [Condition(label=y) for y in VOCAB] * 2
    a, b = make_pool(pool_file), make_pool(pool_file)
    first = a.generate(conditions)
    assert first == b.generate(conditions)
    second = a.generate(conditions)
    resumed = make_pool(pool_file)
    resumed.load_state_dict(a.state_dict())
    assert resumed.state_dict() == {"calls": 2}
    fresh = make_pool(pool_file)
    fresh.load_state_dict({"calls": 1})
    assert fresh.generate(conditions) == second
    draws = {tuple(make_pool(pool_file, seed=s).generate(conditions)) for s in range(5)}
    assert len(draws) > 1


def test_embeddings_are_stored_beside_the_pool_and_reused(pool_file):
    first = CountingEmbedder()
    make_pool(pool_file, embedder=first)
    assert first.embedded == 24
    [stored] = pool_file.parent.glob("public.txt.emb-*.npy")
    assert np.load(stored).shape == (24, DIM)
    second = CountingEmbedder()
    pool = make_pool(pool_file, embedder=second)
    assert second.embedded == 0
    assert pool.usage()["pool_texts_embedded"] == 0
    pool_file.write_text("\n".join(pool_lines()[:10]), encoding="utf-8")
    changed = CountingEmbedder()
    make_pool(pool_file, embedder=changed)
    assert changed.embedded == 10  # a changed pool is embedded again, under a new name
    assert len(list(pool_file.parent.glob("public.txt.emb-*.npy"))) == 2


def test_index_dir_holds_the_embeddings(pool_file, tmp_path):
    make_pool(pool_file, index_dir=tmp_path / "index")
    assert len(list((tmp_path / "index").glob("public.txt.emb-*.npy"))) == 1
    assert not list(pool_file.parent.glob("*.npy"))


def test_pool_reads_folders_and_tables_and_caps_deterministically(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n\ntwo\n", encoding="utf-8")
    (folder / "b.txt").write_text("two\nthree\n", encoding="utf-8")
    assert read_pool_texts(folder) == ["one", "two", "three"]
    pd.DataFrame({"body": ["x y", "z"]}).to_parquet(tmp_path / "p.parquet")
    assert read_pool_texts(tmp_path / "p.parquet", column="body") == ["x y", "z"]
    lines = [f"text {i}" for i in range(100)]
    (tmp_path / "big.txt").write_text("\n".join(lines), encoding="utf-8")
    capped = read_pool_texts(tmp_path / "big.txt", max_texts=10)
    assert len(capped) == 10 and set(capped) <= set(lines)
    assert capped == read_pool_texts(tmp_path / "big.txt", max_texts=10)


@pytest.mark.parametrize(("setup", "message"), [
    (lambda d: d / "missing.txt", "missing.txt: pool not found"),
    (lambda d: (d / "blank.txt").write_text("\n  \n") and d / "blank.txt",
     "blank.txt: the pool holds no non-empty text"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "empty: folder holds no .txt files"),
    (lambda d: pd.DataFrame({"body": ["a"]}).to_csv(d / "t.csv", index=False) or d / "t.csv",
     r"t.csv, field 'text': no column 'text' \(columns: body\)"),
])
def test_bad_pools_are_named_in_the_error(tmp_path, setup, message):
    with pytest.raises(DataError, match=message):
        make_pool(setup(tmp_path))


def test_a_pool_that_is_or_holds_the_private_data_is_refused(tmp_path, pool_file):
    private = tmp_path / "private" / "train.csv"
    for pool in (private, tmp_path / "private", tmp_path / "private" / ".." / "private"):
        with pytest.raises(ConfigError, match="is or holds the private data"):
            refuse_private_pool(pool, private)
    refuse_private_pool(pool_file, private)  # a sibling file is fine


def test_factory_builds_a_pool_from_config_paths(tmp_path, pool_file, monkeypatch):
    monkeypatch.setattr("dpsynth.backends.factory.EMBEDDERS",
                        {"minilm": lambda cfg: HashEmbedder(DIM)})
    cfg = PoolConfig(path="public.txt", index_dir="index", seed=1,
                     candidates=2)
    pool = build_generator(cfg, base_dir=tmp_path)
    assert pool.generate([Condition(label="account")])[0].startswith("account")
    assert list((tmp_path / "index").glob("*.npy"))
    shipped = build_generator(PoolConfig(index_dir=str(tmp_path / "d")))
    assert shipped.usage()["pool_texts"] > 5_000  # without a path: the shipped public pool


def test_the_shipped_pool_comes_with_its_minilm_embeddings():
    from dpsynth.backends.factory import DEFAULT_POOL

    pool = PoolGenerator(DEFAULT_POOL, build_embedder(MiniLMConfig()))
    assert pool.usage()["pool_texts_embedded"] == 0  # read from disk, not embedded again
    assert (DEFAULT_POOL.parent / "SOURCES.md").is_file()


def test_pe_on_a_pool_outputs_pool_texts(tmp_path, pool_file):
    config = make_config(tmp_path, ticket_texts(160), "pe")
    outputs = run(config, embedder=HashEmbedder(), generator=make_pool(pool_file, seed=None))
    synthetic = pd.read_csv(outputs.synthetic)
    assert len(synthetic) == 12
    assert set(synthetic["text"]) <= set(pool_lines())
    usage = json.loads((config.output.dir / "usage.json").read_text())["generator"]
    assert usage["pool_texts"] == 24


class StrengthEditor(RecordingGenerator):
    """Records what it is asked to edit and at which strength; marks each output."""

    def __init__(self) -> None:
        super().__init__()
        self.strengths: list[float] = []

    def rewrite(self, texts, conditions, strength=0.5):
        self.strengths.append(strength)
        self._record(list(texts))
        return [f"edited {t}" for t in texts]


def test_edit_rewrites_what_the_pool_retrieved(pool_file):
    editor = StrengthEditor()
    edited = EditedPool(make_pool(pool_file), editor, strength=0.2)
    plain = make_pool(pool_file)
    conditions = [Condition(label="billing")] * 2
    retrieved = plain.generate(conditions)
    assert edited.generate(conditions) == [f"edited {t}" for t in retrieved]
    assert editor.inputs == retrieved and editor.strengths == [0.2]
    parents = [pool_lines()[0], pool_lines()[1]]
    assert edited.crossover([parents], [Condition()]) == [
        f"edited {t}" for t in plain.crossover([parents], [Condition()])]
    # rewrite is the editor's own paraphrase of the parent, at the caller's strength
    assert edited.rewrite(["a parent text"], [Condition()], 0.9) == ["edited a parent text"]
    assert editor.strengths[-1] == 0.9
    state = edited.state_dict()
    first = edited.generate(conditions)
    edited.load_state_dict(state)
    assert edited.generate(conditions) == first  # a resumed run draws the same retrievals


def test_edit_is_configured_on_the_pool_by_name(tmp_path, pool_file, monkeypatch):
    monkeypatch.setattr("dpsynth.backends.factory.EMBEDDERS",
                        {"minilm": lambda cfg: HashEmbedder(DIM)})
    editors = []

    def offline(cfg):
        editors.append(cfg)
        return StrengthEditor()

    monkeypatch.setitem(GENERATORS, "offline", offline)
    cfg = PoolConfig(path="public.txt", seed=5, edit="offline",
                     edit_strength=0.4)
    generator = build_generator(cfg, base_dir=tmp_path)
    assert isinstance(generator, EditedPool) and generator.strength == 0.4
    assert editors[0].seed == 5  # the editor shares the run's public seed unless it has one
    assert generator.generate([Condition(label="account")])[0].startswith("edited account")
    assert generator.identity()["edit_strength"] == 0.4
    with pytest.raises(ValueError, match="edit is a key of the pool generator, not of offline"):
        OfflineConfig(edit="offline")
    with pytest.raises(ValueError, match="not another pool"):
        PoolConfig(edit="pool")


def test_a_run_reads_pool_texts_from_the_stored_embeddings(tmp_path, pool_file):
    embedder = CountingEmbedder()
    pool = make_pool(pool_file, embedder=embedder, seed=None)
    assert sorted(embedder.texts) == sorted(pool_lines())  # indexing the pool
    config = make_config(tmp_path, ticket_texts(160), "pe")
    synthetic = pd.read_csv(run(config, embedder=embedder, generator=pool).synthetic)
    assert set(synthetic["text"]) <= set(pool_lines())
    again = embedder.texts[len(pool_lines()):]  # the private texts and the label queries
    assert not set(again) & set(pool_lines())  # no pool text embedded a second time
    other = CountingEmbedder()
    other.identity = lambda: {"embedder": "another"}
    assert pool.stored_embeddings(pool_lines()[:2], other) == {}  # another space: embed
