"""docs/config.md's parameter tables are generated from the models and cannot drift."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from dpsynth.methods.registry import RECIPES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "config_docs.py"


def _script():
    spec = importlib.util.spec_from_file_location("config_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_match_the_models():
    """Fails when a parameter is added, removed or changed without `python
    scripts/config_docs.py` being run."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_parameter_of_every_recipe_is_in_its_table(recipe):
    doc = (ROOT / "docs" / "config.md").read_text()
    section = doc.split(f"\n### {recipe}\n", 1)[1].split("\n### ", 1)[0]
    fields = RECIPES[recipe].Params.model_fields
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(fields)
    for row, info in zip(rows, fields.values(), strict=True):
        assert info.description and info.description in row


def test_a_changed_model_is_caught(monkeypatch):
    script = _script()
    doc = (ROOT / "docs" / "config.md").read_text()
    assert script.updated(doc) == doc
    params = RECIPES["pe"].Params
    monkeypatch.setattr(params.model_fields["n_output"], "description", "changed")
    assert script.updated(doc) != doc
