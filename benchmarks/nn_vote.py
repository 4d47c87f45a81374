"""Throughput of the nearest-neighbour vote against this machine's own GEMM throughput.

    python benchmarks/nn_vote.py [--voters 10000] [--candidates 2000,10000,160000] [--dim 384]
        [--labels 4] [--approximate]

The vote (`dpsynth.private.engine.nearest.grouped_nearest`: every voter's most similar
candidate of its own label) costs one GEMM of voters x candidates x dim plus an argmax; the
exact search runs it in float64 on integer-grid embeddings, so that scores are exact (the
module docstring says why). For each candidate count this prints, measured in the same run on
the same unit-normalised random embeddings: the throughput of the bare float32 and float64
GEMMs (GFLOP/s of voters @ candidates.T, blocked as the vote blocks it), the vote's throughput
counted in the same FLOPs, and its ratio to the float64 GEMM (goal >= 0.7) and to the float32
one (what exactness costs against a float32 vote). Rows: the exact search, and with
--approximate the HNSW and IVF indexes with their agreement with the exact answer. Wall-clock
on a shared machine: the load average is printed; the ratios, measured back to back, are the
figures to read.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from dpsynth.private.engine import nearest

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
        for first in range(0, len(candidates), nearest.CANDIDATE_TILE):
            voters[start : start + nearest.BLOCK_ROWS] @ candidates[
                first : first + nearest.CANDIDATE_TILE].T


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
    print(f"{'candidates':>10} {'search':<8} {'f32 GFLOP/s':>11} {'f64 GFLOP/s':>11} "
          f"{'vote GFLOP/s':>12} {'/f64':>5} {'/f32':>5} {'agree':>6}")
    worst = float("inf")
    for m in (int(x) for x in args.candidates.split(",")):
        cands = unit(rng, m, args.dim)
        cand_labels = rng.integers(0, args.labels, m)
        # the bare GEMM of the same shapes: per label, that label's voters x candidates
        groups = [(voters[voter_labels == g], cands[cand_labels == g])
                  for g in range(args.labels)]
        t_f32 = best_of(lambda groups=groups: [gemm(v, c) for v, c in groups], args.repeats)
        wide = [(v.astype(np.float64), c.astype(np.float64)) for v, c in groups]
        t_f64 = best_of(lambda wide=wide: [gemm(v, c) for v, c in wide], args.repeats)
        flops = sum(2.0 * len(v) * len(c) * args.dim for v, c in groups)
        exact = None
        searches = ["exact"]
        if nearest._faiss() is not None and args.approximate:
            searches += ["hnsw", "ivf"]
        for search in searches:
            found = None

            def vote(search=search, cands=cands, cand_labels=cand_labels):
                nonlocal found
                found = nearest.grouped_nearest(voters, voter_labels, cands, cand_labels, search)
            t_vote = best_of(vote, args.repeats)
            if exact is None:
                exact = found
            agree = float(np.mean(found == exact))
            if search == "exact":
                worst = min(worst, t_f64 / t_vote)
            print(f"{m:>10} {search:<8} {flops / t_f32 / 1e9:11.1f} {flops / t_f64 / 1e9:11.1f} "
                  f"{flops / t_vote / 1e9:12.1f} {t_f64 / t_vote:5.2f} {t_f32 / t_vote:5.2f} "
                  f"{agree:6.3f}", flush=True)
    print(f"\nWorst exact vote / float64 GEMM ratio {worst:.2f} (goal >= {GOAL}); load average "
          f"{os.getloadavg()[0]:.1f} at end. The HNSW/IVF ratios include building the index "
          "each call, as a vote does.")


if __name__ == "__main__":
    main()
