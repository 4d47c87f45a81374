"""A lean incremental forward pass of the offline LM (GPT-2) for sampling.

It computes what `GPT2LMHeadModel` computes, from the same weights, with what sampling needs
and nothing more: a key/value cache written in place (the transformers cache concatenates
the whole cache at every step), logits for the last position only (the prefill does not
project every prompt position onto the vocabulary), and rows that can leave the batch when
they finish (`keep`), so that a finished row costs nothing. `tests/backends/
test_offline_decoder.py` checks its logits against the transformers model.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

CHUNK = 32
"""Cache columns added at a time."""


def supports(model) -> bool:
    """Whether `model` is a GPT-2 LM head model this decoder reproduces exactly."""
    config = getattr(model, "config", None)
    return (type(model).__name__ == "GPT2LMHeadModel" and config is not None
            and not getattr(config, "add_cross_attention", False)
            and getattr(config, "activation_function", "") in _ACTIVATIONS
            and not getattr(config, "reorder_and_upcast_attn", False))


_ACTIVATIONS = {
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
}


class Decoder:
    """Incremental decoding of a batch of left-padded rows with a model's weights.

    `prefill` reads the prompts and returns each row's final features (`logits` turns them
    into next-token logits); `step` feeds one token per row and returns the next features;
    `keep` drops rows from the batch."""

    def __init__(self, model, int8: bool = False) -> None:
        if not supports(model):
            raise ValueError(f"{type(model).__name__}: not a GPT-2 LM head model")
        cfg = model.config
        tr = model.transformer
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.eps = cfg.layer_norm_epsilon
        self.act = _ACTIVATIONS[cfg.activation_function]
        self.wte, self.wpe = tr.wte.weight, tr.wpe.weight
        self.layers = []
        for i, block in enumerate(tr.h):
            scale = self.head_dim ** -0.5 if cfg.scale_attn_weights else 1.0
            if cfg.scale_attn_by_inverse_layer_idx:
                scale /= float(i + 1)
            self.layers.append((block.ln_1, block.attn.c_attn, block.attn.c_proj, block.ln_2,
                                block.mlp.c_fc, block.mlp.c_proj, scale))
        self.ln_f = tr.ln_f
        self.head = model.lm_head
        self._int8 = _int8_projections(model) if int8 else None
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.valid = torch.zeros((0, 0), dtype=torch.bool)
        self.t = 0

    def _conv(self, layer, x: torch.Tensor) -> torch.Tensor:
        """transformers' Conv1D: x @ W + b with W stored (in, out)."""
        shape = (*x.shape[:-1], layer.weight.shape[1])
        flat = x.reshape(-1, x.shape[-1])
        if self._int8 is not None:
            return self._int8[id(layer)](flat).view(shape)
        return torch.addmm(layer.bias, flat, layer.weight).view(shape)

    def _ln(self, ln, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)

    def _grow(self, columns: int) -> None:
        have = self.valid.shape[1]
        if columns <= have:
            return
        extra = max(CHUNK, columns - have)
        rows = self.valid.shape[0]
        pad = torch.zeros((rows, self.n_head, extra, self.head_dim))
        self.k = [torch.cat([k, pad], dim=2) for k in self.k]
        self.v = [torch.cat([v, pad], dim=2) for v in self.v]
        self.valid = torch.cat([self.valid, torch.zeros((rows, extra), dtype=torch.bool)], 1)

    def _split(self, qkv: torch.Tensor):
        rows, length = qkv.shape[:2]
        q, k, v = qkv.view(rows, length, 3, self.n_head, self.head_dim).unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _blocks(self, h: torch.Tensor, start: int, mask: torch.Tensor) -> torch.Tensor:
        """Run the blocks on hidden states `h` (rows, length, embd) written at cache columns
        [start, start + length); `mask` (rows, 1, length, start + length) says what each
        query sees."""
        rows, length, embd = h.shape
        end = start + length
        for i, (ln_1, c_attn, c_proj, ln_2, c_fc, m_proj, scale) in enumerate(self.layers):
            q, k, v = self._split(self._conv(c_attn, self._ln(ln_1, h)))
            self.k[i][:, :, start:end] = k
            self.v[i][:, :, start:end] = v
            att = F.scaled_dot_product_attention(q, self.k[i][:, :, :end],
                                                 self.v[i][:, :, :end], attn_mask=mask,
                                                 scale=scale)
            h = h + self._conv(c_proj, att.transpose(1, 2).reshape(rows, length, embd))
            h = h + self._conv(m_proj, self.act(self._conv(c_fc, self._ln(ln_2, h))))
        return h

    @torch.inference_mode()
    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Next-token logits from the final features `prefill` and `step` return. The head is
        linear, so the logits of a mix of features are the mix of their logits: guidance
        mixes features and projects once."""
        if self._int8 is not None:
            return self._int8[id(self.head)](features)
        return F.linear(features, self.head.weight, self.head.bias)

    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Final features (rows, embd; `logits` makes them next-token logits) after the
        left-padded prompts `ids` (rows, width); `valid` marks the prompt tokens. Starts a
        new cache."""
        rows, width = ids.shape
        self.t = width
        self.valid = torch.zeros((rows, 0), dtype=torch.bool)
        self.k, self.v = [], []
        pad = torch.zeros((rows, self.n_head, 0, self.head_dim))
        self.k = [pad] * len(self.layers)
        self.v = [pad] * len(self.layers)
        self._grow(width + CHUNK)
        self.valid[:, :width] = valid
        positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
        self.positions = positions[:, -1].clone()
        h = F.embedding(ids, self.wte) + F.embedding(positions, self.wpe)
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        # a padding query sees itself only: its output is never read, but must stay finite
        mask = (causal & valid[:, None, :]) | torch.eye(width, dtype=torch.bool)
        h = self._blocks(h, 0, mask[:, None])
        self.last_prefill = h
        return self._ln(self.ln_f, h[:, -1])

    @torch.inference_mode()
    def sequence_logits(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position (rows, width, vocab) of left-padded `ids`:
        what the model predicts after each prefix, for perplexity."""
        self.prefill(ids, valid)
        h, self.last_prefill = self.last_prefill, None
        return self.logits(self._ln(self.ln_f, h))

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row; the final features (rows, embd), as `prefill`."""
        self._grow(self.t + 1)
        self.valid[:, self.t] = True
        self.positions = self.positions + 1
        h = (F.embedding(tokens, self.wte) + F.embedding(self.positions, self.wpe))[:, None]
        self.t += 1
        mask = self.valid[:, None, None, : self.t]
        return self._ln(self.ln_f, self._blocks(h, self.t - 1, mask)[:, 0])

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (indices into the current batch), in that order."""
        self.k = [k.index_select(0, rows) for k in self.k]
        self.v = [v.index_select(0, rows) for v in self.v]
        self.valid = self.valid.index_select(0, rows)
        self.positions = self.positions.index_select(0, rows)


_INT8: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _int8_projections(model) -> dict[int, object]:
    """Per-channel int8 dynamic-quantised copies of the model's projections (PyTorch's
    fbgemm kernels), keyed by the id of the layer they replace; built once per model and
    weights version (a fine-tuned model gets new copies)."""
    from torch.ao.nn.quantized.dynamic import Linear as QLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    version = tuple(p._version for p in model.parameters())
    cached = _INT8.get(model)
    if cached is not None and cached[0] == version:
        return cached[1]
    layers = [model.lm_head]
    for block in model.transformer.h:
        layers += [block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj]
    out: dict[int, object] = {}
    for layer in layers:
        if isinstance(layer, torch.nn.Linear):
            weight, bias = layer.weight, layer.bias
        else:  # Conv1D stores (in, out)
            weight, bias = layer.weight.t(), layer.bias
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)
        linear.qconfig = per_channel_dynamic_qconfig
        out[id(layer)] = QLinear.from_float(linear)
    _INT8[model] = (version, out)
    return out
