"""DP decoding's cost per text on this CPU, side by side: texts decoded one at a time against
texts decoded together in lockstep (`texts_together`, `forward_batch`), on the same batches
of real records, through the release's own code (`GroupScores`, `DisjointSequences`).

    OMP_NUM_THREADS=1 python benchmarks/dp_decoding_speed.py [--dataset ag_news] \\
        [--texts 16] [--batch-size 16] [--max-tokens 32] \
        [--settings 1x16:float32,8x64:float32,8x64:bfloat16]

Each setting `GxF:P` decodes the same `texts` requests (the recipe's default prompts, labels
in turn, `batch-size` records of the label each) with G texts together in passes of F rows,
seeded noise, SmolLM2-135M-Instruct in precision P on `torch.get_num_threads()` threads. The
noise is drawn in another order when G differs, so the texts differ; the cost is compared
per drawn token. Prints the load before and after; the ratios are the point, measured in one
run, not the absolute seconds.

`--agreement N` prints instead how far bfloat16 moves each token's law from float32's: the
total variation between softmax(u) of the two precisions, along paths sampled from float32's
law, for the first N requests (clip 1, `max-tokens` tokens each).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ag_news")
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--texts", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-example-tokens", type=int, default=64)
    parser.add_argument("--agreement", type=int, default=0)
    parser.add_argument("--settings", default="1x16:float32,8x64:float32,8x64:bfloat16",
                        help="comma-separated GxF:P: G texts together, F rows a pass, "
                        "precision P")
    args = parser.parse_args()
    import dataclasses

    import pandas as pd
    import torch

    from dpsynth.backends.generators.context_lm import SLOT, hf_context_lm
    from dpsynth.backends.smollm.weights import hf_folder
    from dpsynth.methods.dp_decoding import (
        PROMPT,
        PUBLIC_PROMPT,
        SYSTEM,
        UNDESCRIBED,
        _fill,
    )
    from dpsynth.privacy.mechanisms import DisjointSequences, ExponentialSample
    from dpsynth.privacy.noise import NoiseSource
    from dpsynth.private.releases.decoding import DecodingSetup, TextRequest, _LazySources

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(f"load before {os.getloadavg()}", flush=True)
    lm = dataclasses.replace(hf_context_lm(hf_folder(), "SmolLM2-135M-Instruct"),
                             system=SYSTEM)
    frame = pd.read_csv(Path(args.data_root) / args.dataset / "train.csv")
    labels = sorted(frame["label"].astype(str).unique())
    requests, batches = [], []
    for i in range(args.texts):
        label = labels[i % len(labels)]
        words = {"{label}": label, "{document}": UNDESCRIBED}
        requests.append(TextRequest(i % len(labels), i // len(labels),
                                    _fill(PUBLIC_PROMPT, words),
                                    _fill(PROMPT, words).replace("{example}", SLOT)))
        pool = frame[frame["label"].astype(str) == label]["text"].astype(str).tolist()
        start = (i // len(labels)) * args.batch_size
        batches.append(pool[start : start + args.batch_size])
    clip = 1.0
    if args.agreement:
        setup = DecodingSetup(args.batch_size, clip, 50, args.max_example_tokens, 64,
                              args.max_tokens, 256, 1)
        gaps = agreement(lm.at_precision("float32"), lm.at_precision("bfloat16"), setup,
                         requests[: args.agreement], batches[: args.agreement])
        print(f"total variation between float32's and bfloat16's law of a token, over "
              f"{gaps.size} tokens of {args.agreement} texts: mean {gaps.mean():.3f}, median "
              f"{np.median(gaps):.3f}, max {gaps.max():.3f}", flush=True)
        return
    step = ExponentialSample(1.0, 2 * clip / args.batch_size)
    first = None
    for setting in args.settings.split(","):
        shape, precision = setting.split(":")
        together, forward = (int(x) for x in shape.split("x"))
        setup = DecodingSetup(args.batch_size, clip, 50, args.max_example_tokens, forward,
                              args.max_tokens, 256, together)
        mechanism = DisjointSequences(step, args.max_tokens, "benchmark")
        sources = _LazySources(lm.at_precision(precision), setup, requests, batches)
        started = time.perf_counter()
        drawn = mechanism._release(sources, NoiseSource(0))
        wall = time.perf_counter() - started
        tokens = sum(len(t) for t in drawn)
        per_token = wall / tokens
        first = first or per_token
        print(f"{precision:8s} texts_together {together:3d}, forward_batch {forward:4d}: "
              f"{wall:7.1f} s for "
              f"{len(drawn)} texts, {tokens} tokens: {wall / len(drawn):6.2f} s a text, "
              f"{1000 * per_token:6.1f} ms a token; speed-up per token {first / per_token:.2f}×",
              flush=True)
    print(f"load after {os.getloadavg()}", flush=True)


def agreement(lm, other, setup, requests, batches) -> np.ndarray:
    """Per token, the total variation between the laws softmax(u) the two LMs give, along
    paths drawn from the first LM's law (seeded)."""
    from dpsynth.private.releases.decoding import GroupScores

    rng, gaps = np.random.default_rng(0), []
    for request, batch in zip(requests, batches, strict=True):
        a, b = (GroupScores(x, setup, [request], [batch]) for x in (lm, other))
        drawn: list[int] = []
        for _ in range(setup.max_tokens):
            (ids, u), (ids2, u2) = a.next_scores([drawn])[0], b.next_scores([drawn])[0]
            union = np.union1d(ids, ids2)
            laws = []
            for i, v in ((ids, u), (ids2, u2)):
                full = np.full(union.size, -np.inf)
                full[np.searchsorted(union, i)] = v
                z = np.exp(full - full.max())
                laws.append(z / z.sum())
            gaps.append(0.5 * np.abs(laws[0] - laws[1]).sum())
            drawn.append(int(union[rng.choice(union.size, p=laws[0])]))
    return np.array(gaps)


if __name__ == "__main__":
    main()
