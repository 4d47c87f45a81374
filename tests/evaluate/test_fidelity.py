import numpy as np
import pytest
from scipy import stats

from dpsynth.errors import InputError
from dpsynth.evaluate import fidelity
from dpsynth.evaluate.distributions import label_distances, length_distances


@pytest.fixture
def cloud():
    return np.random.default_rng(0).normal(size=(300, 8))


def test_frechet_zero_for_identical_and_shift_squared(cloud):
    assert fidelity.frechet_distance(cloud, cloud) == pytest.approx(0.0, abs=1e-6)
    shift = np.full(8, 0.5)
    assert fidelity.frechet_distance(cloud, cloud + shift) == pytest.approx(
        float(shift @ shift), rel=1e-4)


def test_frechet_sees_a_change_of_spread(cloud):
    # Var 1 vs var 4 in each of 8 dims: trace term 8 * (1 + 4 - 2*2) = 8 (up to sampling).
    assert fidelity.frechet_distance(cloud, 2 * cloud) == pytest.approx(
        8 * np.var(cloud, ddof=1, axis=0).mean(), rel=0.05)


def test_knn_precision_recall_identical_disjoint_and_collapsed(cloud):
    assert fidelity.knn_precision_recall(cloud, cloud) == (1.0, 1.0)
    assert fidelity.knn_precision_recall(cloud, cloud + 100.0) == (0.0, 0.0)
    # A synthetic set collapsed onto the densest real points: realistic but not covering.
    core = cloud[np.argsort(np.linalg.norm(cloud, axis=1))[:30]]
    precision, recall = fidelity.knn_precision_recall(cloud, core)
    assert precision == 1.0
    assert recall < 0.3


def test_self_similarity_identical_rows_and_orthonormal():
    same = np.tile(np.array([[0.6, 0.8]]), (10, 1))
    assert fidelity.self_similarity(same) == pytest.approx(1.0)
    assert fidelity.self_similarity(np.eye(16)) == pytest.approx(0.0)
    with pytest.raises(InputError, match="at least 2"):
        fidelity.self_similarity(np.eye(1))


def test_wasserstein_identical_shifted_and_against_scipy_in_1d(cloud):
    assert fidelity.wasserstein_distance(cloud, cloud) == pytest.approx(0.0)
    shift = np.zeros(8)
    shift[0] = 3.0
    assert fidelity.wasserstein_distance(cloud, cloud + shift) == pytest.approx(3.0)
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(200, 1)), rng.exponential(size=(200, 1))
    assert fidelity.wasserstein_distance(a, b) == pytest.approx(
        stats.wasserstein_distance(a[:, 0], b[:, 0]))


def test_mauve_high_for_same_distribution_low_for_disjoint():
    rng = np.random.default_rng(2)
    p, q = rng.normal(size=(200, 16)), rng.normal(size=(200, 16))
    assert fidelity.mauve_score(p, q) > 0.9
    assert fidelity.mauve_score(p, q + 50.0) < 0.1


def test_shape_errors_name_the_metric():
    with pytest.raises(InputError, match="frechet_distance"):
        fidelity.frechet_distance(np.zeros((5, 3)), np.zeros((5, 4)))


def test_length_distances_known_shift():
    real = ["a b c", "a b c d e", "a"]
    longer = [t + " x y" for t in real]
    assert length_distances(real, real)["wasserstein_words"] == 0.0
    out = length_distances(real, longer)
    assert out["wasserstein_words"] == pytest.approx(2.0)
    assert out["synthetic_mean_words"] - out["real_mean_words"] == pytest.approx(2.0)
    assert out["ks_statistic"] > 0


def test_label_distances_identical_disjoint_partial():
    assert label_distances(["a", "b"], ["b", "a"])["total_variation"] == 0.0
    assert label_distances(["a", "a"], ["b", "b"])["total_variation"] == 1.0
    out = label_distances(["a", "b", "a", "b"], ["a", "a", "a", "b"])
    assert out["total_variation"] == pytest.approx(0.25)
    assert out["synthetic_shares"] == {"a": 0.75, "b": 0.25}
