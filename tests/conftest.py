"""Shared fixtures: small generated data so tests never depend on ../shared."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """../shared/data, or a clean skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    """A tiny offline-LM folder in the shipped layout (tokenizer, untied GPT-2, keyword
    table), built once per session; tests only read it."""
    from tests.tiny_lm import build_tiny_lm, one_torch_thread

    with one_torch_thread():
        return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture(scope="session")
def tiny_inversion(tmp_path_factory, tiny_lm) -> tuple[Path, Path]:
    """(tiny LM folder, tiny inversion decoder folder over it) for 32-d HashEmbedder
    embeddings, built once per session."""
    from tests.tiny_lm import INVERSION_DIM, build_tiny_inversion, one_torch_thread

    with one_torch_thread():
        return tiny_lm, build_tiny_inversion(tmp_path_factory.mktemp("inversion"), tiny_lm,
                                             INVERSION_DIM, steps=60, n_texts=16)


@pytest.fixture(autouse=True)
def _private_embeddings_out_of_core(monkeypatch):
    """Every test embeds private records onto an unlinked temporary file: the path a large set
    takes in a real run (dpsynth.data.scratch), exercised on the small sets tests use."""
    monkeypatch.setattr("dpsynth.data.scratch.IN_MEMORY_BYTES", 0)


@pytest.fixture(autouse=True)
def _fresh_dpsynth_logger():
    """The CLI routes the `dpsynth` logger to its own handlers; give each test a clean one so
    caplog sees every record whatever ran before."""
    yield
    logger = logging.getLogger("dpsynth")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
