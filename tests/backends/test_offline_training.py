"""scripts/train_public_lm.py on a tiny generated corpus: the private-set guard, the corpus
and cache it prepares, and exact resumption of training from a checkpoint."""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_public_lm.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_public_lm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The shared-data layout with a few hundred made-up paragraphs and reviews."""
    root = tmp_path_factory.mktemp("shared_data")
    rng = random.Random(1)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
             for _ in range(400)]
    weights = [1 / (i + 1) for i in range(len(vocab))]  # Zipf-like, as in real text

    def para(n):
        return " ".join(rng.choices(vocab, weights, k=n)) + "."

    for folder in ("wikipedia_en", "wikinews_en", "gutenberg"):
        (root / "public" / folder).mkdir(parents=True)
        lines = [para(rng.randint(8, 60)) for _ in range(80)]
        (root / "public" / folder / "part-000.txt").write_text("\n".join(lines) + "\n")
    for folder, labels in (("imdb", ("pos", "neg")), ("sst2", ("positive", "negative"))):
        (root / folder).mkdir()
        rows = [f'"{para(rng.randint(6, 40))}",{rng.choice(labels)}' for _ in range(80)]
        (root / folder / "train.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    return root


def _train_args(cache: Path, max_steps: int) -> argparse.Namespace:
    return argparse.Namespace(cache=str(cache), seed=3, max_steps=max_steps, batch=2, lr=1e-3,
                              warmup=1, decay_frac=0.0, threads=1, n_layer=1, n_embd=32,
                              n_head=2, chunk_minutes=9.0, max_chunks=0, init_from=None)


def test_private_sets_are_refused(script, tmp_path):
    for name in ("ag_news", "trec", "yelp", "disaster_tweets"):
        with pytest.raises(SystemExit, match=name):
            script.refuse_private(tmp_path / name)
        with pytest.raises(SystemExit, match=name):
            script.read_source(tmp_path, name)


def test_long_paragraphs_are_cut_at_sentences(script):
    text = " ".join(f"Sentence {i} has five words." for i in range(60))
    pieces = list(script.split_long(text))
    assert all(len(p.split()) <= script.MAX_DOC_WORDS for p in pieces)
    assert all(p.endswith(".") for p in pieces)
    assert " ".join(pieces) == text


@pytest.fixture(scope="module")
def prepared(script, data_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    script.prepare(argparse.Namespace(data_dir=str(data_dir), cache=str(cache), seed=3))
    return cache


def test_prepare_writes_a_conditioned_packed_corpus(prepared):
    stats = json.loads((prepared / "corpus.json").read_text())
    rows = np.load(prepared / "rows.npy")
    assert rows.shape[1] == 256 and stats["rows"] == len(rows)
    assert stats["fim_sequences"] > 0 and stats["heldout_documents"] > 0
    heldout = [json.loads(line) for line in (prepared / "heldout.jsonl").read_text().splitlines()]
    assert {d["kind"] for d in heldout} >= {"movie review", "news report"}
    assert all(d["keywords"] for d in heldout)
    assert {d["label"] for d in heldout if d["kind"] == "movie review"} <= {"positive",
                                                                             "negative"}


def test_training_resumed_from_a_checkpoint_matches_one_run(script, prepared, tmp_path):
    import shutil

    import torch

    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        shutil.copytree(prepared, d)
    script.train(_train_args(one, 4))
    script.train(_train_args(two, 2))
    assert torch.load(two / "checkpoint.pt", weights_only=False)["state"]["step"] == 2
    script.train(_train_args(two, 4))
    a = torch.load(one / "checkpoint.pt", weights_only=False)
    b = torch.load(two / "checkpoint.pt", weights_only=False)
    assert a["state"]["step"] == b["state"]["step"] == 4
    assert a["state"]["index"] == b["state"]["index"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_continuation_keeps_the_held_out_set_and_trains_only_new_documents(
        script, data_dir, tmp_path, monkeypatch):
    """A larger budget with the first run's seed holds out exactly its documents and trains
    on none of them, nor on any document the first run trained on."""
    monkeypatch.setattr(script, "PUBLIC_SOURCES", {  # a third of each source, then all of it
        folder: (kind, 600) for folder, (kind, _) in script.PUBLIC_SOURCES.items()})
    first_docs, first = script.build_corpus(data_dir, random.Random(3), words_scale=1.0)
    more_docs, more_first = script.build_corpus(data_dir, random.Random(3), words_scale=3.0)
    assert more_first == first and len(more_docs) > len(first_docs)
    held, old_train = script.split_heldout(first_docs, first, fresh_only=False)
    held_again, new_train = script.split_heldout(more_docs, more_first, fresh_only=True)
    assert [d.text for d in held_again] == [d.text for d in held]
    assert not {d.text for d in new_train} & {d.text for d in held + old_train}

    once, more = tmp_path / "once", tmp_path / "more"
    script.prepare(argparse.Namespace(data_dir=str(data_dir), cache=str(once), seed=3))
    script.prepare(argparse.Namespace(data_dir=str(data_dir), cache=str(more), seed=3,
                                      continue_from=str(once), words_scale=3.0))
    for name in ("heldout.jsonl", script.TOKENIZER_FILE, script.KEYWORDS_FILE):
        assert (more / name).read_bytes() == (once / name).read_bytes(), name


def test_training_can_start_from_a_model_folder(script, prepared, tmp_path):
    import shutil

    import torch

    base, cont = tmp_path / "base", tmp_path / "cont"
    shutil.copytree(prepared, base)
    script.train(_train_args(base, 1))
    script.export(argparse.Namespace(cache=str(base), out=str(tmp_path / "lm")))
    shutil.copytree(prepared, cont)
    args = _train_args(cont, 1)
    args.init_from, args.lr = str(tmp_path / "lm"), 0.0  # lr 0: the weights stay as loaded
    script.train(args)
    start = torch.load(base / "checkpoint.pt", weights_only=False)["model"]
    loaded = torch.load(cont / "checkpoint.pt", weights_only=False)["model"]
    for name, tensor in start.items():
        assert torch.equal(tensor.half().float(), loaded[name]), name
    wider = _train_args(tmp_path / "wider", 1)
    shutil.copytree(prepared, tmp_path / "wider")
    wider.init_from, wider.n_embd = str(tmp_path / "lm"), 64
    with pytest.raises(SystemExit, match="n_embd"):
        script.train(wider)
