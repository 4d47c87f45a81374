"""Library noise the user cannot act on stays off stderr."""

from __future__ import annotations

import os
import subprocess
import sys

LOAD = """
import sys, torch
{setup}
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]]))
"""
NOISE = ("Loading weights", "loss_type=None")


def _stderr(folder, setup: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRANSFORMERS_", "HF_"))} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", LOAD.format(setup=setup), str(folder)],
                          capture_output=True, text=True, env=env, check=True)
    return done.stderr


def test_setup_logging_silences_transformers_bars_and_warnings(tiny_lm):
    loud = _stderr(tiny_lm, "")
    assert all(noise in loud for noise in NOISE)  # what the libraries print on their own
    quiet = _stderr(tiny_lm, "from dpsynth.logs import setup_logging; setup_logging('info')")
    assert not any(noise in quiet for noise in NOISE), quiet


def test_already_imported_libraries_are_told_directly(tiny_lm):
    late = ("import transformers\nfrom dpsynth.logs import setup_logging\n"
            "setup_logging('warning')")
    quiet = _stderr(tiny_lm, late)
    assert not any(noise in quiet for noise in NOISE), quiet
