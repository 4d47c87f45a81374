"""Where every DP release draws its randomness.

Released *values* get integer-valued noise only (discrete Laplace, discrete Gaussian), added
to queries that are integers or have been snapped to a power-of-two grid, so no output can
leak the input through floating-point artefacts (Mironov 2012). Two samplers back it:

* unseeded (production), release of at most `exact_max` values: opendp's exact samplers,
  driven by the operating system's CSPRNG;
* seeded (tests, reproducible runs) or larger vectors: vectorised samplers of the same
  distributions over numpy's PCG64DXSM — a geometric difference for the discrete Laplace,
  Canonne–Kamath–Steinke rejection for the discrete Gaussian — seeded from the given seed or,
  unseeded, from 256 fresh bits of `secrets` per release.

Selections (SVT's halting index, top-k indices) and Poisson subsampling use the numpy stream.

A seeded source is a counter-based stream: release `i` always draws from the generator keyed
by `(seed, i)`, so `state_dict()` (JSON) lets a resumed run continue the same stream. An
unseeded source never writes its randomness anywhere: its state says only "unseeded", and a
resumed run draws fresh randomness.
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import numpy as np

_OPENDP_READY = False


def _opendp():
    global _OPENDP_READY
    import opendp.prelude as dp

    if not _OPENDP_READY:
        dp.enable_features("contrib")
        _OPENDP_READY = True
    return dp


class NoiseSource:
    """The noise stream of a run: reproducible when `seed` is given, cryptographic otherwise."""

    def __init__(self, seed: int | None = None, *, exact_max: int = 4096) -> None:
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        self.seed = seed
        self.exact_max = exact_max
        self.draws = 0

    @property
    def seeded(self) -> bool:
        return self.seed is not None

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state; holds the seed only when the user gave one."""
        return {"seed": self.seed, "draws": self.draws if self.seeded else 0,
                "exact_max": self.exact_max}

    def continue_at(self, draws: int) -> None:
        """Skip to `draws`, where a journaled release left the stream: a seeded run resumes
        it without drawing that release again (an unseeded one draws fresh anyway)."""
        if self.seeded:
            self.draws = int(draws)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> NoiseSource:
        source = cls(state["seed"], exact_max=int(state.get("exact_max", 4096)))
        source.draws = int(state["draws"]) if source.seeded else 0
        return source

    def _generator(self) -> np.random.Generator:
        """A fresh generator for the next draw: keyed by (seed, draw index) when seeded."""
        index = self.draws
        self.draws += 1
        if self.seed is None:
            return np.random.Generator(np.random.PCG64DXSM(secrets.randbits(256)))
        sequence = np.random.SeedSequence(self.seed, spawn_key=(index,))
        return np.random.Generator(np.random.PCG64DXSM(sequence))

    def _exact(self, size: int) -> bool:
        return self.seed is None and size <= self.exact_max

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        """Integers with pmf ∝ exp(-|k|/scale)."""
        _check_scale(scale)
        if self._exact(size):
            dp = _opendp()
            meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)),
                                     dp.l1_distance(T=int), scale=float(scale))
            return np.asarray(meas([0] * size), dtype=np.int64)
        return _discrete_laplace(self._generator(), scale, size)

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        """Integers with pmf ∝ exp(-k²/2σ²)."""
        _check_scale(sigma)
        if self._exact(size):
            dp = _opendp()
            meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=int)),
                                      dp.l2_distance(T=int), scale=float(sigma))
            return np.asarray(meas([0] * size), dtype=np.int64)
        return _discrete_gaussian(self._generator(), sigma, size)

    def laplace(self, scale: float, size: int) -> np.ndarray:
        """Continuous Laplace noise, for comparisons whose outcome is an index only (SVT)."""
        _check_scale(scale)
        return self._generator().laplace(0.0, scale, size)

    def gumbel(self, scale: float, size: int) -> np.ndarray:
        """Gumbel noise, for selections whose outcome is an index set only (top-k)."""
        _check_scale(scale)
        return self._generator().gumbel(0.0, scale, size)

    def random_key(self, nbytes: int = 16) -> bytes:
        """Secret key material, e.g. for keyed hashes that assign private units to buckets."""
        return self._generator().bytes(nbytes)

    def poisson_sample(self, n: int, rate: float) -> np.ndarray:
        """Boolean mask: each of `n` units is kept independently with probability `rate`."""
        if not 0 < rate <= 1:
            raise ValueError(f"sampling rate must be in (0, 1], got {rate}")
        return self._generator().random(n) < rate


def make_rng(seed: int | None = None) -> NoiseSource:
    """The noise source of a run; `seed=None` in production."""
    return NoiseSource(seed)


def _check_scale(scale: float) -> None:
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"noise scale must be finite and > 0, got {scale}")


def _discrete_laplace(gen: np.random.Generator, scale: float, size: int) -> np.ndarray:
    # The difference of two i.i.d. geometrics on {0, 1, ...} with success 1 - e^{-1/scale}.
    p = -math.expm1(-1.0 / scale)
    return gen.geometric(p, size).astype(np.int64) - gen.geometric(p, size).astype(np.int64)


def _discrete_gaussian(gen: np.random.Generator, sigma: float, size: int) -> np.ndarray:
    # Canonne, Kamath & Steinke (2020), Alg. 3: discrete Laplace proposals with
    # t = floor(σ) + 1, accepted with probability exp(-(|y| - σ²/t)² / 2σ²).
    t = math.floor(sigma) + 1
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        batch = max(64, int(1.3 * (size - filled)))
        y = _discrete_laplace(gen, t, batch)
        accept = gen.random(batch) < np.exp(-((np.abs(y) - sigma**2 / t) ** 2) / (2 * sigma**2))
        kept = y[accept][: size - filled]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out
