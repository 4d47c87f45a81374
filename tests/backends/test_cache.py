"""The SQLite content cache: hits on rerun, sample numbering, and no private text inside."""

import numpy as np

from dpsynth.backends import FAILED, Condition, build_embedder, build_generator
from dpsynth.backends.cache import CachedEmbedder, CachedGenerator
from dpsynth.backends.config import OpenAIEmbeddingsConfig
from dpsynth.data.private import PrivateDataset

from .conftest import chat_config


def run_all_operations(gen):
    cond = Condition(label="billing", length=8)
    return (gen.generate([cond, cond, Condition(label="other")])
            + gen.rewrite(["an old synthetic text"], [cond], 0.5)
            + gen.fill(["an _ text"], [cond])
            + gen.crossover([["first parent", "second parent"]], [cond]))


def test_rerun_is_served_from_the_cache(server, tmp_path):
    cfg = chat_config(server, cache=tmp_path / "cache.sqlite", temperature=1.0)
    first_gen = build_generator(cfg)
    assert isinstance(first_gen, CachedGenerator)
    first = run_all_operations(first_gen)
    sent = len(server.records)
    assert sent == 6 and first_gen.usage()["cache_misses"] == 6
    rerun = build_generator(cfg)  # a fresh process would do the same
    assert run_all_operations(rerun) == first
    assert len(server.records) == sent and rerun.usage()["cache_hits"] == 6
    # repeated identical requests are distinct samples, not one answer reused ...
    first_three = server.user_prompts()[:3]
    assert sum("Category: billing" in p for p in first_three) == 2  # same request twice
    more = rerun.generate([Condition(label="billing", length=8)])
    assert len(server.records) == sent + 1 and more[0]  # ... the third one is new
    # other sampling parameters are other entries
    hotter = build_generator(chat_config(server, cache=tmp_path / "cache.sqlite",
                                         temperature=0.5))
    hotter.generate([Condition(label="billing", length=8)])
    assert len(server.records) == sent + 2


def test_state_dict_lets_a_resumed_run_continue_the_numbering(server, tmp_path):
    cfg = chat_config(server, cache=tmp_path / "c.sqlite")
    gen = build_generator(cfg)
    gen.generate([Condition(label="x")])
    state = gen.state_dict()
    resumed = build_generator(cfg)
    resumed.load_state_dict(state)
    resumed.generate([Condition(label="x")])
    assert resumed.usage()["cache_misses"] == 1  # sample 1, not a replay of sample 0


def test_dry_run_reads_the_cache_but_writes_nothing(server, tmp_path):
    path = tmp_path / "c.sqlite"
    build_generator(chat_config(server, cache=path)).generate([Condition(label="seen")])
    dry = build_generator(chat_config(server, cache=path, dry_run=True))
    texts = dry.generate([Condition(label="seen"), Condition(label="unseen")])
    assert dry.usage()["cache_hits"] == 1 and dry.usage()["dry_run_calls"] == 1
    real = build_generator(chat_config(server, cache=path))
    assert real.generate([Condition(label="seen"), Condition(label="unseen")])[1] != texts[1]
    assert real.usage()["cache_misses"] == 1  # the dry run's filler was not stored
    assert len(server.records) == 2


def test_failures_are_not_cached(server, tmp_path):
    cfg = chat_config(server, cache=tmp_path / "c.sqlite")
    server.inject("400")
    assert build_generator(cfg).generate([Condition()]) == [FAILED]
    assert build_generator(cfg).generate([Condition()])[0] != FAILED
    assert len(server.records) == 2


def test_embedding_cache_hits_and_matches(server, tmp_path):
    cfg = OpenAIEmbeddingsConfig(base_url=server.url, model="e", dim=8,
                                 cache=tmp_path / "e.sqlite")
    emb = build_embedder(cfg)
    assert isinstance(emb, CachedEmbedder)
    texts = ["synthetic one", "synthetic two", "synthetic one"]
    first = emb.encode(texts)
    assert emb.misses == 2 and len(server.records) == 1
    again = build_embedder(cfg).encode(texts)
    np.testing.assert_array_equal(first, again)
    assert len(server.records) == 1


CANARIES = ["CANARY-7f3a patient Zorblax Quintavius", "CANARY-91c2 account 5512-8830-1177"]


def test_private_text_never_reaches_the_cache_file(server, tmp_path):
    """Run a private set through the normal paths with caches on, then grep the bytes."""
    gen_path, emb_path = tmp_path / "gen.sqlite", tmp_path / "emb.sqlite"
    private = PrivateDataset([*CANARIES, "an ordinary private record"],
                             labels=["a", "b", "a"], label_names=["a", "b"])
    emb = build_embedder(OpenAIEmbeddingsConfig(base_url=server.url, model="e", dim=8,
                                                cache=emb_path))
    private_vectors = private.embed(emb, allow_remote=True)  # opt-in, private path
    emb.encode_uncached(list(CANARIES))  # evaluation's path for real splits
    gen = build_generator(chat_config(server, cache=gen_path))
    synthetic = run_all_operations(gen)  # conditions come from public/DP values only
    emb.encode(synthetic)  # synthetic text is public: cached
    assert private_vectors.shape == (3, 8) and emb.misses == len(set(synthetic))
    for path in tmp_path.iterdir():  # the databases and any journal beside them
        blob = path.read_bytes()
        for canary in CANARIES:
            assert canary.encode() not in blob
            assert canary.split()[0].encode() not in blob
    # private vectors were not stored either: only the synthetic texts' rows exist
    import sqlite3

    rows = sqlite3.connect(emb_path).execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
    assert rows == len(set(synthetic))


def test_scores_pass_through_the_cache_uncached(tmp_path):
    """eda's readability filter scores through a cached generator: the wrapped one answers,
    and nothing is stored (scores are deterministic)."""
    from dpsynth.backends.cache import ContentCache
    from tests.methods.fakes import RecordingGenerator

    class Scoring(RecordingGenerator):
        def score(self, prompts, continuations):
            return np.array([-float(len(c)) for c in continuations])

    cache = ContentCache(tmp_path / "cache.sqlite")
    cached = CachedGenerator(Scoring(), cache)
    np.testing.assert_array_equal(cached.score(["\n", "\n"], ["ab", "abcd"]), [-2.0, -4.0])
    assert cached.hits == cached.misses == 0
