"""Speed of the shipped offline generator, today's sampler against the reference one, side by
side in one run, with length accuracy, perplexity of what each writes, and sample outputs.

    python benchmarks/offline_generator_speed.py [--n 100] [--words 60] [--model DIR]
        [--ops generate,rewrite,fill,crossover] [--threads N] [--repeats 1]

Two generators on the same model and seed: `engine="reference"` (the plain sampling loop:
every row runs until the batch's longest is done, every row has a guidance contrast row when
any has one, batches in the given order) and `engine="fast"` (the default: a lean KV-cached
decoder, rows leave the batch as they finish, contrast rows only for labelled requests,
length-bucketed batches). Both draw each row from the same distribution (tested in
tests/backends/test_offline_sampling.py); the check here is that what they write has the same
lengths and the same perplexity under the model. Each operation runs reference then fast (then
fast then reference with --repeats 2), and the speed-up is the ratio of the summed times.
Targets: issue 5, 100 samples of about 60 words in under 20 s on the 2-core CPU; issue 18,
the fast engine at >= 4x the reference's samples/s. Wall-clock on a shared machine: the load
average is printed at start and end; only the ratio measured in one run is meaningful, and
on a machine busier than its cores the CPU-time ratio (process time) is the steadier one.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from pathlib import Path

from dpsynth.backends.base import Condition
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.generator import OfflineGenerator, use_available_cores

ENGINES = ("reference", "fast", "int8")
HELD_OUT = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "test.csv"
TARGET_SECONDS_PER_100 = 20.0
SPEEDUP_TARGET = 4.0
TOPICS = [("positive", ("acting", "story")), ("negative", ("plot", "boring")),
          (None, ("election", "minister")), (None, ("river", "village")),
          (None, ("football", "season")), ("positive", ("music", "beautiful"))]
KINDS = ["movie review", "news report", "encyclopedia article", "fiction"]


def conditions(n: int, words: int, rng: random.Random) -> list[Condition]:
    """Labelled (guided) and unlabelled requests, lengths spread over 0.25-1.75 x `words`."""
    out = []
    for i in range(n):
        label, keywords = TOPICS[i % len(TOPICS)]
        kind = "movie review" if label else rng.choice(KINDS[1:])
        length = max(3, round(words * rng.uniform(0.25, 1.75)))
        out.append(Condition(label=label, keywords=keywords, length=length, text=kind))
    return out


def length_report(texts: list[str], targets: list[int]) -> str:
    ratios = [fmt.count_words(t) / max(n, 1) for t, n in zip(texts, targets, strict=True)]
    inside = sum(0.7 <= r <= 1.3 for r in ratios) / len(ratios)
    return (f"length/target mean {statistics.mean(ratios):.2f} "
            f"min {min(ratios):.2f} max {max(ratios):.2f} within ±30%: {inside:.0%}")


def held_out(gen: OfflineGenerator, n: int) -> None:
    """Token perplexity of held-out public text (imdb test, read as unconditioned documents)
    under the transformers model, the fast decoder, and the int8 decoder: the first two
    must agree; the third says what quantisation costs."""
    import torch

    from dpsynth.backends.offline.decoder import Decoder
    from dpsynth.backends.offline.sampling import _left_pad

    if not HELD_OUT.is_file() or n <= 0:
        print(f"held-out perplexity: skipped ({HELD_OUT} missing)")
        return
    import pandas as pd

    texts = pd.read_csv(HELD_OUT)["text"].sample(n, random_state=0).tolist()
    head = gen._encode(fmt.generation_prompt(fmt.Fields()))
    rows = [head + gen._encode(" " + fmt.clean(t))[: gen.context - len(head)] for t in texts]
    out = [f"transformers {math.exp(sum(gen._nll(texts)[0]) / sum(gen._nll(texts)[1])):.3f}"]
    for name, int8 in (("fast decoder", False), ("int8 decoder", True)):
        nll = count = 0.0
        for start in range(0, n, 32):
            part = rows[start : start + 32]
            ids, valid = _left_pad(part, gen.classes.eos)
            logits = Decoder(gen.model, int8=int8).sequence_logits(ids, valid)
            target = ids[:, 1:]
            body = valid[:, 1:].clone()
            for r, p in enumerate(part):  # score the document, not the condition header
                body[r, : ids.shape[1] - len(p) + len(head) - 1] = False
            losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), target,
                                                       reduction="none")
            nll += float((losses * body).sum())
            count += float(body.sum())
        out.append(f"{name} {math.exp(nll / count):.3f}")
    print(f"held-out perplexity ({n} imdb test texts): " + ", ".join(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--words", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=None, help="model folder (default: the shipped one)")
    parser.add_argument("--ops", default="generate,rewrite,fill,crossover")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: the cores available)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="2: also run fast before reference, to cancel drifts in load")
    parser.add_argument("--samples", type=int, default=3, help="outputs printed per op")
    parser.add_argument("--held-out", type=int, default=200,
                        help="public texts (imdb test) for the held-out perplexity")
    args = parser.parse_args()
    import torch

    rng = random.Random(args.seed)
    gens = {e: OfflineGenerator(args.model, seed=args.seed, temperature=1.0, top_p=0.95,
                                batch_size=64, engine=e) for e in ENGINES}
    threads = use_available_cores() if args.threads is None else args.threads
    torch.set_num_threads(threads)
    conds = conditions(args.n, args.words, rng)
    for g in gens.values():
        g.generate(conds[:4])  # warm-up
    print(f"{args.n} requests of {args.words} words on average (0.25-1.75x), batch 64, "
          f"{threads} torch threads, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start", flush=True)

    held_out(gens["fast"], args.held_out)
    seed_texts = gens["fast"].generate(conds)  # inputs of the other operations
    masked = [" ".join("_" if rng.random() < 0.3 else w for w in t.split()) for t in seed_texts]
    groups = [[seed_texts[i], seed_texts[(i + 1) % args.n]] for i in range(args.n)]
    unsized = [Condition(c.label, c.keywords, None, c.text) for c in conds]  # parents' mean
    ops = {
        "generate": (lambda g: g.generate(conds), [c.length for c in conds]),
        "rewrite": (lambda g: g.rewrite(seed_texts, conds, strength=0.5),
                    [fmt.count_words(t) for t in seed_texts]),
        "fill": (lambda g: g.fill(masked, conds), [fmt.count_words(t) for t in masked]),
        "crossover": (lambda g: g.crossover(groups, unsized),
                      [round((fmt.count_words(a) + fmt.count_words(b)) / 2) for a, b in groups]),
    }
    totals = {e: [0.0, 0.0] for e in ENGINES}
    outputs: dict[str, dict[str, list[str]]] = {}
    for op in args.ops.split(","):
        fn, targets = ops[op]
        spent = {e: [0.0, 0.0] for e in ENGINES}  # wall, CPU seconds
        for r in range(args.repeats):
            for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
                wall, cpu = time.perf_counter(), time.process_time()
                outputs.setdefault(op, {})[engine] = fn(gens[engine])
                spent[engine][0] += time.perf_counter() - wall
                spent[engine][1] += time.process_time() - cpu
        for engine in ENGINES:
            dt, cpu = (x / args.repeats for x in spent[engine])
            totals[engine][0] += dt
            totals[engine][1] += cpu
            texts = outputs[op][engine]
            ppl = statistics.median(gens["reference"].perplexity(texts))
            print(f"{op:<10} {engine:<9} {args.n / dt:6.1f} samples/s ({dt:6.2f} s wall, "
                  f"{cpu:6.2f} s CPU; per 100 / 20 s target "
                  f"{dt * 100 / args.n / TARGET_SECONDS_PER_100:.2f}); median perplexity "
                  f"{ppl:5.1f}; {length_report(texts, targets)}", flush=True)
        for engine in ENGINES[1:]:
            print(f"{op:<10} speed-up {engine}/reference: wall "
                  f"{spent['reference'][0] / spent[engine][0]:.2f}x, CPU "
                  f"{spent['reference'][1] / spent[engine][1]:.2f}x", flush=True)
    print("\nall operations: " + ", ".join(
        f"{e} {totals[e][0]:.1f} s wall ({totals[e][1]:.1f} s CPU)" for e in ENGINES))
    for engine in ENGINES[1:]:
        print(f"speed-up {engine}/reference: wall {totals['reference'][0] / totals[engine][0]:.2f}x"
              f", CPU {totals['reference'][1] / totals[engine][1]:.2f}x "
              f"(target >= {SPEEDUP_TARGET:g}x)")
    print(f"load average {os.getloadavg()[0]:.1f} at end")

    picks = rng.sample(range(args.n), args.samples)
    for op, by_engine in outputs.items():
        print(f"\n## {op}")
        for i in picks:
            print(f"- {conds[i]}\n  reference: {by_engine['reference'][i]}\n"
                  f"  fast:      {by_engine['fast'][i]}")


if __name__ == "__main__":
    main()
