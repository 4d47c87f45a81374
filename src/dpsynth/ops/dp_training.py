"""DP fine-tuning of a causal LM on private sequences: DP-Adam through opacus, with Poisson
sampling and per-sample clipping, every step charged on the ledger before its noise is drawn.

Used by CTCL (condition → document pairs) and the DP fine-tune baseline. The noise itself is
opacus' Gaussian (continuous floats); the ledger charges each step as a Poisson-sampled
Gaussian of noise multiplier σ.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from dp_accounting.dp_event import DpEvent
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpsynth.data import Access, PrivateDataset
from dpsynth.ops.training_state import TrainingCheckpoints
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.progress import track

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DpTraining:
    """The shape of a DP-Adam run; `noise_multiplier` comes from the budget plan."""

    steps: int
    sampling_rate: float
    noise_multiplier: float
    max_grad_norm: float = 1.0
    learning_rate: float = 5e-4
    max_length: int = 128
    grad_sample_mode: Literal["hooks", "ghost"] = "hooks"


class SequenceLoss(nn.Module):
    """Token cross-entropy averaged within each sequence, then reduced over the batch: one
    private record is one sample, whatever its length (opacus sets `reduction`)."""

    def __init__(self, pad_id: int) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.reduction = "mean"

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        tokens = nn.functional.cross_entropy(logits.transpose(1, 2), targets,
                                             ignore_index=self.pad_id, reduction="none")
        counts = (targets != self.pad_id).sum(dim=1).clamp(min=1)
        per_sample = tokens.sum(dim=1) / counts
        if self.reduction == "none":
            return per_sample
        return per_sample.sum() if self.reduction == "sum" else per_sample.mean()


def training_sequences(private: PrivateDataset,
                       document: Callable[[int, str | None, str], Sequence[int]]
                       ) -> list[Sequence[int]]:
    """Each private record as the token ids `document(index, label, text)` builds: the one
    place the records' texts and labels are read for DP training."""
    names = private.label_names
    codes = private.label_codes(Access.LEDGERED_OP) if names else None
    return [document(i, names[codes[i]] if names else None, text)
            for i, text in enumerate(private.texts(Access.LOCAL_DP_TRAINING))]


def pad_batch(sequences: Sequence[Sequence[int]], max_length: int,
              pad_id: int) -> torch.Tensor:
    """Truncate to `max_length` tokens and right-pad into one id tensor."""
    out = torch.full((len(sequences), max_length), pad_id, dtype=torch.long)
    for row, ids in enumerate(sequences):
        ids = list(ids)[:max_length]
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def dp_finetune(model: nn.Module, sequences: Sequence[Sequence[int]], pad_id: int,
                config: DpTraining, ledger: PrivacyLedger, stage: str,
                step_event: DpEvent, next_key: Callable[[], bytes],
                checkpoints: TrainingCheckpoints | None = None) -> nn.Module:
    """Train `model` in place on the private token sequences; returns the trained module.

    `step_event` is the ledger event of one step (the budget plan's); it is charged
    before each optimizer step, so a step over budget raises before its noise is drawn.
    `next_key()` (the run's `NoiseSource.random_key`, so secret unless the run is seeded)
    seeds the batch sampling and the gradient noise, afresh at the start and at every
    checkpoint boundary. opacus' own CSPRNG needs torchcsprng, which has no build for this
    torch; its generator is seeded from the key.
    """
    from opacus import PrivacyEngine

    ids = pad_batch(sequences, config.max_length, pad_id)
    expected = max(1, round(config.sampling_rate * len(ids)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    start = checkpoints.resume_step if checkpoints else 0
    if checkpoints:
        checkpoints.discard_uncommitted()
    if start:
        checkpoints.load(model, optimizer)
    model.train()
    noise_generator = torch.Generator()
    engine = PrivacyEngine(accountant="prv", secure_mode=False)
    wrapped = engine.make_private(
        module=model, optimizer=optimizer,
        data_loader=DataLoader(TensorDataset(ids), batch_size=expected),
        criterion=SequenceLoss(pad_id), noise_multiplier=config.noise_multiplier,
        max_grad_norm=config.max_grad_norm, poisson_sampling=True,
        grad_sample_mode=config.grad_sample_mode, noise_generator=noise_generator)
    if config.grad_sample_mode == "ghost":
        private_model, dp_optimizer, criterion, dp_loader = wrapped
    else:
        (private_model, dp_optimizer, dp_loader), criterion = wrapped, SequenceLoss(pad_id)
    private_model.train()
    every = checkpoints.every if checkpoints else config.steps
    batches = None
    for step in track(range(start, config.steps), "DP fine-tuning"):
        if batches is None or step % every == 0:
            if batches is not None and checkpoints:
                checkpoints.save(step, model, optimizer)
            batches = _reseeded(dp_loader, next_key(), noise_generator)
        (batch,) = next(batches)
        ledger.charge(stage, step_event, mechanism="dp_sgd",
                      sensitivity=config.max_grad_norm, noise_scale=config.noise_multiplier)
        if len(batch) == 0:
            _noise_only_step(dp_optimizer, config)
            continue
        # opacus' per-sample embedding norms need contiguous ids and explicit positions
        inputs, targets = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        positions = torch.arange(inputs.shape[1]).repeat(len(inputs), 1)
        logits = private_model(input_ids=inputs, position_ids=positions,
                               attention_mask=(inputs != pad_id).long()).logits
        loss = criterion(logits, targets)
        loss.backward()
        dp_optimizer.step()
        dp_optimizer.zero_grad()
    if checkpoints and start < config.steps:
        checkpoints.save(config.steps, model, optimizer)  # committed before any export
    return model


def _reseeded(loader: DataLoader, key: bytes, noise_generator: torch.Generator):
    """Batches from a fresh iterator after reseeding the noise and the Poisson sampler (which
    draws from torch's global generator): the stream depends on the key alone, so training
    resumed at a boundary continues exactly as it would have."""
    noise_generator.manual_seed(int.from_bytes(key[:8], "big") >> 1)
    torch.manual_seed(int.from_bytes(key[8:16], "big") >> 1)
    return _forever(loader)


def _forever(loader: DataLoader):
    while True:
        yield from loader


def _noise_only_step(optimizer, config: DpTraining) -> None:
    """An empty Poisson batch still releases a noisy (all-noise) update, as the analysis
    assumes; skipping it would reveal that the batch was empty. Scaled by the batch size
    opacus divides every other step's noise by, so the step is the Gaussian charged."""
    std = config.noise_multiplier * config.max_grad_norm / optimizer.expected_batch_size
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = torch.randn(param.shape, generator=optimizer.generator) * std
    optimizer.original_optimizer.step()
    optimizer.original_optimizer.zero_grad()
