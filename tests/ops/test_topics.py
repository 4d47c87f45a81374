"""Topic model: clusters of public embeddings, keywords, a round trip, and the DP histogram."""

import numpy as np
import pytest

from dpsynth.methods.parts.topics import TopicModel, build_topic_model
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import Gaussian
from dpsynth.privacy.noise import NoiseSource
from dpsynth.private.engine.nearest import Voters, nearest_indices
from dpsynth.private.releases.topics import dp_topic_histogram

THEMES = {"sport": "match goal team league season coach striker".split(),
          "money": "bank rate market stock inflation loan investor".split(),
          "space": "orbit rocket planet launch moon satellite telescope".split()}


def corpus(n_per=60, seed=0):
    rng = np.random.default_rng(seed)
    texts, embeddings = [], []
    for k, words in enumerate(THEMES.values()):
        for _ in range(n_per):
            texts.append(" ".join(rng.choice(words, size=8)))
            vec = rng.normal(scale=0.05, size=6)
            vec[k] += 1.0
            embeddings.append(vec / np.linalg.norm(vec))
    return texts, np.asarray(embeddings, dtype=np.float32)


def test_topics_recover_the_themes_and_their_keywords():
    texts, emb = corpus()
    model = build_topic_model(texts, emb, n_topics=3, seed=0, n_keywords=5,
                              min_cluster_size=20)
    assert model.n_topics == 3
    assigned = nearest_indices(emb, model.centroids)
    for k in range(3):  # each theme lands in one topic, whose keywords are the theme's
        block = assigned[k * 60:(k + 1) * 60]
        assert len(set(block.tolist())) == 1
        theme_words = list(THEMES.values())[k]
        assert set(model.keywords[block[0]]) <= set(theme_words)


def test_kmeans_fallback_when_hdbscan_finds_only_noise():
    texts, emb = corpus(n_per=30)  # no theme reaches 40 points: HDBSCAN sees only noise
    model = build_topic_model(texts, emb, n_topics=3, seed=0, min_cluster_size=40)
    assert model.meta["method"] == "kmeans" and model.n_topics == 3


def test_save_and_load_round_trip(tmp_path):
    texts, emb = corpus()
    model = build_topic_model(texts, emb, n_topics=3, seed=0, min_cluster_size=20)
    back = TopicModel.load(model.save(tmp_path / "topics"))
    np.testing.assert_allclose(back.centroids, model.centroids)
    assert back.keywords == model.keywords and back.meta["method"] == model.meta["method"]
    (tmp_path / "topics" / "topics.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a dpsynth topic model"):
        TopicModel.load(tmp_path / "topics")


def test_dp_topic_histogram_counts_each_record_once():
    texts, emb = corpus()
    model = build_topic_model(texts, emb, n_topics=3, seed=0, min_cluster_size=20)
    ledger = PrivacyLedger(1e3, 1e-6, discretization=0.1)
    assigned, noisy = dp_topic_histogram(Voters(emb[:90]), model.centroids, Gaussian(0.3),
                                         ledger, NoiseSource(0), "topic_histogram")
    assert noisy.shape == (1, 3) and noisy.sum() == pytest.approx(90, abs=4)
    np.testing.assert_allclose(noisy[0], np.bincount(assigned, minlength=3), atol=2)
    assert ledger.breakdown()["topic_histogram"]["releases"] == 1


def test_the_label_topic_histogram_moves_one_cell_by_one_between_neighbours():
    """Sensitivity by construction: removing any one record changes the exact (label, topic)
    counts in one cell by one, so the topic histogram's σ covers the joint table."""
    texts, emb = corpus()
    model = build_topic_model(texts, emb, n_topics=3, seed=0, min_cluster_size=20)
    codes = np.arange(90) % 2

    def release(embeddings, labels):  # the same seeded noise, so differences are exact
        return dp_topic_histogram(Voters(embeddings), model.centroids, Gaussian(0.3),
                                  PrivacyLedger(1e3, 1e-6, discretization=0.1), NoiseSource(0),
                                  "topic_histogram", label_codes=labels, n_labels=2)[1]

    full = release(emb[:90], codes)
    assert full.shape == (2, 3) and full.sum() == pytest.approx(90, abs=4)
    for gone in (0, 45, 89):
        keep = np.arange(90) != gone
        neighbour = release(emb[:90][keep], codes[keep])
        diff = np.abs(full - neighbour)
        assert np.isclose(diff.sum(), 1.0, atol=1e-6) and np.isclose(diff.max(), 1.0, atol=1e-6)
        assert np.isclose(diff[codes[gone]].sum(), 1.0, atol=1e-6)  # in the record's label row
