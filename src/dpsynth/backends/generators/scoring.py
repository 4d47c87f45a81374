"""Log-probabilities of continuations under a local causal LM: the `Generator.score`
capability of the backends that hold their model's token probabilities."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def continuation_logprobs(model, rows: Sequence[tuple[list[int], list[int]]], pad_id: int,
                          context: int, batch_size: int = 16) -> np.ndarray:
    """Summed log-probability of each row's continuation ids after its prompt ids.

    Prompts are cut from the left so prompt and continuation fit `context` tokens; rows are
    right-padded and batched (padding is masked, so batching does not change a score).
    """
    import torch

    device = next(model.parameters()).device
    out = np.zeros(len(rows))
    for start in range(0, len(rows), batch_size):
        part = []
        for prompt, cont in rows[start : start + batch_size]:
            if not cont:
                raise ValueError("a continuation must have at least one token")
            cont = list(cont)[:context - 1]
            part.append((list(prompt)[-(context - len(cont)):], cont))
        width = max(len(p) + len(c) for p, c in part)
        ids = torch.full((len(part), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(part), width), dtype=torch.long)
        for r, (p, c) in enumerate(part):
            ids[r, : len(p) + len(c)] = torch.tensor(p + c)
            mask[r, : len(p) + len(c)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).cpu()
        for r, (p, c) in enumerate(part):
            positions = torch.arange(len(p) - 1, len(p) + len(c) - 1)
            targets = torch.tensor(c)
            out[start + r] = float(logp[r, positions, targets].sum())
    return out
