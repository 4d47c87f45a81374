import numpy as np
import pytest

from dpsynth.evaluate import privacy
from dpsynth.evaluate.downstream import (
    downstream_classification,
    fit_classifier,
    true_label_probability,
)


def _clusters(n, seed, dim=16):
    rng = np.random.default_rng(seed)
    labels = rng.choice(["alpha", "beta", "gamma"], size=n)
    centres = {"alpha": 0, "beta": 1, "gamma": 2}
    x = rng.normal(scale=0.3, size=(n, dim))
    for row, label in enumerate(labels):
        x[row, centres[label]] += 3.0
    return x, list(labels)


def test_separable_classes_are_learned_and_shuffled_labels_are_not():
    train_x, train_y = _clusters(300, 0)
    test_x, test_y = _clusters(300, 1)
    good = downstream_classification(train_x, train_y, test_x, test_y)
    assert good.accuracy == 1.0 and good.macro_f1 == 1.0
    assert good.per_class_recall == {"alpha": 1.0, "beta": 1.0, "gamma": 1.0}
    shuffled = list(np.random.default_rng(2).permutation(train_y))
    bad = downstream_classification(train_x, shuffled, test_x, test_y)
    assert bad.accuracy < 0.6


def test_a_class_missing_from_synthetic_gets_zero_recall():
    train_x, train_y = _clusters(300, 0)
    keep = [i for i, y in enumerate(train_y) if y != "gamma"]
    test_x, test_y = _clusters(200, 1)
    scores = downstream_classification(train_x[keep], [train_y[i] for i in keep], test_x, test_y)
    assert scores.per_class_recall["gamma"] == 0.0
    assert scores.classes_missing_from_train == ("gamma",)
    one_class = downstream_classification(train_x[:5], ["alpha"] * 5, test_x, test_y)
    assert one_class.per_class_recall["alpha"] == 1.0
    assert one_class.accuracy == pytest.approx(test_y.count("alpha") / len(test_y))


def _attack_auc(model, members, nonmembers):
    (mx, my), (nx, ny) = members, nonmembers
    return privacy.membership_auc(true_label_probability(model, mx, my),
                                  true_label_probability(model, nx, ny))


def test_loss_attack_high_on_a_memorising_model_and_chance_otherwise():
    rng = np.random.default_rng(3)
    dim = 400  # more dimensions than points: random labels can be fitted exactly

    def noise(n):
        return rng.normal(size=(n, dim)), list(rng.choice(["a", "b", "c"], size=n))

    members, nonmembers, other = noise(200), noise(200), noise(200)
    memorised = fit_classifier(*members, c=100.0)
    assert _attack_auc(memorised, members, nonmembers) > 0.95
    unrelated = fit_classifier(*other, c=100.0)
    assert abs(_attack_auc(unrelated, members, nonmembers) - 0.5) < 0.1


def test_distance_attack_sees_copied_members():
    rng = np.random.default_rng(4)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    members, nonmembers = unit(rng.normal(size=(150, 32))), unit(rng.normal(size=(150, 32)))
    copied = members[:100]
    leaky = privacy.membership_auc(privacy.nearest_similarity(members, copied),
                                   privacy.nearest_similarity(nonmembers, copied))
    assert leaky > 0.8
    fresh = unit(rng.normal(size=(100, 32)))
    clean = privacy.membership_auc(privacy.nearest_similarity(members, fresh),
                                   privacy.nearest_similarity(nonmembers, fresh))
    assert abs(clean - 0.5) < 0.1


def test_nearest_similarity_and_histogram():
    reference = np.eye(4)
    query = np.array([[1.0, 0, 0, 0], [0.6, 0.8, 0, 0], [-1.0, 0, 0, 0]])
    sims = privacy.nearest_similarity(query, reference)
    np.testing.assert_allclose(sims, [1.0, 0.8, 0.0])
    hist = privacy.similarity_histogram(sims)
    assert sum(hist["counts"]) == 3
    assert hist["counts"][-1] == 1 and hist["counts"][16] == 1 and hist["counts"][0] == 1
    assert hist["max"] == 1.0


def test_copies_exact_after_normalisation_and_near_by_similarity():
    private = ["The parcel never arrived.", "My invoice is wrong"]
    synthetic = ["the  parcel never ARRIVED.", "my invoice is wrong!", "wifi drops"]
    sims = np.array([1.0, 0.97, 0.3])
    out = privacy.copies_of_private(synthetic, private, sims, threshold=0.95)
    assert (out["exact"], out["near"]) == (1, 1)
    assert out["exact_rows"] == [0] and out["near_rows"] == [1]
    assert out["exact_fraction"] == pytest.approx(1 / 3)
    assert not any(t in str(out) for t in private + synthetic)


def test_balanced_indices_are_equal_sized_and_distinct():
    members, nonmembers = privacy.balanced_indices(50, 30, 100, seed=0)
    assert len(members) == len(nonmembers) == 30
    assert len(set(members)) == 30 and max(members) < 50
