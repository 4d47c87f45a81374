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
