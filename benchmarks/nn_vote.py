"""Throughput of the nearest-neighbour vote against this machine's own GEMM throughput.

    python benchmarks/nn_vote.py [--voters 10000] [--candidates 2000,10000,160000] [--dim 384]
        [--labels 4] [--approximate]

The vote (`dpsynth.ops.nearest.grouped_nearest`: every voter's most similar candidate of its
own label) costs one GEMM of voters x candidates x dim plus an argmax. For each candidate
count this prints, measured in the same run on the same unit-normalised random embeddings:
the GEMM throughput (GFLOP/s of the bare voters @ candidates.T product, blocked as the vote
blocks it), the vote's throughput counted in the same FLOPs, and their ratio (goal >= 0.7).
Rows: the NumPy path, faiss' exact flat index (the default from
nearest.FAISS_MIN_CANDIDATES candidates on), and with --approximate the HNSW and IVF indexes
with their agreement with the exact answer. Wall-clock on a shared machine: the load average
is printed; the ratio, measured back to back, is the figure to read.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from dpsynth.ops import nearest

GOAL = 0.7


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def gemm(voters: np.ndarray, candidates: np.ndarray) -> None:
    for start in range(0, len(voters), nearest.BLOCK_ROWS):
        voters[start : start + nearest.BLOCK_ROWS] @ candidates.T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voters", type=int, default=10_000)
    parser.add_argument("--candidates", default="2000,10000,160000")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--labels", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--approximate", action="store_true", help="also HNSW and IVF")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    voters = unit(rng, args.voters, args.dim)
    voter_labels = rng.integers(0, args.labels, args.voters)
    print(f"{args.voters} voters, dim {args.dim}, {args.labels} labels; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at start; best of {args.repeats}")
    print(f"{'candidates':>10} {'search':<12} {'GEMM GFLOP/s':>12} {'vote GFLOP/s':>12} "
          f"{'ratio':>6} {'agree':>6}")
    worst = float("inf")
    for m in (int(x) for x in args.candidates.split(",")):
        cands = unit(rng, m, args.dim)
        cand_labels = rng.integers(0, args.labels, m)
        # the bare GEMM of the same shapes: per label, that label's voters x candidates
        groups = [(voters[voter_labels == g], cands[cand_labels == g])
                  for g in range(args.labels)]
        t_gemm = best_of(lambda groups=groups: [gemm(v, c) for v, c in groups], args.repeats)
        flops = sum(2.0 * len(v) * len(c) * args.dim for v, c in groups)
        exact = None
        searches = [("numpy", "exact", None)]
        if nearest._faiss() is not None:
            searches.append(("faiss-flat", "exact", 0))
            if args.approximate:
                searches += [("faiss-hnsw", "hnsw", None), ("faiss-ivf", "ivf", None)]
        for name, search, threshold in searches:
            saved = nearest.FAISS_MIN_CANDIDATES
            if name == "numpy":
                nearest.FAISS_MIN_CANDIDATES = 10**12
            elif threshold is not None:
                nearest.FAISS_MIN_CANDIDATES = threshold
            try:
                found = None

                def vote(search=search, cands=cands, cand_labels=cand_labels):
                    nonlocal found
                    found = nearest.grouped_nearest(voters, voter_labels, cands, cand_labels,
                                                    search)
                t_vote = best_of(vote, args.repeats)
            finally:
                nearest.FAISS_MIN_CANDIDATES = saved
            if exact is None:
                exact = found
            agree = float(np.mean(found == exact))
            ratio = t_gemm / t_vote
            default = ("faiss-flat" if nearest._faiss() is not None
                       and m / args.labels >= nearest.FAISS_MIN_CANDIDATES else "numpy")
            if name == default:
                worst = min(worst, ratio)
                name += "*"
            print(f"{m:>10} {name:<12} {flops / t_gemm / 1e9:12.1f} {flops / t_vote / 1e9:12.1f} "
                  f"{ratio:6.2f} {agree:6.3f}", flush=True)
    print(f"\n* the default search at that size. Worst default vote / GEMM ratio {worst:.2f} "
          f"(goal >= {GOAL}); load average "
          f"{os.getloadavg()[0]:.1f} at end. The HNSW/IVF ratios include building the index "
          "each call, as a vote does.")


if __name__ == "__main__":
    main()
