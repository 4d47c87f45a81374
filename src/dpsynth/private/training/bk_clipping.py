"""Per-sample clipped gradients in one backward pass ("book-keeping" ghost clipping, Bu et
al. 2023), for the layer types of GPT-2 and Llama style LMs: Linear (LoRA's adapters are
Linear layers too), transformers' Conv1D, LayerNorm, RMSNorm and Embedding.

A forward hook keeps each layer's input; a hook on its output keeps the gradient that reaches
it. Parameters are taken out of autograd, so the backward pass computes activation gradients
only. Afterwards, per layer:

- the squared norm of every sample's weight gradient, without forming it when that is cheaper:
  for a linear layer with input A_b (T×i) and output gradient G_b (T×o),
  ‖A_bᵀ G_b‖² = Σ (A_b A_bᵀ) ⊙ (G_b G_bᵀ) costs T²(i+o) per sample against T·i·o for the
  gradient itself ("ghost norm"); ghost norms are used up to twice the flops of forming the
  gradients (they are measured faster on CPU, needing no B·i·o temporary), per layer and
  batch;
- then, once every sample's clip factor c_b = min(1, C / (‖g_b‖ + 1e-6)) is known (opacus'
  formula, over all parameters at once; 0 for a sample whose norm is not finite, whose
  gradient is then left out rather than spreading NaN to every weight), the clipped sum
  Σ_b c_b A_bᵀ G_b as one matrix product, which replaces the weight gradient the backward
  pass skipped.

On a GPU, linear layers of one shape (across the model's blocks, LoRA's adapters above all)
are stacked and handled by one batched product each, up to `STACK_BYTES` a stack: a pass's
clipping is otherwise hundreds of small products, each its own kernel launch, and an H200
spent about 0.2 s a pass on them whatever the pass's size. On the CPU each layer is taken
alone: there the stacks' copies cost more than the calls they save (SmolLM2's DP-LoRA pass of
8 × 128 tokens, one thread: 7.9 and 9.8 s a step alone, 10.0 and 11.6 s stacked, at load 3;
at 8 × 16 tokens stacking made a third of the calls).

Every layer's input must be batch-first (a layer that sees (T, B, d) is refused, stacked or
not). The result is exactly Σ_b clip(g_b) of per-sample clipping (flat, at
`max_grad_norm`), up to float rounding: the same sensitivity as opacus' hook mode, at little
more than the cost of a non-private step. Per-sample gradients here are gradients of each
sample's own loss, as opacus' are under a mean-reduced loss (the loss is summed over the
batch here).
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

try:  # transformers' GPT-2 linear layer: y = x @ W + b, W of shape (in, out)
    from transformers.pytorch_utils import Conv1D
except ImportError:  # pragma: no cover - transformers is part of the `train` extra
    Conv1D = ()


STACK_BYTES = 1 << 28
"""The most a stack of same-shaped layers' inputs (or output gradients) may take: a larger
group is taken in parts, so stacking's extra memory stays a few times this (the two stacks,
a scaled copy, the per-sample products) whatever the batch."""


class BookKeepingClipper:
    """Attach to `model`; after `loss.backward()` on the batch's summed per-sample losses,
    `clipped_sum(max_grad_norm)` sets every trainable parameter's `.grad` to the sum of
    clipped per-sample gradients and returns the per-sample norms (before clipping).

    Trainable parameters are those with `requires_grad` when attached; `detach()` restores
    them.
    """

    def __init__(self, model: nn.Module, stack_layers: bool | None = None) -> None:
        self.model = model
        self.stack_layers = stack_layers  # None: on a GPU only
        self.layers: list[tuple[nn.Module, list[nn.Parameter]]] = []
        self._handles = []
        self._saved: dict[nn.Module, list] = {}
        for module in model.modules():
            own = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if isinstance(module, nn.Embedding):
                self._handles.append(module.register_forward_hook(self._embedding_hook))
            if not own:
                continue
            if not isinstance(module, nn.Linear | nn.Embedding | Conv1D) and not _is_norm(module):
                raise TypeError(f"book-keeping clipping does not support trainable "
                                f"{type(module).__name__} layers; use grad_sample_mode hooks")
            if isinstance(module, nn.Linear | Conv1D) or _is_norm(module):
                self._handles.append(module.register_forward_hook(self._layer_hook))
            self.layers.append((module, own))
        self.params = [p for _, own in self.layers for p in own]
        if len({id(p) for p in self.params}) < len(self.params):
            raise TypeError("book-keeping clipping needs each trainable parameter in one layer "
                            "(per-layer norms of a shared weight do not add up); untie the "
                            "weights or use grad_sample_mode hooks")
        self._trainable = {id(p) for p in self.params}
        for p in self.params:
            p.requires_grad_(False)

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        for p in self.params:
            p.requires_grad_(True)

    # -- capture -----------------------------------------------------------------------------

    def _embedding_hook(self, module, inputs, output):
        """Make the embedding's output the leaf that gradients flow back to; keep the ids."""
        out = output.detach().requires_grad_(True)
        if self._trains(module.weight):
            slot = [inputs[0].detach(), None]
            self._saved[module] = slot
            out.register_hook(lambda grad: slot.__setitem__(1, grad.detach()))
        return out

    def _layer_hook(self, module, inputs, output):
        if not output.requires_grad:
            return None
        slot = [inputs[0].detach(), None]
        self._saved[module] = slot
        output.register_hook(lambda grad: slot.__setitem__(1, grad.detach()))
        return None

    # -- clipping ----------------------------------------------------------------------------

    @torch.no_grad()
    def clipped_sum(self, max_grad_norm: float) -> torch.Tensor:
        """In full float32 whatever the process allows elsewhere (TF32 on a GPU): a norm
        computed at lower precision than the sum it clips could let a sample pass C."""
        precision = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            return self._clipped_sum(max_grad_norm)
        finally:
            torch.set_float32_matmul_precision(precision)

    def _clipped_sum(self, max_grad_norm: float) -> torch.Tensor:
        missing = [type(m).__name__ for m, _ in self.layers if self._saved.get(m, [0, None])[1]
                   is None]
        if missing:
            raise RuntimeError(f"no gradient reached {missing}; run backward first")
        batches = {slot[1].shape[0] for slot in self._saved.values()}
        if len(batches) > 1:  # stacked, such a layer's rows would be read as other samples
            raise TypeError("book-keeping clipping needs every layer's input batch-first "
                            f"(leading sizes {sorted(batches)}); use grad_sample_mode hooks")
        groups = self._groups()
        sq = sum(self._norm2(group) for group in groups)
        norms = sq.clamp(min=0).sqrt()
        finite = torch.isfinite(norms)
        factors = torch.where(finite, (max_grad_norm / (norms + 1e-6)).clamp(max=1.0), 0.0)
        if not bool(finite.all()):  # one sample's overflow must not turn every weight to NaN
            self._drop(~finite)
        for group in groups:
            self._grad(group, factors)
        self._saved.clear()
        return norms

    def _groups(self) -> list[list[nn.Module]]:
        """The layers in the groups their norms and sums are taken in: when stacking, linear
        layers whose inputs and output gradients have one shape, dtype and device together
        (at most `STACK_BYTES` of inputs or of output gradients a group), every other layer
        alone."""
        stack = self.stack_layers
        if stack is None:
            stack = any(slot[1].is_cuda for slot in self._saved.values())
        together: dict[tuple, list[nn.Module]] = {}
        for module, _ in self.layers:
            x, g = self._saved[module]
            if stack and isinstance(module, nn.Linear | Conv1D):
                key = (type(module), x.shape, g.shape, x.dtype, g.dtype, g.device,
                       self._trains(module.weight),
                       self._trains(getattr(module, "bias", None)))
            else:
                key = (id(module),)
            together.setdefault(key, []).append(module)
        groups = []
        for modules in together.values():
            x, g = self._saved[modules[0]]
            size = max(1, STACK_BYTES // max(x.numel() * x.element_size(),
                                             g.numel() * g.element_size()))
            groups += [modules[i:i + size] for i in range(0, len(modules), size)]
        return groups

    def _stacked(self, modules: list[nn.Module]) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's inputs and output gradients as (layers, batch, positions, width)."""
        batch = self._saved[modules[0]][1].shape[0]
        x, g = ([self._saved[m][i].reshape(batch, -1, self._saved[m][i].shape[-1])
                 for m in modules] for i in (0, 1))
        return ((x[0].unsqueeze(0), g[0].unsqueeze(0)) if len(modules) == 1
                else (torch.stack(x), torch.stack(g)))

    def _drop(self, rows: torch.Tensor) -> None:
        """Zero the saved inputs and output gradients of the samples in `rows` (a sample whose
        gradient is not finite): they add nothing to the sum, as a sample of norm 0 would, so
        the step stays the Gaussian charged for the rest of the batch."""
        for slot in self._saved.values():
            for i, tensor in enumerate(slot):
                if tensor.is_floating_point():
                    mask = rows.view(-1, *([1] * (tensor.dim() - 1)))
                    slot[i] = torch.where(mask, 0.0, tensor)

    def clear(self) -> None:
        self._saved.clear()

    def _trains(self, param: nn.Parameter | None) -> bool:
        return param is not None and id(param) in self._trainable

    def _norm2(self, modules: list[nn.Module]) -> torch.Tensor:
        """Each sample's squared gradient norm over the group's trainable parameters."""
        module = modules[0]
        if isinstance(module, nn.Linear | Conv1D):
            return self._linear_norm2(modules)
        x, g = self._saved[module]
        batch = g.shape[0]
        if isinstance(module, nn.Embedding):
            ids, g = x.reshape(batch, -1), g.reshape(batch, -1, g.shape[-1])
            same = ids.unsqueeze(2) == ids.unsqueeze(1)
            return (torch.bmm(g, g.transpose(1, 2)) * same).sum(dim=(1, 2))
        x, g = x.reshape(batch, -1, x.shape[-1]), g.reshape(batch, -1, g.shape[-1])
        total = g.new_zeros(batch)
        if self._trains(module.weight):
            total += torch.einsum("btd,btd->bd", g, _normalized(module, x)).square().sum(1)
        if self._trains(getattr(module, "bias", None)):
            total += g.sum(dim=1).square().sum(1)
        return total

    def _linear_norm2(self, modules: list[nn.Module]) -> torch.Tensor:
        """Summed over a group of same-shaped linear layers, each sample's squared norm."""
        x, g = self._stacked(modules)
        layers, batch, length, d_in = x.shape
        d_out = g.shape[-1]
        x, g = x.reshape(-1, length, d_in), g.reshape(-1, length, d_out)
        total = g.new_zeros(layers * batch)
        if self._trains(modules[0].weight):
            if length * (d_in + d_out) <= 2 * d_in * d_out:  # ghost norm (measured faster
                total += _ghost_norm2(x, g)  # than forming gradients up to about 2x the flops)
            else:  # instantiate each sample's gradient
                total += torch.bmm(x.transpose(1, 2), g).square().sum(dim=(1, 2))
        if self._trains(getattr(modules[0], "bias", None)):
            total += g.sum(dim=1).square().sum(1)
        return total.view(layers, batch).sum(0)

    def _grad(self, modules: list[nn.Module], factors: torch.Tensor) -> None:
        """The clipped sum of the group's per-sample gradients, into `.grad`: each sample's
        factor scales whichever of its input and output gradient is narrower."""
        module = modules[0]
        if isinstance(module, nn.Linear | Conv1D):
            self._linear_grad(modules, factors)
            return
        x, g = self._saved[module]
        batch = g.shape[0]
        per_sample = factors.view(batch, *([1] * (g.dim() - 1)))
        if isinstance(module, nn.Embedding):
            grad = torch.zeros_like(module.weight)
            grad.index_add_(0, x.reshape(-1), (g * per_sample).reshape(-1, g.shape[-1]))
            _accumulate(module.weight, grad)
            return
        if self._trains(module.weight):
            _accumulate(module.weight, (g * per_sample * _normalized(module, x))
                        .reshape(-1, g.shape[-1]).sum(0))
        if self._trains(getattr(module, "bias", None)):
            _accumulate(module.bias, factors @ g.reshape(batch, -1, g.shape[-1]).sum(1))

    def _linear_grad(self, modules: list[nn.Module], factors: torch.Tensor) -> None:
        x, g = self._stacked(modules)
        layers, batch, _, d_in = x.shape
        d_out = g.shape[-1]
        if self._trains(modules[0].weight):
            per_sample = factors.view(1, batch, 1, 1)
            xs, gs = (x * per_sample, g) if d_in <= d_out else (x, g * per_sample)
            sums = torch.bmm(gs.reshape(layers, -1, d_out).transpose(1, 2),
                             xs.reshape(layers, -1, d_in))  # (layers, out, in)
            for module, grad in zip(modules, sums, strict=True):
                _accumulate(module.weight, grad if isinstance(module, nn.Linear)
                            else grad.t().contiguous())  # Conv1D's weight is (in, out)
        if self._trains(getattr(modules[0], "bias", None)):
            sums = torch.einsum("b,lbo->lo", factors, g.sum(dim=2))
            for module, grad in zip(modules, sums, strict=True):
                _accumulate(module.bias, grad)


def _ghost_norm2(x: torch.Tensor, g: torch.Tensor, blocks: int = 4) -> torch.Tensor:
    """Σ_{t,s} (x_t·x_s)(g_t·g_s) per sample. Both Gram matrices are symmetric, so each
    block of rows meets only itself and the rows after it (the pairs before it are counted
    twice there): about 5/8 of the full product's work for 4 blocks."""
    length = x.shape[1]
    edges = [round(i * length / blocks) for i in range(blocks + 1)]
    total = x.new_zeros(x.shape[0])
    for lo, hi in itertools.pairwise(edges):
        if hi == lo:
            continue
        both = (torch.bmm(x[:, lo:hi], x[:, lo:].transpose(1, 2))
                * torch.bmm(g[:, lo:hi], g[:, lo:].transpose(1, 2)))
        total += both[:, :, : hi - lo].sum(dim=(1, 2)) + 2 * both[:, :, hi - lo:].sum(dim=(1, 2))
    return total


def _is_norm(module: nn.Module) -> bool:
    """LayerNorm, or an RMSNorm (torch's, or a model's own such as Llama's, recognised by
    its `variance_epsilon`): a per-feature scale of the normalised input."""
    return isinstance(module, nn.LayerNorm | nn.RMSNorm) or (
        type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon"))


def _normalized(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The input as the layer's weight scales it: what the weight's gradient is taken against."""
    if isinstance(module, nn.LayerNorm):
        return nn.functional.layer_norm(x, module.normalized_shape, eps=module.eps)
    eps = module.eps if isinstance(module, nn.RMSNorm) else module.variance_epsilon
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + (eps or 1e-6))).to(x.dtype)


def _accumulate(param: nn.Parameter, grad: torch.Tensor) -> None:
    param.grad = grad if param.grad is None else param.grad + grad
