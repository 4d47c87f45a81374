"""DP fine-tuning of a causal LM on private sequences: DP-Adam through opacus, with Poisson
sampling and per-sample clipping, every step charged on the ledger before its noise is drawn.

Used by CTCL (condition → document pairs) and the DP fine-tune baseline. The noise itself is
opacus' Gaussian (continuous floats); the ledger charges each step as a Poisson-sampled
Gaussian of noise multiplier σ. On a GPU (`DpTraining.device`) the model and batches move
there; the sampler and the noise stay on the CPU's keyed generators, so a step is the same
release on either device.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from dp_accounting.dp_event import DpEvent
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpsynth.data import Access, PrivateDataset
from dpsynth.errors import ConfigError
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.private.training.state import TrainingCheckpoints
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
    grad_sample_mode: Literal["bk", "hooks", "ghost"] = "bk"
    frozen: tuple[str, ...] = ()
    """Name prefixes of parameters kept at their public values (none: all are trained)."""
    device: str = "cpu"
    """Where the model and its batches live (`torch.device` names; a GPU needs `bk`)."""
    expected_batch_size: int | None = None
    """What each step's noisy sum is divided by: N·q for the public N (or its declared bound,
    data.max_units). None takes int(N·q) from the sequences given, for callers whose N is
    public; under a bound that would make every update depend on the data's N."""
    physical_batch_size: int | None = None
    """Records per forward and backward pass, in every mode: a Poisson batch is taken in
    chunks of this many, their clipped sums added before the one noisy update (the same
    step), so memory is bounded by the config, never by how many records the sampler drew or
    how long they are. None: 8 on the CPU, 16 on a GPU (a recipe tries larger ones there:
    `fitting_chunk`)."""
    stack_layers: bool | None = None
    """Book-keeping clipping's same-shaped linear layers in one product each
    (`BookKeepingClipper`); None: on a GPU only. The same clipped sum either way."""

    def chunk(self) -> int:
        """`physical_batch_size`, or its default for the device."""
        return physical_chunk(self.physical_batch_size, self.device)


GPU_CHUNKS = (128, 64, 32, 16)
"""Records per pass a recipe tries on a GPU, largest first: on an H200, a DP-LoRA step of 128
SmolLM2-shaped records of 128 tokens (random weights, float32; benchmarks/smollm_dp_step.py)
took 0.555 s in one pass, 0.692 s in passes of 64 and 2.008 s in passes of 16 (each pass
costing about 0.2 s more, whatever its size)."""


def physical_chunk(physical_batch_size: int | None, device: str) -> int:
    """Records per pass: the size given, else 8 on the CPU and the smallest of `GPU_CHUNKS`
    on a GPU."""
    if physical_batch_size is not None:
        return physical_batch_size
    return 8 if torch.device(device).type == "cpu" else GPU_CHUNKS[-1]


def chunk_sizes(physical_batch_size: int | None, device: str) -> tuple[int, ...]:
    """The sizes `fitting_chunk` tries: the size given, else the device's default, or on a GPU
    every one of `GPU_CHUNKS` (a process the CPU's memory cannot hold is killed, not told)."""
    if physical_batch_size is None and torch.device(device).type != "cpu":
        return GPU_CHUNKS
    return (physical_chunk(physical_batch_size, device),)


def fitting_chunk(fresh_model: Callable[[], nn.Module], pad_id: int, sizes: Sequence[int],
                  max_length: int, device: str, frozen: Sequence[str] = (),
                  grad_sample_mode: str = "bk") -> int:
    """The first of `sizes` whose worst-case pass fits in memory (`try_worst_chunk`, each on a
    fresh model), tried before the first release: on public pad tokens, so the size depends
    on the machine and never on the data. None fitting is the smallest one's ConfigError."""
    for size in sizes[:-1]:
        if _fits(fresh_model, pad_id, size, max_length, device, frozen, grad_sample_mode):
            return size
        if torch.device(device).type == "cuda":  # the failed try's tensors are gone by now
            torch.cuda.empty_cache()
    try_worst_chunk(fresh_model(), pad_id, sizes[-1], max_length, device, frozen,
                    grad_sample_mode)
    return sizes[-1]


def _fits(fresh_model: Callable[[], nn.Module], pad_id: int, size: int, max_length: int,
          device: str, frozen: Sequence[str], grad_sample_mode: str) -> bool:
    try:
        try_worst_chunk(fresh_model(), pad_id, size, max_length, device, frozen,
                        grad_sample_mode)
    except ConfigError:
        return False
    return True


IGNORE = -100
"""A target position that is not part of its sequence (padding)."""


class SequenceLoss(nn.Module):
    """Token cross-entropy averaged within each sequence, then reduced over the batch: one
    private record is one sample, whatever its length (opacus sets `reduction`)."""

    def __init__(self, ignore_index: int = IGNORE) -> None:
        super().__init__()
        self.ignore_index = ignore_index
        self.reduction = "mean"

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # flattened, not transposed: the logits' gradient then comes back contiguous, which
        # the output layer's weight gradient (and its per-sample norm) is faster on
        tokens = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
            ignore_index=self.ignore_index, reduction="none").view(targets.shape)
        counts = (targets != self.ignore_index).sum(dim=1).clamp(min=1)
        per_sample = tokens.sum(dim=1) / counts
        if self.reduction == "none":
            return per_sample
        return per_sample.sum() if self.reduction == "sum" else per_sample.mean()


def training_sequences(private: PrivateDataset,
                       document: Callable[[int, str | None, str], tuple[Sequence[int], int]]
                       ) -> list[tuple[Sequence[int], int]]:
    """Each private record as the token ids and first target `document(index, label, text)`
    builds: the one place the records' texts and labels are read for DP training."""
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


def shifted_batch(ids: torch.Tensor, lengths: torch.Tensor,
                  starts: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs, targets and positions of a right-padded batch, cut to its longest sequence.

    Every token of a sequence from its `starts` entry on (default: after its first) is a
    target, its closing end-of-text included (it pads too, so padding is marked by position,
    `IGNORE`, not by id); a public prompt before it is context only, so no record's clipped
    gradient is spent on learning the template. Cutting the common padding changes nothing:
    under causal attention a position never sees later ones, and padding is never a target.
    """
    longest = min(ids.shape[1], max(2, int(lengths.max())))
    inputs, targets = ids[:, : longest - 1].contiguous(), ids[:, 1:longest].clone()
    positions = torch.arange(longest - 1).repeat(len(ids), 1)
    targets[positions >= (lengths.unsqueeze(1) - 1)] = IGNORE
    if starts is not None:
        targets[positions < (starts.unsqueeze(1) - 1)] = IGNORE
    return inputs, targets, positions


def dp_finetune(model: nn.Module, sequences: Sequence[Sequence[int]], pad_id: int,
                config: DpTraining, ledger: PrivacyLedger, stage: str,
                step_event: DpEvent, next_key: Callable[[], bytes],
                checkpoints: TrainingCheckpoints | None = None,
                starts: Sequence[int] | None = None) -> nn.Module:
    """Train `model` in place on the private token sequences; returns the trained module.
    `starts[i]` is sequence i's first target token (default 1: all but the first).

    `step_event` is the ledger event of one step (the budget plan's); it is charged
    before each optimizer step, so a step over budget raises before its noise is drawn.
    `next_key()` (the run's `NoiseSource.random_key`, so secret unless the run is seeded)
    keys the batch sampling and the gradient noise afresh at every step. opacus' own CSPRNG
    needs torchcsprng, which has no build for this torch; its generator is keyed from the
    key (docs/privacy.md, "Noise that does not leak through floating point").
    """
    if torch.device(config.device).type != "cpu" and config.grad_sample_mode != "bk":
        raise ValueError(f"device={config.device}: only grad_sample_mode bk runs off the CPU "
                         "(opacus' modes would draw their noise from a generator there)")
    model.to(config.device)
    ids = pad_batch(sequences, config.max_length, pad_id)
    lengths = torch.tensor([max(1, min(len(s), config.max_length)) for s in sequences])
    first = torch.tensor(list(starts) if starts is not None else [1] * len(sequences))
    optimizer = torch.optim.AdamW(_trainable(model, config.frozen), lr=config.learning_rate)

    def charge() -> None:
        ledger.charge(stage, step_event, mechanism="dp_sgd", sensitivity=config.max_grad_norm,
                      noise_scale=config.noise_multiplier)

    start = (_recover(checkpoints, model, optimizer, charge, next_key, ledger)
             if checkpoints else 0)
    model.train()
    noise_generator = torch.Generator()
    loader = poisson_loader(TensorDataset(ids, lengths, first), config.sampling_rate)
    private = dp_step(model, optimizer, loader, config, noise_generator)
    every = checkpoints.every if checkpoints else config.steps
    try:
        for step in track(range(start, config.steps), "DP fine-tuning", log_progress=True):
            if checkpoints and step > start and step % every == 0:
                checkpoints.save(step, model, optimizer)
            batch = _fresh_batch(private.loader, next_key(), noise_generator)
            charge()
            if len(batch[0]) == 0:
                private.noise_only_step()
                continue
            private.step(*(t.to(config.device) for t in shifted_batch(*batch)))
    finally:
        private.close()
    if checkpoints and start < config.steps:
        checkpoints.save(config.steps, model, optimizer)  # committed before any export
    return model


def try_worst_chunk(model: nn.Module, pad_id: int, chunk: int, max_length: int,
                    device: str, frozen: Sequence[str] = (),
                    grad_sample_mode: str = "bk") -> None:
    """A DP step over `chunk` sequences of `max_length` public pad tokens, every one a
    target, then two more passes (per-sample clipping, `grad_sample_mode`'s): the last with
    the optimizer's moments and the previous pass's summed gradient held, the most memory a
    step's pass can take. Run before the first release, so a bound the machine cannot hold
    stops the run there, and never on a batch of long records after one. At learning rate
    0 it trains nothing; `model` is spent. (Linux may kill the process instead of raising:
    before the first release too.)"""
    ids = torch.full((chunk, max_length), pad_id, dtype=torch.long)
    lengths = torch.full((chunk,), max_length)
    config = DpTraining(steps=1, sampling_rate=1.0, noise_multiplier=0.0,
                        max_length=max_length, grad_sample_mode=grad_sample_mode,
                        frozen=tuple(frozen), device=device, expected_batch_size=chunk,
                        physical_batch_size=chunk)
    model.to(device).train()
    optimizer = torch.optim.AdamW(_trainable(model, frozen), lr=0.0)
    trial = dp_step(model, optimizer, poisson_loader(TensorDataset(ids, lengths), 1.0),
                    config, torch.Generator())
    batch = [t.to(device) for t in shifted_batch(ids, lengths)]
    try:
        trial.step(*batch)  # the optimizer's moments, as after a first step
        trial.accumulate(*batch)
        trial.accumulate(*batch)  # a later chunk's pass, the summed gradient held
    except (torch.OutOfMemoryError, MemoryError) as exc:
        raise ConfigError(f"recipe.params.physical_batch_size: {chunk} records of max_length "
                          f"{max_length} tokens do not fit in memory on {device} "
                          f"({type(exc).__name__}); lower physical_batch_size or "
                          "max_length") from None
    finally:
        trial.close()


def dp_step(model: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader,
            config: DpTraining, noise_generator: torch.Generator):
    """The DP step of `config.grad_sample_mode`: book-keeping clipping, or opacus'."""
    step = _BookKeeping if config.grad_sample_mode == "bk" else _Opacus
    return step(model, optimizer, loader, config, noise_generator)


def _target_width(targets: torch.Tensor) -> int:
    """Columns up to the last target of any row (at least one)."""
    used = (targets != IGNORE).any(dim=0).nonzero()
    return int(used.max()) + 1 if len(used) else 1


def physical_chunks(inputs: torch.Tensor, targets: torch.Tensor, positions: torch.Tensor,
                    size: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """A batch in chunks of `size` records, each cut to its own last target (causal
    attention: later padding changes nothing before it) and contiguous, as opacus' per-sample
    embedding norms need."""
    chunks = []
    for start in range(0, len(inputs), size):
        rows = slice(start, start + size)
        width = _target_width(targets[rows])
        chunks.append(tuple(t[rows, :width].contiguous() for t in (inputs, targets, positions)))
    return chunks


def poisson_loader(dataset: TensorDataset, rate: float) -> DataLoader:
    """opacus' Poisson sampler at exactly the rate the ledger charges. (Wrapping a plain
    loader, as `make_private` does, samples at 1/len(loader), which rounding puts anywhere
    from the charged rate to a quarter below it: sound, but then the ledger says what did not
    run.)"""
    from opacus.data_loader import DPDataLoader

    return DPDataLoader(dataset, sample_rate=rate)


def expected_batch_size(loader: DataLoader, config: DpTraining) -> int:
    """What a step's noisy sum is divided by: the config's public figure, else opacus'
    int(N · q) at the sampler's q."""
    if config.expected_batch_size is not None:
        return config.expected_batch_size
    return max(1, int(len(loader.dataset) * loader.sample_rate))


def _recover(checkpoints: TrainingCheckpoints, model: nn.Module,
             optimizer: torch.optim.Optimizer, charge: Callable[[], None],
             next_key: Callable[[], bytes], ledger: PrivacyLedger) -> int:
    """Load the newest training state on disk and return its step. A state newer than the
    recipe's checkpoint (a kill between writing and committing it) is adopted: the steps that
    made it are charged (they replay from the journal, so nothing is charged twice) and their
    keys drawn, as the unbroken run did, then the state is committed. A partly written state
    beyond it (on a file system without unnamed files) may have been seen: every step drawn
    again from here is charged again."""
    recovered = checkpoints.recover()
    for _ in range(checkpoints.resume_step, recovered.step):
        next_key()
        charge()
    if recovered.drawn_beyond:
        ledger.end_replay("a partly written training state was found")
    if recovered.step > checkpoints.resume_step:
        checkpoints.committed(recovered.step)
    if recovered.step:
        checkpoints.load(recovered.step, model, optimizer)
    return recovered.step


def _trainable(model: nn.Module, frozen: Sequence[str]) -> list[nn.Parameter]:
    """The parameters to train; those under a `frozen` prefix leave autograd."""
    unknown = [prefix for prefix in frozen
               if not any(name.startswith(prefix) for name, _ in model.named_parameters())]
    if unknown:
        raise ValueError(f"frozen: {unknown} name no parameter of the model (names start "
                         f"with e.g. {[n for n, _ in model.named_parameters()][:3]})")
    for name, param in model.named_parameters():
        if any(name.startswith(prefix) for prefix in frozen):
            param.requires_grad_(False)
    return [p for p in model.parameters() if p.requires_grad]


class _BookKeeping:
    """One backward pass with per-sample clipping by `BookKeepingClipper`, then opacus'
    Gaussian noise (std σ·C on the clipped sum, the sum then divided by the expected batch
    size) and the AdamW step: the update opacus' DPOptimizer makes from the same clipped
    sum, on opacus' Poisson sampler."""

    def __init__(self, model, optimizer, loader, config: DpTraining,
                 noise_generator: torch.Generator) -> None:
        from dpsynth.private.training.bk_clipping import BookKeepingClipper

        self.model, self.optimizer, self.config = model, optimizer, config
        self.generator = noise_generator
        self.loader = loader
        self.expected_batch_size = expected_batch_size(loader, config)
        self.criterion = SequenceLoss()
        self.criterion.reduction = "sum"  # each sample's gradient is that of its own loss
        self.clipper = BookKeepingClipper(model, config.stack_layers)

    def step(self, inputs, targets, positions) -> None:
        """Every chunk's clipped sum adds into `.grad`, then one noisy update."""
        for chunk in physical_chunks(inputs, targets, positions, self.config.chunk()):
            self.accumulate(*chunk)
        self._noisy_update()

    def accumulate(self, inputs, targets, positions) -> None:
        """One chunk's clipped per-sample sum, added into `.grad`."""
        logits = self.model(input_ids=inputs, position_ids=positions).logits
        self.criterion(logits, targets).backward()
        self.clipper.clipped_sum(self.config.max_grad_norm)

    def noise_only_step(self) -> None:
        for param in self.clipper.params:
            param.grad = torch.zeros_like(param)
        self._noisy_update()

    def _noisy_update(self) -> None:
        std = self.config.noise_multiplier * self.config.max_grad_norm
        for param in self.clipper.params:  # drawn on the CPU from the keyed generator
            noise = torch.normal(0, std, param.shape, generator=self.generator)
            param.grad = (param.grad + noise.to(param.device)) / self.expected_batch_size
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def close(self) -> None:
        self.clipper.detach()


class _Opacus:
    """opacus' GradSampleModule (hooks) or its ghost clipping, with its DPOptimizer."""

    def __init__(self, model, optimizer, loader, config: DpTraining,
                 noise_generator: torch.Generator) -> None:
        from opacus import PrivacyEngine

        self.config = config
        engine = PrivacyEngine(accountant="prv", secure_mode=False)
        wrapped = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, criterion=SequenceLoss(),
            noise_multiplier=config.noise_multiplier, max_grad_norm=config.max_grad_norm,
            poisson_sampling=False,  # the loader is already Poisson, at the charged rate
            grad_sample_mode=config.grad_sample_mode, noise_generator=noise_generator)
        if config.grad_sample_mode == "ghost":
            self.model, self.optimizer, self.criterion, self.loader = wrapped
        else:
            (self.model, self.optimizer, self.loader), self.criterion = wrapped, SequenceLoss()
        # make_private took the rate as 1/len(loader); the sum is averaged over int(N · q)
        self.optimizer.expected_batch_size = expected_batch_size(loader, config)
        self.model.train()

    def step(self, inputs, targets, positions) -> None:
        """Every chunk clipped and added into opacus' `summed_grad` with its step skipped (as
        its BatchMemoryManager does), the last one then stepped: one noisy update."""
        chunks = physical_chunks(inputs, targets, positions, self.config.chunk())
        for i, chunk in enumerate(chunks):
            self.accumulate(*chunk, then_step=i == len(chunks) - 1)

    def accumulate(self, inputs, targets, positions, then_step: bool = False) -> None:
        """One chunk's clipped per-sample sum, added into `summed_grad`; `then_step`: noise
        the sum of every chunk so far and update."""
        self.optimizer.signal_skip_step(do_skip=not then_step)
        self._backward(inputs, targets, positions)
        if self.config.grad_sample_mode == "hooks":
            self._drop_rows(~_finite_rows([p.grad_sample for p in self.optimizer.params]))
        else:
            finite = torch.isfinite(self.model.per_sample_gradient_norms)
            if not bool(finite.all()):  # ghost clipping sums inside backward: run it again
                for p in self.optimizer.params:  # without the records that overflowed
                    p.grad = torch.zeros_like(p)
                if bool(finite.any()):
                    self._backward(inputs[finite], targets[finite], positions[finite])
        self.optimizer.step()
        self.optimizer.zero_grad()

    def _backward(self, inputs, targets, positions) -> None:
        # opacus' per-sample embedding norms need contiguous ids and explicit positions
        logits = self.model(input_ids=inputs, position_ids=positions).logits
        self.criterion(logits, targets).backward()

    def _drop_rows(self, rows: torch.Tensor) -> None:
        """A record whose gradient is not finite adds nothing to the clipped sum, as a record
        of norm 0 would (book-keeping clipping's rule): one overflow must not turn every
        weight to NaN after a release."""
        if bool(rows.any()):
            for p in self.optimizer.params:
                mask = rows.view(-1, *([1] * (p.grad_sample.dim() - 1)))
                p.grad_sample = torch.where(mask, 0.0, p.grad_sample)

    def noise_only_step(self) -> None:
        """An empty Poisson batch still releases a noisy (all-noise) update, as the analysis
        assumes; skipping it would reveal that the batch was empty. Scaled by the batch size
        opacus divides every other step's noise by, so the step is the Gaussian charged."""
        optimizer, config = self.optimizer, self.config
        std = config.noise_multiplier * config.max_grad_norm / optimizer.expected_batch_size
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = torch.randn(param.shape, generator=optimizer.generator) * std
        optimizer.original_optimizer.step()
        optimizer.original_optimizer.zero_grad()

    def close(self) -> None:
        if hasattr(self.model, "_close"):
            self.model._close()


def _finite_rows(per_sample: Sequence[torch.Tensor]) -> torch.Tensor:
    """Whether each record's per-sample gradient is finite in every parameter."""
    finite = None
    for g in per_sample:
        rows = torch.isfinite(g.reshape(len(g), -1)).all(dim=1)
        finite = rows if finite is None else finite & rows
    return finite


def _fresh_batch(loader: DataLoader, key: bytes, noise_generator: torch.Generator):
    """One Poisson batch after keying the noise generator and the sampler (which draws from
    torch's global generator) from `key`: each step's randomness depends on its own key alone,
    so no key drives more than one step, and training resumed at a step goes on as it would
    have."""
    keyed(noise_generator, key, b"noise")
    keyed(torch.default_generator, key, b"sampler")
    return next(iter(loader))


MT_WORDS, MT_OFFSET = 624, 24
"""torch's CPU generator state: a Mersenne Twister of 624 words (each stored in 8 bytes)
after an 8-byte seed, two 4-byte counters and an 8-byte index."""


def keyed(generator: torch.Generator, key: bytes, purpose: bytes) -> torch.Generator:
    """`generator` with a whole Mersenne Twister state expanded from `key` by SHAKE-256, and
    no cached normal sample. `manual_seed` would keep only 32 bits of any seed, which one
    core searches in hours; a state expanded from a 128-bit key cannot be searched."""
    words = np.frombuffer(hashlib.shake_256(purpose + key).digest(4 * MT_WORDS), "<u4")
    state = torch.Generator().get_state().numpy().copy()  # fresh: no cached normals
    state[MT_OFFSET : MT_OFFSET + 8 * MT_WORDS] = words.astype("<u8").view(np.uint8)
    generator.set_state(torch.from_numpy(state))
    return generator


def training_device(device: str, grad_sample_mode: str) -> str:
    """`device` checked against what torch sees; `auto` takes a GPU only where it can be
    used (book-keeping clipping), so a config runs unchanged on a machine with or without."""
    if device == "auto":
        usable = torch.cuda.is_available() and grad_sample_mode == "bk"
        return "cuda" if usable else "cpu"
    try:
        chosen = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"recipe.params.device: {device!r} is not a torch device "
                          "(auto, cpu, cuda or cuda:N)") from exc
    if chosen.type == "cpu":
        return "cpu"
    if chosen.type != "cuda" or not torch.cuda.is_available():
        raise ConfigError(f"recipe.params.device: {device!r}, but torch sees no such device "
                          f"here (CUDA available: {torch.cuda.is_available()}); use auto or cpu")
    if chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise ConfigError(f"recipe.params.device: {device!r}, but torch sees "
                          f"{torch.cuda.device_count()} GPU(s), numbered from 0")
    if grad_sample_mode != "bk":
        raise ConfigError(f"recipe.params.device: {device!r} needs grad_sample_mode bk "
                          f"(got {grad_sample_mode}): opacus' modes would draw their noise "
                          "from the GPU's generator, which is not keyed per step")
    return device
