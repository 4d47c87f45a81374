"""SmoothQuant (Xiao et al. 2023) folded into SmolLM2's float32 weights before the int8
conversion (engine `ct2-int8-smooth`).

CTranslate2 int8 rounds each token's activations to 8 bits with one scale per row, so the
few input channels far larger than the rest leave the others a handful of levels: +3.5%
held-out perplexity over float32. Dividing each input channel j by
s_j = max|X_j|^α / max|W_j|^(1-α) where it is made (a norm's weight, or the rows of the
linear layer that writes it) and multiplying the reading layers' column j by s_j gives the
same float32 model with activations that round more finely (the weights take part of the
range instead): +1.0% (benchmarks/results/generator_speed.md).

The maxima X_j come from public text that ships with dpsynth (a fixed-seed subsample of the
default pool), so the conversion is the same on every machine and reads no run's data.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from dpsynth.backends.pool.texts import read_pool_texts

ALPHA = 0.65
"""Chosen among 0.5, 0.65 and 0.8 on 96 pool texts outside the calibration set (int8
perplexity +1.8%, +1.4%, +2.6% over float32)."""
CALIBRATION_POOL = Path(__file__).resolve().parents[2] / "assets" / "pool" / "public_pool.txt"
CALIBRATION_TEXTS = 128
CALIBRATION_TOKENS = 128


def convert_smoothed(source: Path, out: Path, quantization: str) -> None:
    """The CTranslate2 conversion of the float32 folder `source`, smoothed first."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dpsynth.backends.smollm.weights import convert_ct2

    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source).eval()
    smooth(model, activation_maxima(model, calibration_rows(tokenizer)))
    with tempfile.TemporaryDirectory(prefix=".smoothed-", dir=out.parent) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        convert_ct2(Path(staging), out, quantization)


def calibration_rows(tokenizer, n: int = CALIBRATION_TEXTS,
                     tokens: int = CALIBRATION_TOKENS) -> list[list[int]]:
    """The first `tokens` token ids of `n` texts of the shipped public pool."""
    return [tokenizer(t)["input_ids"][:tokens]
            for t in read_pool_texts(CALIBRATION_POOL, max_texts=n)]


def _readers(layer) -> dict[str, list]:
    """Per smoothed input of a decoder layer, the linear layers that read it."""
    attn, mlp = layer.self_attn, layer.mlp
    return {"attn": [attn.q_proj, attn.k_proj, attn.v_proj], "mlp": [mlp.gate_proj, mlp.up_proj],
            "down": [mlp.down_proj], "o": [attn.o_proj]}


@torch.no_grad()
def activation_maxima(model, rows: list[list[int]]) -> list[dict[str, torch.Tensor]]:
    """Per decoder layer and smoothed input, max |x_j| over every calibration token; the
    output layer's input (the final norm's output) under "head" in the last layer's."""
    maxima: list[dict[str, torch.Tensor]] = [{} for _ in model.model.layers]
    hooks = [model.model.norm.register_forward_hook(
        lambda _m, _a, out: _record(maxima[-1], "head", out))]
    for layer, found in zip(model.model.layers, maxima, strict=True):
        for key, linears in _readers(layer).items():
            hooks.append(linears[0].register_forward_pre_hook(
                lambda _m, args, found=found, key=key: _record(found, key, args[0])))
    try:
        for row in rows:  # one text at a time: no padding in the maxima
            model.model(input_ids=torch.tensor([row]))
    finally:
        for hook in hooks:
            hook.remove()
    return maxima


def _record(found: dict, key: str, x: torch.Tensor) -> None:
    seen = x.abs().flatten(0, -2).amax(dim=0)
    found[key] = torch.maximum(found[key], seen) if key in found else seen


def scales(x_max: torch.Tensor, linears: list, alpha: float = ALPHA) -> torch.Tensor:
    """s_j = max|X_j|^α / max|W_j|^(1-α), W being every linear layer that reads input j."""
    w_max = torch.cat([lin.weight.abs() for lin in linears]).amax(dim=0)
    return (x_max.clamp(min=1e-5).pow(alpha) / w_max.clamp(min=1e-5).pow(1 - alpha)
            ).clamp(min=1e-5)


@torch.no_grad()
def smooth(model, maxima: list[dict[str, torch.Tensor]], alpha: float = ALPHA) -> None:
    """Fold the scales into `model` in place; its float32 outputs stay the same."""
    groups = model.config.num_attention_heads // model.config.num_key_value_heads
    head_dim = model.config.head_dim
    for layer, found in zip(model.model.layers, maxima, strict=True):
        readers = _readers(layer)
        for norm, key in ((layer.input_layernorm, "attn"), (layer.post_attention_layernorm, "mlp")):
            _fold(norm.weight, readers[key], scales(found[key], readers[key], alpha))
        s = scales(found["down"], readers["down"], alpha)
        layer.mlp.up_proj.weight.div_(s[:, None])  # act(gate) * up: scaling up scales it
        layer.mlp.down_proj.weight.mul_(s)
        s = _value_scales(found["o"], layer.self_attn.o_proj, groups, head_dim, alpha)
        layer.self_attn.v_proj.weight.div_(s[:, None])
        layer.self_attn.o_proj.weight.mul_(_per_query_head(s, groups, head_dim))
    head = _untied_head(model)
    _fold(model.model.norm.weight, [head], scales(maxima[-1]["head"], [head], alpha))


def _fold(norm_weight, readers, s) -> None:
    """A norm's output channel j divided by s_j, its readers' input column j multiplied."""
    norm_weight.div_(s)
    for linear in readers:
        linear.weight.mul_(s)


def _value_scales(x_max, o_proj, groups: int, head_dim: int, alpha: float) -> torch.Tensor:
    """One scale per value channel. o_proj reads each query head's mix of its value head's
    channels, and `groups` query heads share one value head (grouped-query attention), so
    a value channel's scale serves all of them: maxima are taken over the group."""
    def over_group(t):  # (query heads * head_dim, ...) -> (value heads * head_dim, ...)
        return t.unflatten(0, (-1, groups, head_dim)).amax(dim=1).flatten(0, 1)

    w_max = over_group(o_proj.weight.abs().T).amax(dim=1)
    return (over_group(x_max).clamp(min=1e-5).pow(alpha)
            / w_max.clamp(min=1e-5).pow(1 - alpha)).clamp(min=1e-5)


def _per_query_head(s: torch.Tensor, groups: int, head_dim: int) -> torch.Tensor:
    """Value-channel scales laid out as o_proj's input: query head h reads value head
    h // groups (transformers' repeat_kv)."""
    return s.unflatten(0, (-1, 1, head_dim)).expand(-1, groups, -1).flatten()


def _untied_head(model):
    """The output layer with weights of its own: scaling its columns must leave the
    embeddings (which read no activation) as they are. CTranslate2 then stores both."""
    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone())
    model.config.tie_word_embeddings = False
    return head
