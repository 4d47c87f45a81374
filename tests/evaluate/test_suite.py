import json
import logging

import pandas as pd
import pytest

from dpsynth.backends.cache import CachedEmbedder, ContentCache, content_key
from dpsynth.backends.config import MiniLMConfig
from dpsynth.errors import InputError
from dpsynth.evaluate import PRIVATE_NOTICE, EvalConfig, EvalResult, evaluate

TOPICS = {
    "billing": "invoice charge refund payment card billed twice amount",
    "delivery": "parcel courier shipped arrived late tracking box damaged",
    "account": "password login reset locked email username signin",
}


def _rows(n, seed, prefix):
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = list(TOPICS)[i % 3]
        words = rng.choice(TOPICS[label].split(), size=int(rng.integers(4, 9)))
        rows.append({"text": f"{prefix} {i} " + " ".join(words), "label": label})
    return pd.DataFrame(rows)


@pytest.fixture
def files(tmp_path):
    paths = {}
    for name, n, seed in (("synthetic", 60, 1), ("test", 60, 2), ("train", 60, 3)):
        paths[name] = tmp_path / f"{name}.csv"
        _rows(n, seed, f"{name}-record").to_csv(paths[name], index=False)
    return paths


FAST = EvalConfig(next_token=None, mauve=False, max_samples=200, attack_records=50)


def test_evaluate_reports_every_section_and_writes_json(files, tmp_path, hashing_embedder):
    out_dir = tmp_path / "eval"
    result = evaluate(files["synthetic"], files["test"], files["train"], FAST,
                      embedder=hashing_embedder, output=out_dir)
    m = result.to_dict()
    assert m["utility"]["classification"]["accuracy"] > 0.9  # topics are separable
    assert set(m["fidelity"]) >= {"frechet_distance", "knn_precision", "knn_recall",
                                  "wasserstein_distance", "self_similarity", "length", "labels"}
    assert m["privacy"]["notice"] == PRIVATE_NOTICE
    assert m["privacy"]["copies"]["exact"] == 0
    assert 0.0 <= m["privacy"]["membership_inference"]["loss_attack_auc"] <= 1.0
    assert m["meta"]["synthetic"]["records"] == 60
    assert m["meta"]["real_test"]["private"] is True  # until declared public (public_test)
    again = EvalResult.read(out_dir)
    assert again.metrics == json.loads(json.dumps(m))
    assert len(again.figures["embedding_map"]["synthetic"]) == 60
    markdown = result.to_markdown()
    assert "utility | classification.accuracy" in markdown
    assert PRIVATE_NOTICE in markdown


def test_private_texts_stay_out_of_outputs_and_logs(files, tmp_path, hashing_embedder, caplog):
    private = pd.read_csv(files["train"])["text"].tolist()
    with caplog.at_level(logging.DEBUG, logger="dpsynth"):
        result = evaluate(files["synthetic"], files["test"], files["train"], FAST,
                          embedder=hashing_embedder, output=tmp_path / "eval")
    dumped = json.dumps(result.metrics) + json.dumps(result.figures) + result.to_markdown()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for text in private:
        assert text not in dumped and text not in logged


def test_copies_are_found_when_the_synthetic_set_repeats_private_records(files, tmp_path,
                                                                         hashing_embedder):
    train = pd.read_csv(files["train"])
    leaky = pd.concat([train.iloc[:20], _rows(40, 9, "fresh")])
    leaky.to_csv(tmp_path / "leaky.csv", index=False)
    m = evaluate(tmp_path / "leaky.csv", files["test"], files["train"], FAST,
                 embedder=hashing_embedder).to_dict()
    assert m["privacy"]["copies"]["exact"] == 20
    assert m["privacy"]["copies"]["exact_rows"] == list(range(20))
    assert m["privacy"]["nearest_private_similarity"]["synthetic"]["max"] == pytest.approx(1.0)


def test_without_train_or_labels_the_private_and_label_parts_are_absent(files, tmp_path,
                                                                        hashing_embedder):
    pd.read_csv(files["synthetic"])[["text"]].to_csv(tmp_path / "nolabels.csv", index=False)
    m = evaluate(tmp_path / "nolabels.csv", files["test"], config=FAST,
                 embedder=hashing_embedder).to_dict()
    assert "privacy" not in m
    assert "skipped" in m["utility"]["classification"]
    assert "labels" not in m["fidelity"]


def test_real_texts_never_reach_the_embedding_cache(files, tmp_path, hashing_embedder):
    cache = ContentCache(tmp_path / "cache" / "embeddings.sqlite")
    evaluate(files["synthetic"], files["test"], files["train"], FAST,
             embedder=CachedEmbedder(hashing_embedder, cache))

    def cached(name):
        texts = pd.read_csv(files[name])["text"].tolist()
        keys = [content_key(hashing_embedder.identity(), t) for t in texts]
        return len(cache.get_vectors(keys)), len(texts)

    assert cached("train")[0] == 0
    assert cached("test")[0] == 0
    found, total = cached("synthetic")
    assert found == total  # the cache is in use, for synthetic text only


@pytest.mark.parametrize("split", ["train", None])
def test_a_remote_embedder_is_refused_for_any_real_split(files, remote_hashing_embedder,
                                                         split):
    train = files[split] if split else None
    with pytest.raises(InputError, match="remote embedder"):
        evaluate(files["synthetic"], files["test"], train, FAST,
                 embedder=remote_hashing_embedder)


def test_a_remote_embedder_runs_with_the_explicit_opt_in(files, remote_hashing_embedder,
                                                         caplog):
    opted_in = FAST.model_copy(update={"embedder": MiniLMConfig(allow_remote_on_private=True)})
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        m = evaluate(files["synthetic"], files["test"], files["train"], opted_in,
                     embedder=remote_hashing_embedder).to_dict()
    assert "privacy" in m
    assert "remote embedder" in caplog.text


def test_a_tiny_synthetic_set_skips_what_it_cannot_measure(files, tmp_path, hashing_embedder):
    pd.read_csv(files["synthetic"]).iloc[:3].to_csv(tmp_path / "tiny.csv", index=False)
    m = evaluate(tmp_path / "tiny.csv", files["test"], config=FAST.model_copy(
        update={"mauve": True}), embedder=hashing_embedder).to_dict()
    assert m["fidelity"]["mauve"].startswith("skipped: mauve_score")
    assert m["fidelity"]["knn_precision"].startswith("skipped")
    assert isinstance(m["fidelity"]["frechet_distance"], float)
