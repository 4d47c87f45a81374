"""Every private read and every ledger call sits in `private/` or `privacy/` (and the private
dataset type itself in `data/`): a reviewer finds each release at an op's call site, and a
recipe cannot touch private texts, labels or the ledger directly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dpsynth"
ALLOWED = ("private", "privacy", "data")
PRIVATE_READS = {"texts", "label_codes"}  # PrivateDataset's gated accessors
LEDGER_CALLS = {"release", "charge"}


def _offences(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Access":
            found.append(f"line {node.lineno}: names Access")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in PRIVATE_READS and node.args:
                found.append(f"line {node.lineno}: reads private data with .{name}(...)")
            if name in LEDGER_CALLS:
                found.append(f"line {node.lineno}: calls the ledger's .{name}(...)")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py")
                  if p.relative_to(SRC).parts[0] not in ALLOWED)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_private_read_or_ledger_call_outside_private(path):
    assert not _offences(ast.parse(path.read_text(encoding="utf-8"))), path


def test_the_check_catches_what_it_forbids():
    source = ("def run(ctx):\n"
              "    codes = ctx.private.label_codes(Access.LEDGERED_OP)\n"
              "    return ctx.ledger.release('s', m, codes, ctx.noise)\n")
    assert len(_offences(ast.parse(source))) == 3
    assert len(_modules()) > 20


@pytest.mark.parametrize("path", sorted((SRC / "methods").glob("*.py")), ids=lambda p: p.name)
def test_recipes_ask_the_backend_factory_for_models(path):
    """No recipe names a concrete model class: it asks `dpsynth.backends` for one."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {m for m in imported
                if m.startswith(("dpsynth.backends.offline", "transformers", "torch"))}
