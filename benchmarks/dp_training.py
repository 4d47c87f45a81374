"""Time of one DP-Adam step beside a non-private step on the same batch and model, for
dpsynth's book-keeping clipping (`bk`, the default), opacus' hook mode and opacus' ghost
clipping, with each mode's peak memory (ctcl issue benchmark).

    python benchmarks/dp_training.py [--batch 32] [--length 128] [--steps 5] [--layers 4]
        [--rounds 3] [--threads 1]

Each mode runs in its own process so that peak resident memory is its own. The modes run
one after the other, `--rounds` times over; each ratio is taken within a round and the median
over rounds is printed, so a shared machine's load drifting between modes biases it less.
One thread by default: on a shared 2-core machine a 2-thread step waits on the other jobs at
every parallel region (measured at load ~10: the non-private step took 7.8 s with 2 threads,
3.1 s with 1), which penalises the mode with more, smaller operations; `--threads 2` on an
idle machine. The model has the offline LM's shape (GPT-2, untied embeddings, vocabulary 8k)
with random weights. Every mode runs the code `dp_finetune` runs (`ops/dp_training.py`): the
same loss, clipping, noise and AdamW step; the non-private step is the plain backward and
AdamW step.

The non-private step is also set against the machine's own float32 GEMM throughput, measured
in the same process at the same thread count: torch's FLOP counter gives the step's forward
and backward FLOPs, and the floor is those FLOPs at the GEMM's rate (goal: step <= 2x floor).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

MODES = ("non-private", "bk", "hooks", "ghost")
GEMM_SIZE = 2048
FLOOR_GOAL = 2.0


def gemm_flops_per_s(threads: int, repeats: int = 5) -> float:
    """Best float32 GEMM rate of a square product, the machine's attainable peak."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(GEMM_SIZE, GEMM_SIZE), torch.randn(GEMM_SIZE, GEMM_SIZE)
    best = float("inf")
    for _ in range(repeats + 1):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * GEMM_SIZE**3 / best


def measure(mode: str, batch: int, length: int, steps: int, layers: int,
            threads: int) -> dict:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from dpsynth.backends.offline.model import build_model
    from dpsynth.private.training.dp_training import (
        DpTraining,
        SequenceLoss,
        dp_step,
        shifted_batch,
    )

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(8192, 0, n_layer=layers, n_embd=256, n_head=4, n_positions=length)
    model.train()
    ids = torch.randint(1, 8192, (batch * 4, length))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = ids[:batch]
    inputs, targets, positions = shifted_batch(x, torch.full((batch,), length))
    if mode == "non-private":
        criterion = SequenceLoss()

        def step() -> None:
            logits = model(input_ids=inputs, position_ids=positions).logits
            criterion(logits, targets).backward()
            optimizer.step()
            optimizer.zero_grad()

        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            criterion(model(input_ids=inputs, position_ids=positions).logits,
                      targets).backward()
        optimizer.zero_grad()
        extra = {"flops": counter.get_total_flops(), "gemm_flops_s": gemm_flops_per_s(threads)}
    else:
        extra = {}
        config = DpTraining(steps=steps, sampling_rate=batch / len(ids), noise_multiplier=1.0,
                            max_grad_norm=1.0, max_length=length, grad_sample_mode=mode)
        loader = DataLoader(TensorDataset(ids, torch.full((len(ids),), length)),
                            batch_size=batch)
        private = dp_step(model, optimizer, loader, config, torch.Generator())

        def step() -> None:
            private.step(inputs, targets, positions)
    times, cpu = [], []
    for i in range(steps + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        step()
        if i:  # the first step warms up
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return {"mode": mode, "step_s": sorted(times)[len(times) // 2],
            "cpu_s": sorted(cpu)[len(cpu) // 2],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.batch, args.length, args.steps, args.layers,
                                 args.threads)))
        return
    rounds = [[_measure_in_process(mode, args) for mode in MODES] for _ in range(args.rounds)]
    print(f"batch {args.batch}, length {args.length}, {args.layers} layers, {args.threads} "
          f"threads, median of {args.steps} steps per mode, {args.rounds} interleaved rounds; "
          f"CPU is the process's CPU time per step (less sensitive to other jobs' load)")
    print("| mode | step (s) | ratio to non-private | CPU (s) | CPU ratio | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for i, mode in enumerate(MODES):
        steps = [r[i]["step_s"] for r in rounds]
        ratios = [r[i]["step_s"] / r[0]["step_s"] for r in rounds]
        cpu = [r[i]["cpu_s"] for r in rounds]
        cpu_ratios = [r[i]["cpu_s"] / r[0]["cpu_s"] for r in rounds]
        peak = max(r[i]["peak_rss_mb"] for r in rounds)
        print(f"| {mode} | {statistics.median(steps):.3f} | {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}–{max(ratios):.2f}) | {statistics.median(cpu):.3f} | "
              f"{statistics.median(cpu_ratios):.2f} (range {min(cpu_ratios):.2f}–"
              f"{max(cpu_ratios):.2f}) | {peak:.0f} |")
    floors = [r[0]["flops"] / r[0]["gemm_flops_s"] for r in rounds]
    ratios = [r[0]["step_s"] * r[0]["gemm_flops_s"] / r[0]["flops"] for r in rounds]
    print(f"\nnon-private step: {rounds[0][0]['flops'] / 1e9:.1f} GFLOP forward and backward; "
          f"float32 GEMM {statistics.median(r[0]['gemm_flops_s'] for r in rounds) / 1e9:.1f} "
          f"GFLOP/s ({GEMM_SIZE}x{GEMM_SIZE}, {args.threads} threads) -> floor "
          f"{statistics.median(floors):.3f} s; step / floor {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}; goal <= {FLOOR_GOAL:g})")


def _measure_in_process(mode: str, args: argparse.Namespace) -> dict:
    done = subprocess.run([sys.executable, __file__, "--mode", mode, "--batch",
                           str(args.batch), "--length", str(args.length), "--steps",
                           str(args.steps), "--layers", str(args.layers),
                           "--threads", str(args.threads)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])

if __name__ == "__main__":
    main()
