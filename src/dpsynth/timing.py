"""How long a plan's generator outputs will take, from the backend's throughput measured now.

`dpsynth plan --estimate-time` builds the configured generator (without its cache, which
would answer from disk), warms it up with one output, then times one batch of `generate`
calls on a public condition (the first name of the public label set and the config's
`data.document`, nothing else). No
private record is read and nothing is released. The estimate is that rate times the plan's
generator outputs; it says what it leaves out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from dpsynth.backends import build_generator
from dpsynth.backends.base import Condition, Generator
from dpsynth.backends.config import GeneratorConfig, OpenAIChatConfig
from dpsynth.config import RunConfig


@dataclass(frozen=True)
class Throughput:
    seconds_per_output: float
    batch: int
    load_seconds: float
    words: int


def batch_size(cfg: GeneratorConfig, generator: Generator) -> int:
    """Outputs timed at once: enough to fill the backend's parallelism (an OpenAI-compatible
    server's requests in flight, a local model's forward batch), so the rate is the one a
    run sees on its large batches."""
    if isinstance(cfg, OpenAIChatConfig):
        return max(8, cfg.concurrency)
    batch = generator.batch_size or getattr(cfg, "batch_size", None)
    return max(8, int(batch or 8))


WORDS = 30
"""Target length of the timed outputs. A run's lengths are DP releases not known at plan time;
generation time grows about linearly with length, and the estimate says what it assumed."""


def public_condition(config: RunConfig, labels: list[str], words: int = WORDS) -> Condition:
    """What a run asks its generator for, from public facts only: the label set's first name
    (as the prompts name it) and the kind of document."""
    return Condition(label=config.data.label_name(labels[0]) if labels else None, length=words,
                     text=config.data.document)


def measure(cfg: GeneratorConfig, base_dir: Path | None, condition: Condition) -> Throughput:
    """Time one batch of `generate` on `condition`, which must be public (`public_condition`)."""
    cfg = cfg.model_copy(update={"cache": None, "seed": cfg.seed if cfg.seed is not None else 0})
    started = time.perf_counter()
    generator = build_generator(cfg, base_dir=base_dir)
    generator.generate([condition])  # lazy loading and warm-up are not throughput
    load = time.perf_counter() - started
    n = batch_size(cfg, generator)
    started = time.perf_counter()
    generator.generate([condition] * n)
    return Throughput((time.perf_counter() - started) / n, n, load, condition.length)


def describe(total_outputs: int, rate: Throughput) -> str:
    """One line: the estimate, how it was measured, and what it leaves out."""
    return (f"time estimate: about {duration(total_outputs * rate.seconds_per_output)} of "
            f"generation, at {rate.seconds_per_output:.3g} s per {rate.words}-word output "
            f"measured just now on one batch of {rate.batch} (loading and a warm-up output, "
            f"{rate.load_seconds:.1f} s, not counted), under this machine's current load. "
            "Assumes rewrite, fill and crossover cost what generate does and time grows with "
            "length; embedding, voting and DP training are not included.")


def duration(seconds: float) -> str:
    """Seconds as a reader says them: s, min or h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
