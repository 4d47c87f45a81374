"""benchmarks/results/README.md indexes every current result, names only files that exist, and
names a driver in the repository for each benchmark (issue 37: results as a record)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"

LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`]+)`")
FILE_NAME = re.compile(r"^[\w./-]+\.(?:md|csv|txt|json|py|yaml)$")
DRIVER = re.compile(r"benchmarks/\w+\.py")


def index_text() -> str:
    return INDEX.read_text(encoding="utf-8")


def linked(text: str) -> list[str]:
    """Relative link targets, anchors dropped (web links are not files of this repository)."""
    return [t.split("#", 1)[0] for t in LINK.findall(text)
            if not t.startswith(("http://", "https://", "#"))]


def named_in_code(text: str) -> list[str]:
    """File paths in backticks; patterns (`*`, `{a,b}`, DATASET) and absolute paths outside
    the repository are not names of a file."""
    names = []
    for span in CODE.findall(text):
        for word in span.split():
            if FILE_NAME.match(word) and not word.startswith("/") and not re.search(
                    r"[*{}]|DATASET|<", word):
                names.append(word)
    return names


def resolve(name: str) -> Path:
    """A bare name or `history/...` is relative to benchmarks/results; any other path to the
    repository root."""
    if "/" not in name or name.startswith("history/"):
        return RESULTS / name
    return ROOT / name


def current_files() -> list[str]:
    return sorted(p.name for p in RESULTS.iterdir() if p.is_file() and p.name != "README.md")


def test_every_current_result_file_is_linked_from_the_index():
    targets = set(linked(index_text()))
    missing = [name for name in current_files() if name not in targets]
    assert not missing, f"benchmarks/results/README.md does not link {missing}: add an entry " \
                        f"or `git mv` them to benchmarks/results/history/"


def test_every_file_the_index_names_exists():
    text = index_text()
    links = [RESULTS / t for t in linked(text)]
    named = [resolve(n) for n in named_in_code(text)]
    assert len(links) > 50 and len(named) > 10  # the parsing found the index's names
    missing = sorted({str(p.relative_to(ROOT)) for p in links + named if not p.exists()})
    assert not missing, f"the index names files that do not exist: {missing}"


def test_every_driver_the_index_names_is_in_the_repository():
    drivers = set(DRIVER.findall(index_text()))
    assert {"benchmarks/utility.py", "benchmarks/grid_metrics.py"} <= drivers
    missing = sorted(d for d in drivers if not (ROOT / d).is_file())
    assert not missing, f"drivers named in the index but not in the repository: {missing}"


def test_every_entry_names_its_files_and_an_existing_driver():
    sections = re.split(r"^## ", index_text(), flags=re.M)[1:]
    entries = [s for s in sections if re.match(r"\d+\. ", s)]
    assert len(entries) >= 10
    for entry in entries:
        title = entry.splitlines()[0]
        files = re.search(r"^- Files: (.*?)(?=^- )", entry, flags=re.M | re.S)
        driver = re.search(r"^- Driver[^:]*: (.*?)(?=^- |\Z)", entry, flags=re.M | re.S)
        assert files and linked(files.group(1)), f"entry {title!r} links no result file"
        assert driver and any((ROOT / d).is_file() for d in DRIVER.findall(driver.group(1))), \
            f"entry {title!r} names no driver under benchmarks/ that exists"


def test_history_holds_no_current_file_twice():
    history = {p.name for p in (RESULTS / "history").iterdir() if p.is_file()}
    assert not history & set(current_files()) - {"README.md"}
