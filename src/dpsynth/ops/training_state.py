"""Checkpoints inside DP fine-tuning: the weights and Adam moments after a step, as safetensors.

Both are functions of the noisy (released) gradients only, so they are as public as the final
model. Nothing random is saved: the sampling and noise generators are reseeded with a fresh
key from the run's noise source at every step, so a seeded run resumes onto the same stream
and an unseeded one draws new noise without its old noise ever reaching the disk.

A state on disk is a release of the steps that made it: a resumed run adopts the newest one,
committed or not, rather than redraw those steps under their journaled charges (which would
put two independent draws of the same charged steps on disk).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from dpsynth.privacy.journal import fsync_folder

_PREFIX = "step-"


@dataclass(frozen=True)
class TrainingCheckpoints:
    """Where DP fine-tuning keeps its state every `every` steps.

    `committed(step)` runs once the state for `step` is on disk: the recipe then checkpoints
    its own JSON (with the ledger) naming that step, and older states are removed.
    `resume_step` is the step the recipe's checkpoint names; `recover` finds the state
    training goes on from."""

    folder: Path
    every: int
    committed: Callable[[int], None]
    resume_step: int = 0

    def path(self, step: int) -> Path:
        return self.folder / f"{_PREFIX}{step:06d}"

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Write durably and atomically (a folder fsynced, then renamed into place), commit,
        then drop older states."""
        target, tmp = self.path(step), self.folder / f".{_PREFIX}{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_model(model, str(tmp / "model.safetensors"))
        tensors, meta = _optimizer_tensors(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "optimizer.json").write_text(json.dumps(meta), encoding="utf-8")
        for written in tmp.iterdir():
            with open(written, "rb") as handle:
                os.fsync(handle.fileno())
        fsync_folder(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        fsync_folder(self.folder)
        self.committed(step)
        self._remove_all_but(target)

    def recover(self) -> int:
        """The step training goes on from: the newest state renamed into place, which may be
        newer than `resume_step` when a kill came between writing it and committing it. Its
        weights reached the disk, so the steps that made them are spent and are adopted, not
        redrawn. Partly written (temporary) folders and older states are removed."""
        steps = [int(p.name[len(_PREFIX):]) for p in self.folder.glob(f"{_PREFIX}*")
                 if p.is_dir() and p.name[len(_PREFIX):].isdigit()]
        newest = max([s for s in steps if s > self.resume_step], default=self.resume_step)
        if newest == 0:
            self._remove_all_but(None)
            return 0
        if not self.path(newest).is_dir():
            raise FileNotFoundError(f"{self.path(newest)}: no training state for step {newest}")
        self._remove_all_but(self.path(newest))
        return newest

    def _remove_all_but(self, keep: Path | None) -> None:
        for state in [*self.folder.glob(f"{_PREFIX}*"), *self.folder.glob(f".{_PREFIX}*")]:
            if state != keep:
                shutil.rmtree(state, ignore_errors=True)

    def load_weights(self, model: nn.Module) -> None:
        """The weights saved for `resume_step` (the final state, when exporting)."""
        source = self.path(self.resume_step) / "model.safetensors"
        if not source.is_file():
            raise FileNotFoundError(f"{source}: no training state for step {self.resume_step}")
        load_model(model, str(source))

    def load(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        source = self.path(step)
        if not source.is_dir():
            raise FileNotFoundError(f"{source}: no training state for step {step}")
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
