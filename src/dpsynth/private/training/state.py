"""Checkpoints inside DP fine-tuning: the weights and Adam moments after a step, in one
safetensors file.

Both are functions of the noisy (released) gradients only, so they are as public as the final
model. Nothing random is saved: the sampling and noise generators are keyed afresh from the
run's noise source at every step, so a seeded run resumes onto the same stream and an
unseeded one draws new noise without its old noise ever reaching the disk.

A state on disk is a release of the steps that made it, so a state appears whole or not at
all: it is written to a file with no name (O_TMPFILE) and linked into place once complete, and
a resumed run adopts the newest one, committed or not, rather than draw those steps again
under their journaled charges (which would put two draws of the same charged steps on disk).
Where the file system has no unnamed files, a named temporary file stands in; a resumed run
that finds one charges again every step it redraws (`Recovered.drawn_beyond`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save
from torch import nn

from dpsynth.errors import InputError
from dpsynth.privacy.journal import fsync_folder

_PREFIX, _SUFFIX, _PARTIAL = "step-", ".safetensors", ".tmp"


@dataclass(frozen=True)
class Recovered:
    """Where training goes on: the newest whole state's step, and whether a partly written
    state of a later step was found (its steps were drawn and may have been seen)."""

    step: int
    drawn_beyond: bool


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
        return self.folder / f"{_PREFIX}{step:06d}{_SUFFIX}"

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Publish the state whole, commit, then drop older states. Only the parameters the
        optimizer updates are saved: the rest are the public weights `fresh_model` gives back
        (a LoRA state is megabytes, not the whole model's)."""
        trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
        tensors = {f"model/{name}": p.detach().contiguous()
                   for name, p in model.named_parameters() if id(p) in trained}
        moments, meta = _optimizer_tensors(optimizer)
        tensors.update({f"optimizer/{name}": t for name, t in moments.items()})
        self.folder.mkdir(parents=True, exist_ok=True)
        _publish(self.path(step), save(tensors, metadata={"optimizer": json.dumps(meta)}))
        self.committed(step)
        self._remove_all_but(self.path(step))

    def recover(self) -> Recovered:
        """The newest whole state, which may be newer than `resume_step` when a kill came
        between writing it and committing it: its weights reached the disk, so the steps that
        made them are spent and are adopted, not drawn again. Other states go."""
        whole = [_step(p) for p in self.folder.glob(f"{_PREFIX}*{_SUFFIX}")]
        partial = [_step(p) for p in self.folder.glob(f".{_PREFIX}*{_PARTIAL}")]
        newest = max([s for s in whole if s > self.resume_step], default=self.resume_step)
        if newest and not self.path(newest).is_file():
            raise InputError(f"{self.path(newest)}: the training state this run resumes from "
                             "is missing (removed, or written by another dpsynth version): "
                             "use a new output folder")
        self._remove_all_but(self.path(newest) if newest else None)
        return Recovered(newest, any(s > newest for s in partial))

    def load_weights(self, model: nn.Module) -> None:
        """The weights saved for `resume_step` (the final state, when exporting)."""
        self._load_model(self.resume_step, self._read(self.resume_step)[0], model)

    def load(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        tensors, meta = self._read(step)
        self._load_model(step, tensors, model)
        state = {int(i): {k: tensors[f"optimizer/{i}.{k}"] for k in keys}
                 for i, keys in meta.items()}
        optimizer.load_state_dict({"state": state,
                                   "param_groups": optimizer.state_dict()["param_groups"]})

    def _read(self, step: int) -> tuple[dict[str, torch.Tensor], dict[str, list[str]]]:
        """The state of `step`: its tensors by saved name, and the optimizer's layout."""
        source = self.path(step)
        if not source.is_file():
            raise InputError(f"{source}: no training state for step {step}: use a new output "
                             "folder")
        with safe_open(source, "pt") as state:
            tensors = {name: state.get_tensor(name) for name in state.keys()}  # noqa: SIM118
            return tensors, json.loads(state.metadata()["optimizer"])

    def _load_model(self, step: int, tensors: dict[str, torch.Tensor], model: nn.Module) -> None:
        weights = {name[len("model/"):]: t for name, t in tensors.items()
                   if name.startswith("model/")}
        _, unexpected = model.load_state_dict(weights, strict=False)
        if unexpected:
            raise InputError(f"{self.path(step)}: holds weights the model does not have "
                             f"({unexpected[:3]}): use a new output folder")

    def _remove_all_but(self, keep: Path | None) -> None:
        for state in [*self.folder.glob(f"{_PREFIX}*"), *self.folder.glob(f".{_PREFIX}*")]:
            if state != keep:
                state.unlink(missing_ok=True)


def _publish(target: Path, payload: bytes) -> None:
    """`payload` at `target`, whole or not at all, durably: written to a file with no name,
    fsynced, then linked into place, so a kill before the link leaves nothing on disk; where
    the file system cannot, a named temporary file (`.NAME.tmp`) renamed into place."""
    try:
        fd = os.open(target.parent, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except (AttributeError, OSError):
        fd = None
    linked = False
    if fd is not None:
        try:
            _write_all(fd, payload)
            target.unlink(missing_ok=True)
            os.link(f"/proc/self/fd/{fd}", target, follow_symlinks=True)
            linked = True
        except OSError:  # no /proc to link through: the named file below
            pass
        finally:
            os.close(fd)
    if not linked:
        partial = target.with_name(f".{target.stem}{_PARTIAL}")
        with open(partial, "wb") as handle:
            _write_all(handle.fileno(), payload)
        os.replace(partial, target)
    fsync_folder(target.parent)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def _step(path: Path) -> int:
    return int(path.name.lstrip(".")[len(_PREFIX):].split(".")[0])


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor],
                                                                   dict[str, list[str]]]:
    """Flatten the per-parameter state (Adam's step and moments) into named tensors."""
    tensors, meta = {}, {}
    for index, state in optimizer.state_dict()["state"].items():
        meta[str(index)] = sorted(state)
        for key, value in state.items():
            tensors[f"{index}.{key}"] = torch.as_tensor(value).detach().clone().contiguous()
    return tensors, meta
