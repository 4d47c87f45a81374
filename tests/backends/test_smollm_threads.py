"""How many threads SmolLM2's engines take when the config names none."""

import os

import pytest

from dpsynth.backends.smollm import engines


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})


def test_an_idle_machine_gets_every_core_and_a_busy_one_gets_one(two_cores, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert engines.free_threads() == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    assert engines.free_threads() == 1


def test_omp_num_threads_wins_over_the_load(two_cores, monkeypatch):
    """A job told to keep to one thread keeps to it even on an idle machine: a second job
    started later would otherwise find three busy threads on two cores."""
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert engines.free_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert engines.free_threads() == 2  # never more than the cores it may use


@pytest.mark.parametrize("unset", ["", "0", "two"])
def test_an_unusable_omp_num_threads_falls_back_to_the_load(two_cores, monkeypatch, unset):
    monkeypatch.setenv("OMP_NUM_THREADS", unset)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert engines.free_threads() == 2
