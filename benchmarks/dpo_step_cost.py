"""The cost of one DPO step on SmolLM2-135M-Instruct on this CPU: the probe that ruled POPri
out for issue 38 (POPri fine-tunes the generator with DPO between PE iterations).

    OMP_NUM_THREADS=1 python benchmarks/dpo_step_cost.py [--pairs 8] [--tokens 96] [--steps 3]

One step: the frozen reference's log-probabilities of `pairs` chosen and rejected sequences
(no gradient), the policy's with gradient, the DPO loss (β = 0.1) on the response part,
backward and an AdamW update; float32 on `torch.get_num_threads()` threads. Token ids are
random (the cost does not depend on them). Prints the load before and after.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--prompt-tokens", type=int, default=40)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from dpsynth.backends.smollm.weights import hf_folder

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(f"load {os.getloadavg()}", flush=True)
    policy = AutoModelForCausalLM.from_pretrained(hf_folder())
    reference = AutoModelForCausalLM.from_pretrained(hf_folder()).eval()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    ids = torch.randint(0, policy.config.vocab_size, (2 * args.pairs, args.tokens))

    def response_logp(model) -> torch.Tensor:
        logp = model(input_ids=ids).logits[:, :-1].log_softmax(-1)
        taken = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        return taken[:, args.prompt_tokens:].sum(-1)

    for _ in range(args.steps):
        started = time.perf_counter()
        with torch.no_grad():
            ref = response_logp(reference)
        pol = response_logp(policy)
        n = args.pairs
        margin = (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])
        loss = -torch.nn.functional.logsigmoid(0.1 * margin).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"DPO step ({n} pairs of {args.tokens} tokens): "
              f"{time.perf_counter() - started:.2f} s", flush=True)
    print(f"load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
