"""What the data is worth, in one line: downstream accuracy and macro-F1 on the user's
held-out records, each beside always answering the most common label (on skewed labels a
set whose classifier answers the majority for everything matches its accuracy and falls far
below on macro-F1: issue 41).

A classifier trained on the synthetic set is scored on real labelled records the run never
read (`held_out.path`). The figure depends on those records, so it is reported as computed
from them: private-only, like every figure of `dpsynth eval` on a real split.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from dpsynth.backends.factory import build_embedder
from dpsynth.config import RunConfig
from dpsynth.evaluate.suite import EvalConfig, evaluate
from dpsynth.evaluate.tables import read_text_table


@dataclass(frozen=True)
class HeldOutScore:
    accuracy: float
    macro_f1: float
    majority: float
    """The accuracy of always answering the held-out records' most common label."""
    majority_macro_f1: float
    """Its macro-F1: 2s / ((1 + s)·K) for a majority share s of K labels."""
    n_held_out: int
    path: Path

    def line(self) -> str:
        return (f"downstream accuracy {self.accuracy:.3f}, macro-F1 {self.macro_f1:.3f} on the "
                f"{self.n_held_out} held-out records of {self.path.name} (always answering the "
                f"most common label: {self.majority:.3f}, macro-F1 "
                f"{self.majority_macro_f1:.3f}; computed from that split, not a DP release)")


SCORED = "held_out.json"
"""In OUTPUT/eval: the last score and what it was computed from, so a rerun of a finished
run with the same held-out records and embedder says the score again instead of recomputing
it (half a minute with MiniLM)."""


def score_held_out(config: RunConfig, synthetic: Path) -> HeldOutScore:
    """Score `synthetic` on `config.held_out`; the metrics go to OUTPUT/eval like `dpsynth
    eval`'s. The score of the same files and embedder is read back, not recomputed."""
    assert config.held_out is not None
    path = config._resolved(config.held_out.path)
    inputs = {"held_out": config.held_out.model_dump(mode="json"),
              "embedder": config.backends.embedder.model_dump(mode="json"),
              "digests": [_digest(path), _digest(synthetic)]}
    record = config.output.dir / "eval" / SCORED
    try:
        scored = json.loads(record.read_text(encoding="utf-8"))
        if scored["inputs"] == inputs:
            return HeldOutScore(**{**scored["score"], "path": path})
    except (OSError, ValueError, KeyError, TypeError):
        pass
    score = _score(config, path, synthetic)
    record.write_text(json.dumps({"inputs": inputs,
                                  "score": asdict(score) | {"path": str(path)}}, indent=2),
                      encoding="utf-8")
    return score


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if file.is_file():
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _score(config: RunConfig, path: Path, synthetic: Path) -> HeldOutScore:
    test = read_text_table(path, config.data.text_column, config.data.label_column,
                           require_labels=True)
    eval_config = EvalConfig(embedder=config.backends.embedder, mauve=False, next_token=None,
                             seed=config.seed or 0)
    embedder = build_embedder(config.backends.embedder, base_dir=config.base_dir)
    result = evaluate(read_text_table(synthetic), test, config=eval_config, embedder=embedder,
                      output=config.output.dir / "eval")
    counts = Counter(test.labels)
    share = max(counts.values()) / len(test.labels)
    scores = result.metrics["utility"]["classification"]
    return HeldOutScore(scores["accuracy"], scores["macro_f1"], share,
                        2 * share / ((1 + share) * len(counts)), len(test.labels), path)
