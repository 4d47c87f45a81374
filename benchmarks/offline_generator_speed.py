"""Speed and length accuracy of the shipped offline generator, with sample outputs.

    python benchmarks/offline_generator_speed.py [--n 100] [--words 60] [--model DIR]

Target (issue 5): 100 samples of about 60 words in under 20 s on the 2-core CPU. Prints the
time of `generate` with 1 and with 2 torch threads side by side (on a busy shared machine two
threads can be slower than one: each op waits for the slower core), then the time of every
operation on the same batch with one thread, its ratio to that target, how far the lengths
land from their targets, and five outputs of each operation. The numbers are wall-clock and
include whatever else runs on the machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from dpsynth.backends.base import Condition
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.generator import OfflineGenerator

TARGET_SECONDS_PER_100 = 20.0
TOPICS = [("positive", ("acting", "story")), ("negative", ("plot", "boring")),
          (None, ("election", "minister")), (None, ("river", "village")),
          (None, ("football", "season")), ("positive", ("music", "beautiful"))]
KINDS = ["movie review", "news report", "encyclopedia article", "fiction"]


def conditions(n: int, words: int, rng: random.Random) -> list[Condition]:
    out = []
    for i in range(n):
        label, keywords = TOPICS[i % len(TOPICS)]
        kind = "movie review" if label else rng.choice(KINDS[1:])
        out.append(Condition(label=label, keywords=keywords, length=words, text=kind))
    return out


def length_report(texts: list[str], targets: list[int]) -> str:
    ratios = [fmt.count_words(t) / n for t, n in zip(texts, targets, strict=True)]
    inside = sum(0.7 <= r <= 1.3 for r in ratios) / len(ratios)
    return (f"length/target mean {statistics.mean(ratios):.2f} "
            f"min {min(ratios):.2f} max {max(ratios):.2f} within ±30%: {inside:.0%}")


def timed(label: str, fn, n: int) -> list[str]:
    start = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - start
    print(f"{label:<12} {n} texts in {dt:6.2f} s = {n / dt:6.1f} samples/s; "
          f"time per 100 / 20 s target = {dt * 100 / n / TARGET_SECONDS_PER_100:.2f}",
          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="model folder (default: the shipped one)")
    args = parser.parse_args()
    import torch

    rng = random.Random(args.seed)
    gen = OfflineGenerator(args.model, seed=args.seed, temperature=1.0, top_p=0.95,
                           batch_size=args.n)
    conds = conditions(args.n, args.words, rng)
    gen.generate(conds[:4])  # warm-up
    print(f"batch {args.n}, target {args.words} words, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start")
    for threads in (2, 1):
        torch.set_num_threads(threads)
        made = timed(f"generate/{threads}t", lambda: gen.generate(conds), args.n)
    print("one thread from here on")
    print("             " + length_report(made, [args.words] * args.n))
    rewritten = timed("rewrite", lambda: gen.rewrite(made, conds, strength=0.5), args.n)
    print("             " + length_report(rewritten, [fmt.count_words(t) for t in made]))
    masked = [" ".join("_" if rng.random() < 0.3 else w for w in t.split()) for t in made]
    filled = timed("fill", lambda: gen.fill(masked, conds), args.n)
    print("             " + length_report(filled, [fmt.count_words(t) for t in masked]))
    groups = [[made[i], made[(i + 1) % args.n]] for i in range(args.n)]
    unsized = [Condition(c.label, c.keywords, None, c.text) for c in conds]  # parents' mean
    children = timed("crossover", lambda: gen.crossover(groups, unsized), args.n)
    print("             " + length_report(children, [
        round((fmt.count_words(a) + fmt.count_words(b)) / 2) for a, b in groups]))
    ppl = timed("perplexity", lambda: list(gen.perplexity(made)), args.n)
    print(f"             median perplexity of generated texts {statistics.median(ppl):.1f}")

    picks = rng.sample(range(args.n), 5)
    for name, outs, inputs in (("generate", made, [str(conds[i]) for i in range(args.n)]),
                               ("rewrite (strength 0.5)", rewritten, made),
                               ("fill", filled, masked),
                               ("crossover", children, [" || ".join(g) for g in groups])):
        print(f"\n## {name}")
        for i in picks:
            print(f"- in:  {inputs[i]}\n  out: {outs[i]}")


if __name__ == "__main__":
    main()
