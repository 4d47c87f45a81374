"""Seconds per training step of SmolLM2-135M's shape, DP (`dp_finetune`, book-keeping
clipping) against non-private (plain AdamW on the mean loss), side by side in one run, for LoRA
adapters and for the whole model but its tied embedding, on the CPU and on a GPU when torch
sees one.

    python benchmarks/smollm_dp_step.py [--batch 16] [--length 64] [--steps 3]
        [--devices cpu,cuda] [--threads N] [--physical-batches 16,64] [--stack-layers auto,off]

The model is SmolLM2-135M-Instruct's configuration (Llama, 30 blocks, width 576, tied 49k
vocabulary) with random weights, so no weights are needed; sequences are random ids of full
length. `--physical-batches` times the DP step at each number of records per pass (the
device's default when not given), and `--stack-layers` with book-keeping clipping's
same-shaped layers stacked (on), each alone (off) or the device's default (auto). The DP
step is the whole of `dp_finetune` (Poisson batch, clipping, CPU-drawn keyed noise, AdamW,
the ledger's charge); the non-private step is forward, backward and AdamW on the same
batches. Each timing subtracts one warm-up step.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
               rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=100000.0,
               bos_token_id=1, eos_token_id=2, pad_token_id=2)


def model_(lora_rank: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpsynth.backends.smollm.trainable import LORA_TARGETS

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2))
    if not lora_rank:
        return model
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank,
                                            lora_dropout=0.0, target_modules=list(LORA_TARGETS)))


def frozen(lora_rank: int) -> tuple[str, ...]:
    from dpsynth.backends.smollm.trainable import TIED_EMBEDDING

    return () if lora_rank else (TIED_EMBEDDING,)


STACKING = {"auto": None, "on": True, "off": False}


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def dp_seconds(device: str, lora_rank: int, batch: int, length: int, steps: int,
               physical: int | None = None, stack: bool | None = None) -> float:
    import torch
    from dp_accounting import dp_event

    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.private.training.dp_training import DpTraining, dp_finetune

    sequences = torch.randint(3, 49152, (batch * 8, length),
                              generator=torch.Generator().manual_seed(0)).tolist()
    event = dp_event.PoissonSampledDpEvent(1 / 8, dp_event.GaussianDpEvent(1.0))
    timings = []
    for count in (1, 1 + steps):
        model = model_(lora_rank)
        ledger = PrivacyLedger(1e9, 1e-5, discretization=0.1)
        config = DpTraining(steps=count, sampling_rate=1 / 8, noise_multiplier=1.0,
                            max_length=length, device=device, frozen=frozen(lora_rank),
                            expected_batch_size=batch, physical_batch_size=physical,
                            stack_layers=stack)
        keys = iter(i.to_bytes(16, "big") for i in range(count))
        sync(device)
        started = time.perf_counter()
        dp_finetune(model, sequences, 2, config, ledger, "training", event,
                    next_key=lambda k=keys: next(k))
        sync(device)
        timings.append(time.perf_counter() - started)
    return (timings[1] - timings[0]) / steps


def plain_seconds(device: str, lora_rank: int, batch: int, length: int, steps: int) -> float:
    import torch

    from dpsynth.private.training.dp_training import SequenceLoss, _trainable

    model = model_(lora_rank).to(device).train()
    optimizer = torch.optim.AdamW(_trainable(model, frozen(lora_rank)), lr=1e-4)
    ids = torch.randint(3, 49152, (batch, length), generator=torch.Generator().manual_seed(1))
    inputs, targets = ids[:, :-1].to(device), ids[:, 1:].to(device)
    loss = SequenceLoss()
    timings = []
    for count in (1, 1 + steps):
        sync(device)
        started = time.perf_counter()
        for _ in range(count):
            loss(model(input_ids=inputs).logits, targets).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync(device)
        timings.append(time.perf_counter() - started)
    return (timings[1] - timings[0]) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--devices", default="cpu,cuda")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--physical-batches", default="", help="records per pass, comma-"
                        "separated (default: the device's)")
    parser.add_argument("--stack-layers", default="auto", help="comma-separated: auto, on, off")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    devices = [d for d in args.devices.split(",") if d == "cpu" or torch.cuda.is_available()]
    physicals = [int(b) for b in args.physical_batches.split(",") if b] or [None]
    print(f"SmolLM2-135M shape, random weights; batch {args.batch} x {args.length} tokens; "
          f"{torch.get_num_threads()} CPU threads; load {os.getloadavg()[0]:.1f}")
    for device in devices:
        name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
        for rank in (args.lora_rank, 0):
            what = f"LoRA r={rank}" if rank else "whole model but the tied embedding"
            plain = plain_seconds(device, rank, args.batch, args.length, args.steps)
            for physical, stack in itertools.product(physicals, args.stack_layers.split(",")):
                dp = dp_seconds(device, rank, args.batch, args.length, args.steps, physical,
                                STACKING[stack])
                print(f"{name}, {what}, {physical or 'default'} records a pass, stacking "
                      f"{stack}: non-private {plain:.3f} s/step, DP {dp:.3f} s/step, DP / "
                      f"non-private = {dp / plain:.2f}x", flush=True)


if __name__ == "__main__":
    main()
