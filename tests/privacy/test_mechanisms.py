"""What each mechanism releases, and how it refuses bad input."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.privacy import (
    AboveThreshold,
    ExponentialTopK,
    Gaussian,
    Laplace,
    LimitedDomainTopK,
    NoisyMean,
    SubsampledGaussianHistogram,
    Votes,
    epsilon_of,
    make_rng,
    report_noisy_max,
)


def test_integer_valued_queries_must_be_on_the_grid():
    with pytest.raises(ValueError, match=r"index 1 is not a multiple of granularity 1.0"):
        Laplace(1.0)._release([1, 0.5], make_rng(0))
    rounded = Laplace(1.0, integer_valued=False, granularity=0.25)._release([0.3], make_rng(0))
    assert rounded[0] * 4 == round(rounded[0] * 4)
    with pytest.raises(ValueError, match="power of two"):
        Laplace(1.0, granularity=0.3)


def test_svt_halts_at_the_first_query_over_the_threshold():
    svt = AboveThreshold(1000.0, 10.0)
    assert svt._release([1, 5, 9.5, 12, 50], make_rng(0)) == 3
    assert svt._release([1, 2, 3], make_rng(0)) is None
    assert svt.noise_scale == pytest.approx(2 / 1000)


def test_exponential_top_k_and_report_noisy_max():
    scores = [5.0, 100.0, 3.0, 80.0, 90.0]
    assert ExponentialTopK(100.0, k=3)._release(scores, make_rng(0)) == [1, 4, 3]
    assert report_noisy_max(100.0)._release(scores, make_rng(0)) == [1]
    assert ExponentialTopK(1.0, monotonic=True).noise_scale == 1.0
    picks = ExponentialTopK(0.01, k=5)._release(scores, make_rng(1))
    assert sorted(picks) == [0, 1, 2, 3, 4]


def test_limited_domain_selects_clear_winners_and_nothing_from_a_flat_histogram():
    hist = np.zeros(200)
    hist[[7, 42, 99]] = [500, 400, 300]
    mech = LimitedDomainTopK(1.0, 1e-6, domain_size=20, k=5)
    assert mech._release(hist, make_rng(0)) == [7, 42, 99]
    flat = np.full(200, 50.0)
    assert mech._release(flat, make_rng(0)) == []
    small = LimitedDomainTopK(100.0, 1e-6, domain_size=20, k=2)
    assert small._release([1.0, 9.0, 5.0], make_rng(0)) == [1, 2]
    eps = epsilon_of(mech.event, 1e-5)
    assert eps == epsilon_of(ExponentialTopK(1.0, 5).event, 1e-5 - 1e-6)


def test_noisy_mean_is_accurate_with_a_large_budget_and_spends_its_epsilon():
    values = np.random.default_rng(0).uniform(0, 1, 5000)
    mech = NoisyMean(50.0, 0.0, 1.0)
    assert mech._release(values, make_rng(0)) == pytest.approx(values.mean(), abs=0.01)
    assert mech._release(values + 10, make_rng(0)) == pytest.approx(1.0, abs=0.01)  # clipped
    assert epsilon_of(NoisyMean(0.5, -1, 1).event, 1e-15) == pytest.approx(0.5, abs=5e-4)


def test_subsampled_histogram_counts_sampled_votes():
    votes = np.repeat([0, 1, 2], [3000, 1000, 0])
    noisy = SubsampledGaussianHistogram(1.0, 0.5)._release(Votes(votes, 3), make_rng(0))
    assert noisy == pytest.approx([1500, 500, 0], abs=100)
    with pytest.raises(ValueError, match=r"votes must lie in \[0, 3\); the vote at index 1"):
        SubsampledGaussianHistogram(1.0, 0.5)._release(Votes([0, 3], 3), make_rng(0))


@pytest.mark.parametrize("bad", [
    lambda: Gaussian(0.0), lambda: Laplace(-1.0), lambda: SubsampledGaussianHistogram(1, 1.5),
    lambda: LimitedDomainTopK(1.0, 0.0, 5, 2), lambda: LimitedDomainTopK(1.0, 1e-6, 2, 5),
    lambda: ExponentialTopK(1.0, k=0), lambda: NoisyMean(1.0, 1.0, 1.0),
])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError, match="must|need"):
        bad()


def test_value_mechanisms_keep_the_shape_of_a_matrix():
    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.privacy.mechanisms import Gaussian, Laplace
    from dpsynth.privacy.noise import NoiseSource

    ledger = PrivacyLedger(1e3, 1e-6, discretization=0.1)
    votes = np.arange(12).reshape(6, 2)
    for mechanism in (Gaussian(1.0, 1.0, 12), Laplace(1.0, 1.0, 12)):
        out = ledger.release("matrix", mechanism, votes, NoiseSource(0))
        assert out.shape == (6, 2)
