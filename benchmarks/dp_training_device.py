"""Seconds per DP-Adam step of `dp_finetune` (book-keeping clipping) on the CPU and on a GPU,
side by side in one run, at a batch the CPU barely reaches and the seed's batches approach.

    python benchmarks/dp_training_device.py [--batch 512] [--length 128] [--steps 10]
        [--cpu-steps 2] [--threads N]

The model has the shipped offline LM's shape (GPT-2, 4 layers, width 256, untied 8k
vocabulary) with random weights; the sequences are random token ids of full length. Each
device runs `dp_finetune` itself (Poisson batches, clipping, CPU-drawn keyed noise, AdamW,
the ledger's charge per step), after one warm-up step. Without a GPU only the CPU row is
printed.
"""

from __future__ import annotations

import argparse
import time


def seconds_per_step(device: str, batch: int, length: int, steps: int) -> float:
    import torch
    from dp_accounting import dp_event

    from dpsynth.backends.offline.model import build_model
    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.private.training.dp_training import DpTraining, dp_finetune

    n = batch * 8
    generator = torch.Generator().manual_seed(0)
    sequences = torch.randint(1, 8192, (n, length), generator=generator).tolist()
    model = build_model(8192, eos_id=0)
    event = dp_event.PoissonSampledDpEvent(1 / 8, dp_event.GaussianDpEvent(1.0))
    timings = []
    for count in (1, 1 + steps):  # the warm-up step's time is subtracted
        ledger = PrivacyLedger(1e6, 1e-5, discretization=0.1)
        config = DpTraining(steps=count, sampling_rate=1 / 8, noise_multiplier=1.0,
                            max_length=length, device=device)
        keys = iter(bytes([i % 256]) * 16 for i in range(count))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        dp_finetune(model, sequences, 0, config, ledger, "training", event,
                    next_key=lambda k=keys: next(k))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        timings.append(time.perf_counter() - started)
    return (timings[1] - timings[0]) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cpu-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = seconds_per_step("cpu", args.batch, args.length, args.cpu_steps)
    print(f"batch {args.batch}, length {args.length}, {torch.get_num_threads()} CPU threads")
    print(f"cpu: {cpu:.3f} s/step")
    if torch.cuda.is_available():
        gpu = seconds_per_step("cuda", args.batch, args.length, args.steps)
        print(f"{torch.cuda.get_device_name()}: {gpu:.3f} s/step; cpu / gpu = {cpu / gpu:.1f}x")


if __name__ == "__main__":
    main()
