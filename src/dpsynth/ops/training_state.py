"""Checkpoints inside DP fine-tuning: the weights and Adam moments after a step, as safetensors.

Both are functions of the noisy (released) gradients only, so they are as public as the final
model. Nothing random is saved: the sampling and noise generators are reseeded with a fresh
key from the run's noise source at every checkpoint boundary, so a seeded run resumes onto the
same stream and an unseeded one draws new noise without its old noise ever reaching the disk.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

_PREFIX = "step-"


@dataclass(frozen=True)
class TrainingCheckpoints:
    """Where DP fine-tuning keeps its state every `every` steps.

    `committed(step)` runs once the state for `step` is on disk: the recipe then checkpoints
    its own JSON (with the ledger) naming that step, and older states are removed.
    `resume_step` > 0 loads the state saved for that step before training goes on."""

    folder: Path
    every: int
    committed: Callable[[int], None]
    resume_step: int = 0

    def path(self, step: int) -> Path:
        return self.folder / f"{_PREFIX}{step:06d}"

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Write atomically (a folder renamed into place), commit, then drop older states."""
        target, tmp = self.path(step), self.folder / f".{_PREFIX}{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_model(model, str(tmp / "model.safetensors"))
        tensors, meta = _optimizer_tensors(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "optimizer.json").write_text(json.dumps(meta), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        self.committed(step)
        for old in self.folder.glob(f"{_PREFIX}*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)

    def discard_uncommitted(self) -> None:
        """Remove states no recipe checkpoint names (a crash between writing one and
        committing it): the resumed run retrains those steps under their journaled charges,
        so the uncommitted state must not survive beside the new one."""
        keep = self.path(self.resume_step) if self.resume_step else None
        for state in self.folder.glob(f"{_PREFIX}*"):
            if state != keep:
                shutil.rmtree(state, ignore_errors=True)

    def load_weights(self, model: nn.Module) -> None:
        """The weights saved for `resume_step` (the final state, when exporting)."""
        source = self.path(self.resume_step) / "model.safetensors"
        if not source.is_file():
            raise FileNotFoundError(f"{source}: no training state for step {self.resume_step}")
        load_model(model, str(source))

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        source = self.path(self.resume_step)
        if not source.is_dir():
            raise FileNotFoundError(f"{source}: no training state for step {self.resume_step}")
        load_model(model, str(source / "model.safetensors"))
        meta = json.loads((source / "optimizer.json").read_text(encoding="utf-8"))
        tensors = load_file(str(source / "optimizer.safetensors"))
        state = {int(i): {k: tensors[f"{i}.{k}"] for k in keys} for i, keys in meta.items()}
        optimizer.load_state_dict({"state": state,
                                   "param_groups": optimizer.state_dict()["param_groups"]})


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor],
                                                                   dict[str, list[str]]]:
    """Flatten the per-parameter state (Adam's step and moments) into named tensors."""
    tensors, meta = {}, {}
    for index, state in optimizer.state_dict()["state"].items():
        meta[str(index)] = sorted(state)
        for key, value in state.items():
            tensors[f"{index}.{key}"] = torch.as_tensor(value).detach().clone().contiguous()
    return tensors, meta
