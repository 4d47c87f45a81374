"""SmolLM2-135M-Instruct on every CPU engine, side by side in one run: which one the smollm
generator uses is chosen by this measurement (issue 41).

    python benchmarks/generator_speed.py [--engines ct2-int8,torch-float32,...]
        [--batches 1,8,32] [--new-tokens 64] [--threads N] [--ppl-texts 48]

Each engine runs in its own process (so its peak memory is its own), on the same prompts
(the generic prompt set's generate, ag_news' public label names, 40 words), sampling at
temperature 1 with a fixed seed, each row stopping at the chat template's end of turn. Per
engine and batch size: completion tokens/s (tokens actually written, not padding), texts/s,
and the ratio to transformers float32 `generate` at the same batch. Per engine: load time,
peak resident memory while generating (the whole process, tokenizer included; scoring comes
after), and perplexity on held-out public text (IMDB test reviews, first 128 tokens)
against float32's (quality must stay within 2%). The bound: the measured float32
GEMM rate at the same thread count over 2 x params FLOPs per token; each cell's ratio to it.
Wall-clock on a shared machine: the load average is printed at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_TEXT = ROOT.parent / "shared" / "data" / "imdb" / "test.csv"
LABELS = ("World", "Sports", "Business", "Sci/Tech")
BASELINE = "torch-float32"


def gemm_flops(threads: int, size: int = 1024, repeats: int = 5) -> float:
    """Float32 matrix-multiply FLOP/s at `threads` (the best of a few runs)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size**3 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def prompts(tokenizer, n: int) -> list[list[int]]:
    from dpsynth.backends.base import Condition
    from dpsynth.backends.generators.prompt_sets import load_prompt_set

    prompt_set = load_prompt_set("generic")
    out = []
    for i in range(n):
        chat = prompt_set.generate(Condition(label=LABELS[i % len(LABELS)], length=40))
        out.append(tokenizer.apply_chat_template(chat.messages(), tokenize=True,
                                                 add_generation_prompt=True)["input_ids"])
    return out


def public_rows(tokenizer, n: int, tokens: int = 128) -> list[list[int]]:
    import pandas as pd

    texts = pd.read_csv(PUBLIC_TEXT)["text"].head(n)
    return [tokenizer(t)["input_ids"][:tokens] for t in texts]


def child(engine_name: str, args: argparse.Namespace) -> dict:
    """Time one engine; everything it reports is measured in this process."""
    import numpy as np
    from transformers import AutoTokenizer

    from dpsynth.backends.smollm import weights
    from dpsynth.backends.smollm.engines import load_engine

    tokenizer = AutoTokenizer.from_pretrained(weights.hf_folder())
    started = time.perf_counter()
    engine = load_engine(engine_name, args.threads)
    load_s = time.perf_counter() - started
    engine.sample(prompts(tokenizer, 1), 4, 1.0, 1.0, 0)  # warm-up
    cells = {}
    for batch in args.batches:
        rows = prompts(tokenizer, max(batch, args.min_outputs))
        written, elapsed = 0, 0.0
        for start in range(0, len(rows), batch):
            t0 = time.perf_counter()
            out = engine.sample(rows[start:start + batch], args.new_tokens, 1.0, 1.0, start)
            elapsed += time.perf_counter() - t0
            written += sum(len(o) for o in out)
        cells[batch] = {"tokens_s": written / elapsed, "texts_s": len(rows) / elapsed,
                        "mean_tokens": written / len(rows)}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    scored = public_rows(tokenizer, args.ppl_texts)
    logp = engine.logprobs(scored, [1] * len(scored))
    ppl = float(np.exp(-logp.sum() / sum(len(r) - 1 for r in scored)))
    return {"engine": engine_name, "load_s": load_s, "cells": cells, "perplexity": ppl,
            "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="torch-float32,torch-bfloat16,torch-int8,"
                        "ct2-float32,ct2-int8,ct2-int8-smooth")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--min-outputs", type=int, default=4,
                        help="outputs timed at each batch size (several batches of 1)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ppl-texts", type=int, default=48)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    from dpsynth.backends.smollm.engines import free_threads

    args.threads = args.threads or free_threads()
    print(f"load at start: {os.getloadavg()}, threads {args.threads}, "
          f"{len(os.sched_getaffinity(0))} cores", flush=True)
    flops = gemm_flops(args.threads)
    params = 134_515_008
    bound = flops / (2 * params)
    print(f"float32 GEMM {flops / 1e9:.1f} GFLOP/s -> bound {bound:.0f} tokens/s "
          f"(2 x {params / 1e6:.1f}M params per token)", flush=True)
    results = {}
    for name in args.engines.split(","):
        cmd = [sys.executable, __file__, "--child", name, "--threads", str(args.threads),
               "--batches", ",".join(map(str, args.batches)), "--new-tokens",
               str(args.new_tokens), "--min-outputs", str(args.min_outputs),
               "--ppl-texts", str(args.ppl_texts)]
        done = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        if done.returncode:
            print(f"{name}: failed\n{done.stderr[-2000:]}", flush=True)
            continue
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name}: done (load {os.getloadavg()[0]:.2f})", flush=True)
    print(table(results, args.batches, bound))
    print(f"load at end: {os.getloadavg()}")


def table(results: dict, batches: list[int], bound: float) -> str:
    base = results.get(BASELINE)
    lines = ["| engine | batch | tokens/s | texts/s | × fp32 generate | × bound | "
             "perplexity (vs fp32) | peak MB | load s |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        for batch in batches:
            cell = r["cells"][str(batch)] if str(batch) in r["cells"] else r["cells"][batch]
            ratio = ""
            if base:
                base_cell = base["cells"].get(str(batch)) or base["cells"][batch]
                ratio = f"{cell['tokens_s'] / base_cell['tokens_s']:.2f}"
            quality = f"{r['perplexity']:.2f}"
            if base:
                quality += f" ({(r['perplexity'] / base['perplexity'] - 1) * 100:+.1f}%)"
            lines.append(f"| {name} | {batch} | {cell['tokens_s']:.1f} | {cell['texts_s']:.2f} | "
                         f"{ratio} | {cell['tokens_s'] / bound:.2f} | {quality} | "
                         f"{r['peak_mb']:.0f} | {r['load_s']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
