"""Canary exposure of a recipe end to end: plant canaries, run, look for them in the output.

    python benchmarks/canary_exposure.py CONFIG [--k 20] [--repeats 1] [--seed 0]
        [--generator-json '{"name": "openai", "model": "m", "dry_run": true}'] [--out DIR]

Plants k canaries (and keeps k never-planted references) in a copy of the config's private
file, runs `dpsynth run` on the config pointed at that copy, and prints the exposure of the
planted canaries in the synthetic output (membership AUC, exposure in bits, verbatim copies).
A DP recipe should leave the AUC near 0.5 and no verbatim copy. The canaries are pseudo-words,
not private text; the planted copy of the private file lives in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from dpsynth.evaluate.canaries import canary_exposure, plant_canaries_in_file
from dpsynth.evaluate.tables import read_text_table

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    config_path = Path(args.config).resolve()
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    data = config["data"]
    source = Path(data["path"])
    source = source if source.is_absolute() else config_path.parent / source
    with tempfile.TemporaryDirectory(prefix="dpsynth-canaries-") as tmp:
        planted_path = Path(tmp) / f"planted{source.suffix}"
        canaries = plant_canaries_in_file(
            source, planted_path, args.k, args.seed, data.get("text_column", "text"),
            data.get("label_column"), data.get("user_column"), args.repeats)
        data["path"] = str(planted_path)
        if args.repeats > 1:
            data["duplicates"] = "keep"
            if data.get("user_column"):
                data["max_records_per_user"] = max(args.repeats,
                                                   data.get("max_records_per_user", 1))
        if args.generator_json:
            config.setdefault("backends", {})["generator"] = json.loads(args.generator_json)
        _absolute_backend_paths(config, config_path.parent)
        run_dir = Path(tmp) / "run"
        config["output"] = {**config.get("output", {}), "dir": str(run_dir), "format": "csv"}
        config["seed"] = args.seed
        run_config = Path(tmp) / "config.yaml"
        run_config.write_text(yaml.safe_dump(config), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "dpsynth", "run", str(run_config),
                               "--log-level", "warning"], capture_output=True, text=True,
                              cwd=ROOT)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            print(f"run failed: {lines[-1] if lines else done.returncode}", file=sys.stderr)
            return 1
        synthetic = read_text_table(run_dir / "synthetic.csv", label_column=None)
        result = {"config": str(config_path), "repeats": args.repeats, "seed": args.seed,
                  "synthetic_records": len(synthetic),
                  **canary_exposure(canaries, synthetic.texts)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"canary-exposure-{config_path.stem}.json").write_text(json.dumps(result, indent=2))
    print("| " + " | ".join(result) + " |\n|" + "---|" * len(result))
    print("| " + " | ".join(_fmt(v) for v in result.values()) + " |")
    return 0


def _absolute_backend_paths(config: dict, base: Path) -> None:
    """The run config moves to a temporary folder: backend paths that name files beside the
    original config are made absolute so that they still resolve."""
    for backend in config.get("backends", {}).values():
        for key in ("model", "cache", "prompts"):
            value = backend.get(key) if isinstance(backend, dict) else None
            if isinstance(value, str) and not Path(value).is_absolute() \
                    and (base / value).exists():
                backend[key] = str((base / value).resolve())


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a dpsynth run config (YAML)")
    parser.add_argument("--k", type=int, default=20, help="canaries planted")
    parser.add_argument("--repeats", type=int, default=1, help="copies of each canary")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generator-json", default=None,
                        help="replace backends.generator with this JSON object")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
