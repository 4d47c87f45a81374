"""The privacy boundary is a package: every private read and every ledger call sits in
`private/` or `privacy/` (and the private dataset type itself in `data/`), only those and
`run/` (which builds the ledger and the noise source from the journal and hands them to
`private.Private`) import the private dataset's access, the ledger and the noise source, and
a recipe reaches private data through `ctx.private` alone. A reviewer finds each release at
one method of `dpsynth.private.Private`; a recipe cannot touch private texts, labels or the
ledger."""

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


def _imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The modules a file imports from, and the names it imports."""
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules, names


def _parsed(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


PRIVATE_SIDE = {"modules": ("dpsynth.privacy.ledger", "dpsynth.privacy.noise"),
                "names": {"Access", "PrivacyLedger", "NoiseSource"}}
"""The private dataset's access, the ledger and the noise source: by module or by name (the
`dpsynth.privacy` and `dpsynth.data` packages re-export them)."""
IMPORTERS = ALLOWED
"""The packages that may import them: the boundary's own."""
RUN_MODULES = ("run/runner.py", "run/resume.py", "run/outputs.py")
"""And the run's three modules that handle them: resume creates the ledger and the noise
source from the folder's journal, the runner hands them to `private.Private`, the outputs
write privacy.json from the ledger. Any other module of `run/` (folder, models, a new one)
is checked; the API, the CLI and the report get what a run spent from `run.RunOutputs.spend`
or `privacy.spend`, never a ledger class."""


def _importing_modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py")
                  if p.relative_to(SRC).parts[0] not in IMPORTERS
                  and p.relative_to(SRC).as_posix() not in RUN_MODULES)


def _offending_imports(tree: ast.AST, modules: tuple[str, ...], names: set[str]) -> set[str]:
    imported, imported_names = _imports(tree)
    return ({m for m in imported if m.startswith(modules)} | (imported_names & names))


@pytest.mark.parametrize("path", _importing_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_only_the_private_side_imports_access_the_ledger_and_the_noise(path):
    assert not _offending_imports(_parsed(path), PRIVATE_SIDE["modules"],
                                  PRIVATE_SIDE["names"]), path


RECIPES_NEVER = ("dpsynth.privacy.ledger", "dpsynth.privacy.noise", "dpsynth.data.private",
                 "dpsynth.private.releases", "dpsynth.private.engine",
                 "dpsynth.private.boundary")
"""What `methods/` never imports: it asks `ctx.private` (typed through `dpsynth.private`)."""


@pytest.mark.parametrize("path", sorted((SRC / "methods").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_recipes_import_nothing_of_the_private_side(path):
    assert not _offending_imports(_parsed(path), RECIPES_NEVER,
                                  PRIVATE_SIDE["names"] | {"PrivateDataset"}), path


def test_the_import_rule_catches_what_it_forbids():
    source = ("from dpsynth.data import Access\n"
              "from dpsynth.privacy import NoiseSource\n"
              "from dpsynth.privacy.ledger import Charge\n"
              "import dpsynth.private.releases.voting\n")
    assert _offending_imports(ast.parse(source), RECIPES_NEVER, PRIVATE_SIDE["names"]) == {
        "Access", "NoiseSource", "dpsynth.privacy.ledger", "dpsynth.private.releases.voting"}
    assert _offending_imports(ast.parse("from dpsynth.privacy.ledger import PrivacyLedger\n"),
                              PRIVATE_SIDE["modules"], PRIVATE_SIDE["names"]) == {
        "PrivacyLedger", "dpsynth.privacy.ledger"}
    checked = {str(p.relative_to(SRC)) for p in _importing_modules()}
    assert {"api.py", "cli.py", "report/inputs.py", "methods/base.py", "run/folder.py",
            "run/models.py"} <= checked
    assert all((SRC / module).exists() for module in RUN_MODULES)


@pytest.mark.parametrize("path", sorted((SRC / "methods").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(SRC)))
def test_recipes_ask_the_backend_factory_for_models(path):
    """No recipe names a concrete model class: it asks `dpsynth.backends` for one."""
    imported, _ = _imports(_parsed(path))
    assert not {m for m in imported
                if m.startswith(("dpsynth.backends.offline", "transformers", "torch"))}
