"""Write docs/config.md's parameter tables from the config models, so they cannot drift.

    python scripts/config_docs.py          # rewrite the generated part of docs/config.md
    python scripts/config_docs.py --check  # exit 1 when docs/config.md is out of date

Each recipe's table comes from its `Params` model (`dpsynth.methods.registry.RECIPES`), the
backend tables from `dpsynth.backends.config`: key, type, default, allowed values and the
field's description. tests/test_config_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dpsynth.config_reference import BEGIN, END, render

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "config.md"


def updated(doc: str) -> str:
    """`doc` with its generated part replaced (appended when it has none)."""
    if BEGIN in doc:
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1] if END in rest else ""
        return head + render() + tail.lstrip("\n")
    return doc.rstrip("\n") + "\n\n" + render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/config.md is out of date, writing nothing")
    args = parser.parse_args(argv)
    current = DOC.read_text(encoding="utf-8")
    fresh = updated(current)
    if args.check:
        if fresh != current:
            print(f"{DOC} is out of date: run python scripts/config_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
