"""The shipped offline LM: loads with no network, is seeded, honours lengths, and its
condition steers what it writes."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from dpsynth.backends.base import Condition
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.generator import OfflineGenerator
from dpsynth.backends.offline.model import asset_dir

if not (asset_dir() / "model.safetensors").is_file():
    pytest.skip("the package ships no offline LM weights yet", allow_module_level=True)

@pytest.fixture(scope="module")
def gen():
    return OfflineGenerator(seed=11, temperature=1.0, top_p=0.95)


def test_loads_from_package_assets_with_hub_offline(gen):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert gen.model_dir == asset_dir()
    n_params = sum(p.numel() for p in gen.model.parameters())
    assert n_params <= 30_000_000
    size = sum(f.stat().st_size for f in asset_dir().iterdir())
    assert size <= 60 * 2**20
    assert gen.model.lm_head.weight.data_ptr() != gen.model.transformer.wte.weight.data_ptr()


@pytest.mark.slow  # generates hundreds of texts with the real LM
def test_deterministic_under_a_seed():
    conds = [Condition(label="positive", length=20, text="movie review")] * 3
    assert (OfflineGenerator(seed=5).generate(conds)
            == OfflineGenerator(seed=5).generate(conds))


def _mean_ratio(texts, targets):
    return float(np.mean([fmt.count_words(t) / n for t, n in zip(texts, targets, strict=True)]))


@pytest.mark.slow  # generates hundreds of texts with the real LM
def test_every_operation_honours_the_length_target(gen):
    """Each text within ±30% of its target, and the batch mean within ±10%."""
    conds = [Condition(length=n, text="news report") for n in (15, 30, 60, 90)] * 2
    made = gen.generate(conds)
    targets = [c.length for c in conds]
    lengths = [fmt.count_words(t) for t in made]
    assert all(0.7 * n <= k <= 1.3 * n + 1 for k, n in zip(lengths, targets, strict=True))
    assert abs(_mean_ratio(made, targets) - 1) <= 0.1

    plain = [Condition()] * len(made)
    rewritten = gen.rewrite(made, plain, strength=0.5)
    assert abs(_mean_ratio(rewritten, lengths) - 1) <= 0.3
    masked = [" ".join("_" if i % 3 == 1 else w for i, w in enumerate(t.split())) for t in made]
    filled = gen.fill(masked, plain)
    assert all("_" not in t for t in filled)
    assert abs(_mean_ratio(filled, lengths) - 1) <= 0.3
    children = gen.crossover([[made[i], made[-1 - i]] for i in range(len(made))], plain)
    means = [(lengths[i] + lengths[-1 - i]) / 2 for i in range(len(made))]
    assert abs(_mean_ratio(children, means) - 1) <= 0.3


@pytest.mark.slow  # generates hundreds of texts with the real LM
def test_sentiment_label_steers_the_text(gen):
    """Texts generated with label positive read as positive to the model's own Bayes
    classifier (which label makes the text likelier), and texts generated with label
    negative as negative. This check needs no data; the SST-2 test below shows the shift is
    sentiment a classifier trained on people's labels also sees."""
    from scipy.stats import mannwhitneyu

    n = 60
    pos = gen.generate([Condition(label="positive", length=30, text="movie review")] * n)
    neg = gen.generate([Condition(label="negative", length=30, text="movie review")] * n)

    def margin(texts):  # log p(text | positive) - log p(text | negative), per token
        ask = [Condition(label=lab, text="movie review") for lab in ("positive", "negative")]
        p_pos, p_neg = (np.log(gen.perplexity(texts, [c] * len(texts))) for c in ask)
        return p_neg - p_pos

    m_pos, m_neg = margin(pos), margin(neg)
    accuracy = (np.mean(m_pos > 0) + np.mean(m_neg < 0)) / 2
    assert accuracy >= 0.65  # 0.75-0.8 measured with two seeds; 0.5 is chance
    assert mannwhitneyu(m_pos, m_neg, alternative="greater").pvalue < 1e-4


@pytest.mark.shared_data
@pytest.mark.slow  # generates hundreds of texts with the real LM
def test_sentiment_label_steers_an_sst2_classifier(gen, shared_data):
    """A classifier trained on SST-2 tells the two apart well above chance."""
    import pandas as pd
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    sst2 = pd.read_csv(shared_data / "sst2" / "train.csv").sample(20_000, random_state=0)
    clf = make_pipeline(TfidfVectorizer(min_df=2), LogisticRegression(max_iter=1000))
    clf.fit(sst2["text"], sst2["label"] == "positive")
    n = 40
    pos = gen.generate([Condition(label="positive", length=30, text="movie review")] * n)
    neg = gen.generate([Condition(label="negative", length=30, text="movie review")] * n)
    accuracy = (np.mean(clf.predict(pos)) + np.mean(~clf.predict(neg))) / 2
    assert accuracy >= 0.6  # 0.68 measured on 100 texts a side; 0.5 is chance


@pytest.mark.slow  # generates hundreds of texts with the real LM
def test_keywords_steer_the_topic(gen):
    """A keyword shows up far more often when it is asked for than when it is not."""
    asked = gen.generate([Condition(keywords=("police",), length=40, text="news report")] * 20)
    other = gen.generate([Condition(keywords=("music",), length=40, text="news report")] * 20)
    rate_asked = np.mean(["police" in t.lower() for t in asked])
    rate_other = np.mean(["police" in t.lower() for t in other])
    assert rate_asked >= rate_other + 0.3


def test_perplexity_prefers_real_prose_to_shuffled_words(gen):
    prose = ["The council voted on Monday to close the old bridge for repairs.",
             "She opened the door and looked out at the quiet street."]
    shuffled = ["bridge the Monday repairs council to old close for on voted The.",
                "street door quiet looked the She and at out the opened."]
    real, noise = gen.perplexity(prose), gen.perplexity(shuffled)
    assert np.all(real < noise)
