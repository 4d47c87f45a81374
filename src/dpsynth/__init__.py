"""dpsynth: differentially private synthetic text with exact privacy accounting.

`dpsynth.synthesize(data, epsilon=..., recipe=...)` runs a recipe from Python and returns
a `SynthesisResult` (see `dpsynth.api`); `dpsynth run CONFIG` does the same from the shell.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["SynthesisResult", "__version__", "synthesize"]


def __getattr__(name: str) -> Any:
    # imported on first use, so that `import dpsynth` (and the CLI's start) stays light
    if name in ("synthesize", "SynthesisResult"):
        from dpsynth import api

        return getattr(api, name)
    raise AttributeError(f"module 'dpsynth' has no attribute {name!r}")
