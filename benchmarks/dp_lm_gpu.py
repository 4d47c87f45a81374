"""dpft on SmolLM2-135M-Instruct at the seed's scale, on a GPU: DP-Adam through `dp_finetune`
(book-keeping clipping, the ledger's charge per step) on the documents `SmolLMTrainable`
builds, at the noise dpft's own budget plan gives; then sampling on the GPU with transformers'
`generate` from the prompts dpft asks, cleaned as the smollm generator cleans. Writes one CSV
(text,label) per configuration, for `benchmarks/score_synthetic.py` to score on the CPU.

    python benchmarks/dp_lm_gpu.py --train ag_news/train.csv --out DIR
        [--epsilons 1,4] [--steps 200] [--batch 128] [--n 1000] [--lora-rank 16] [--seed 0]

Without a GPU it runs on the CPU (slowly). The labels are the CSV's, used as their names. The
label distribution is released as dpft releases it (Gaussian counts at the planned σ); a
`floor` file holds the same number of samples from the public model, untrained.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Facts:
    """The public facts dpft's budget plan needs."""

    label_names: tuple[str, ...]
    n_units: int
    records_per_unit: int = 1

    @property
    def has_labels(self) -> bool:
        return True


def plan(facts: Facts, epsilon: float, steps: int, batch: int, lora_rank: int):
    from dpsynth.config import RecipeConfig
    from dpsynth.methods.registry import build_recipe

    recipe = build_recipe(RecipeConfig(name="dpft", params={
        "steps": steps, "batch_size": batch, "lora_rank": lora_rank}), None)
    delta = 1 / (facts.n_units * math.log(facts.n_units))
    return recipe.budget_plan(facts, epsilon, delta), delta


def sample(model, lm, tokenizer, conditions, device, seed, batch=250, max_new_tokens=128):
    import torch

    from dpsynth.backends.generators.output_cleaning import clean_reply

    torch.manual_seed(seed)
    model.eval()
    out = []
    end = lm.pad_id
    for start in range(0, len(conditions), batch):
        prompts = [lm.prompt_ids(label, ()) for label in conditions[start:start + batch]]
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), end, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16,
                                             enabled=device.startswith("cuda")):
            rows = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                  do_sample=True, temperature=0.7, top_p=0.9, top_k=0,
                                  max_new_tokens=max_new_tokens, eos_token_id=end,
                                  pad_token_id=end)[:, width:].tolist()
        for row in rows:
            row = row[:row.index(end)] if end in row else row
            out.append(clean_reply(tokenizer.decode(row, skip_special_tokens=True), None, ()))
    return out


def write(path: Path, texts, labels) -> int:
    from dpsynth.backends.base import FAILED

    kept = [(t, label) for t, label in zip(texts, labels, strict=True) if t != FAILED]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(kept)
    return len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np
    import pandas as pd
    import torch

    from dpsynth.backends.smollm.trainable import SmolLMTrainable
    from dpsynth.methods.parts.toolbox import allocate
    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.privacy.stages import LABEL_HISTOGRAM, TRAINING
    from dpsynth.private.training.dp_training import DpTraining, dp_finetune

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.read_csv(args.train)
    names = tuple(sorted(frame["label"].astype(str).unique()))
    facts = Facts(names, len(frame))
    lm = SmolLMTrainable(args.lora_rank)
    tokenizer = lm._tokenizer
    documents = [lm.document(str(label), (), str(text))
                 for text, label in zip(frame["text"], frame["label"], strict=True)]
    rng = np.random.default_rng(args.seed)
    counts = np.array([(frame["label"].astype(str) == n).sum() for n in names], float)

    started = time.perf_counter()
    floor = [names[i] for i in np.repeat(np.arange(len(names)),
                                         allocate(args.n, counts / counts.sum(), minimum=0))]
    model = lm.fresh_model().to(device)
    kept = write(out / "floor.csv", sample(model, lm, tokenizer, floor, device, args.seed), floor)
    print(f"floor: {kept} kept, {time.perf_counter() - started:.0f} s", flush=True)
    for epsilon in [float(e) for e in args.epsilons.split(",")]:
        budget, delta = plan(facts, epsilon, args.steps, args.batch, args.lora_rank)
        histogram, training = budget.stage(LABEL_HISTOGRAM), budget.stage(TRAINING)
        noisy = np.clip(counts + rng.normal(0, histogram.noise_scale, len(names)), 0, None)
        conditions = [names[i] for i in np.repeat(
            np.arange(len(names)), allocate(args.n, noisy / noisy.sum(), minimum=0))]
        config = DpTraining(steps=args.steps, sampling_rate=training.spec.sampling_rate,
                            noise_multiplier=training.noise_scale,
                            learning_rate=args.learning_rate, max_length=args.max_length,
                            frozen=lm.frozen, device=device,
                            expected_batch_size=round(training.spec.sampling_rate * len(frame)))
        ledger = PrivacyLedger(epsilon, delta, discretization=1e-3)
        ledger.charge(histogram.name, histogram.release_event, mechanism="gaussian",
                      sensitivity=1.0, noise_scale=histogram.noise_scale)
        keys = iter(rng.bytes(16) for _ in range(args.steps))
        began = time.perf_counter()
        model = dp_finetune(lm.fresh_model(), [d for d, _ in documents], lm.pad_id, config,
                            ledger, training.name, training.release_event,
                            lambda k=keys: next(k), starts=[s for _, s in documents])
        trained = time.perf_counter() - began
        if args.lora_rank:
            model = model.merge_and_unload()
        texts = sample(model.to(device), lm, tokenizer, conditions, device, args.seed)
        kept = write(out / f"dpft-eps{epsilon:g}.csv", texts, conditions)
        print(f"dpft ε={epsilon:g} (spent {ledger.spent():.3f}, δ={delta:.3g}): σ="
              f"{training.noise_scale:.3f}, q={training.spec.sampling_rate:.4f}, "
              f"{args.steps} steps in {trained:.0f} s ({trained / args.steps:.3f} s/step), "
              f"{kept} kept, {time.perf_counter() - began:.0f} s with sampling", flush=True)


if __name__ == "__main__":
    main()
