"""The noise each mechanism draws has its claimed law and scale (Kolmogorov–Smirnov), and the
noise source is reproducible and resumable when seeded, secret when not."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from dpsynth.privacy import (
    AboveThreshold,
    ExponentialTopK,
    Gaussian,
    Laplace,
    NoiseSource,
    make_rng,
)

N = 20_000


def _jittered_cdf(pmf_support: np.ndarray, pmf: np.ndarray):
    """CDF of K + U for integer K with the given pmf and U ~ Uniform[0, 1): continuous, so the
    KS test is exact for discrete noise."""
    cdf = np.cumsum(pmf)

    def f(x):
        k = np.floor(x).astype(int)
        idx = np.clip(k - pmf_support[0], 0, len(pmf) - 1)
        below = np.where(k - 1 < pmf_support[0], 0.0, cdf[np.clip(idx - 1, 0, None)])
        inside = (k >= pmf_support[0]) & (k <= pmf_support[-1])
        return np.clip(below + np.where(inside, (x - k) * pmf[idx], 0.0), 0, 1)
    return f


def _discrete_pmf(kind: str, scale: float):
    support = np.arange(-int(60 * scale) - 60, int(60 * scale) + 61)
    logp = -np.abs(support) / scale if kind == "laplace" else -(support**2) / (2 * scale**2)
    p = np.exp(logp - logp.max())
    return support, p / p.sum()


def _ks_pvalue(noise: np.ndarray, kind: str, scale: float, seed: int = 0) -> float:
    jitter = np.random.default_rng(seed).random(noise.size)
    return stats.kstest(noise + jitter, _jittered_cdf(*_discrete_pmf(kind, scale))).pvalue


@pytest.mark.parametrize("seed", [0, None], ids=["seeded-numpy", "unseeded-opendp"])
@pytest.mark.parametrize(("kind", "scale"), [("laplace", 3.0), ("gaussian", 2.5),
                                             ("gaussian", 40.0)])
def test_value_noise_has_the_claimed_law_and_scale(seed, kind, scale):
    n = N if seed is not None else 4000  # the exact opendp path is slower; keep it small
    source = NoiseSource(seed, exact_max=4096)
    mech = Laplace(scale) if kind == "laplace" else Gaussian(scale)
    noise = mech._release(np.zeros(n, dtype=int), source)
    assert _ks_pvalue(noise, kind, scale) > 1e-4
    # the same test rejects noise of half the claimed scale
    assert _ks_pvalue(noise, kind, 2 * scale) < 1e-6


def test_noise_on_a_fine_grid_has_the_continuous_scale():
    mech = Gaussian(0.5, integer_valued=False, granularity=2.0**-8)
    noise = mech._release(np.full(N, 0.3), make_rng(4)) - 0.30078125  # 0.3 snapped to the grid
    assert stats.kstest(noise, stats.norm(scale=0.5).cdf).pvalue > 1e-4
    assert np.all(noise * 2**8 == np.rint(noise * 2**8))  # every output lies on the grid


def test_svt_and_gumbel_noise_have_their_scales():
    source = make_rng(5)
    svt = AboveThreshold(0.5, 0.0)
    assert stats.kstest(source.laplace(svt.noise_scale, N),
                        stats.laplace(scale=4.0).cdf).pvalue > 1e-4
    em = ExponentialTopK(0.25, 1)
    assert em.noise_scale == 8.0
    assert stats.kstest(source.gumbel(em.noise_scale, N),
                        stats.gumbel_r(scale=8.0).cdf).pvalue > 1e-4


def test_poisson_sampling_keeps_each_unit_at_the_rate():
    mask = make_rng(6).poisson_sample(N, 0.3)
    assert stats.binomtest(int(mask.sum()), N, 0.3).pvalue > 1e-4


def test_seeded_source_is_reproducible_and_resumes_the_same_stream():
    a = make_rng(42)
    first = a.discrete_gaussian(5.0, 10)
    state = json.loads(json.dumps(a.state_dict()))
    rest = a.discrete_laplace(5.0, 10)
    b = make_rng(42)
    assert np.array_equal(b.discrete_gaussian(5.0, 10), first)
    resumed = NoiseSource.from_state_dict(state)
    assert np.array_equal(resumed.discrete_laplace(5.0, 10), rest)
    assert not np.array_equal(make_rng(43).discrete_gaussian(5.0, 10), first)


def test_unseeded_source_never_records_its_randomness():
    source = make_rng(None)
    source.discrete_gaussian(5.0, 10_000)  # a large draw: numpy path with a secret seed
    assert source.state_dict() == {"seed": None, "draws": 0, "exact_max": 4096}
    a, b = make_rng(None).discrete_laplace(50.0, 20), make_rng(None).discrete_laplace(50.0, 20)
    assert not np.array_equal(a, b)


def test_invalid_seed_and_scale_are_named():
    with pytest.raises(ValueError, match="seed"):
        NoiseSource(-1)
    with pytest.raises(ValueError, match="noise scale"):
        make_rng(0).discrete_laplace(0.0, 3)
