"""Book-keeping clipping: the clipped sum of one backward pass equals per-sample clipping done
one example at a time, and a DP step from it is the update opacus' DPOptimizer would make."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from dpsynth.private.training.bk_clipping import BookKeepingClipper  # noqa: E402
from dpsynth.private.training.dp_training import (  # noqa: E402
    IGNORE,
    DpTraining,
    SequenceLoss,
    _finite_rows,
    dp_step,
    pad_batch,
    poisson_loader,
    shifted_batch,
)

VOCAB, EOS = 60, 0


def model_(seed=0, n_embd=16, dtype=torch.float64, tied=False):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=n_embd, n_layer=2, n_head=2,
                        tie_word_embeddings=tied, bos_token_id=EOS, eos_token_id=EOS,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config).to(dtype)


def documents(lengths, seed=1):
    """Token sequences ending in end-of-text, which also pads the batch."""
    g = torch.Generator().manual_seed(seed)
    docs = [[*torch.randint(1, VOCAB, (n - 1,), generator=g).tolist(), EOS] for n in lengths]
    docs[0][2] = docs[0][5]  # a token twice in one sequence: the embedding rows add up
    return docs


def per_sample_loss(model, batch, lengths):
    inputs, targets, positions = shifted_batch(batch, lengths)
    logits = model(input_ids=inputs, position_ids=positions).logits
    loss = SequenceLoss()
    loss.reduction = "none"
    return loss(logits, targets)


def reference(model, docs, max_grad_norm):
    """Σ_b clip(∇ loss_b) over the trainable parameters, each sample's gradient from a batch
    of that sample alone, unpadded."""
    trained = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    total = {name: torch.zeros_like(p) for name, p in trained}
    norms = []
    for doc in docs:
        model.zero_grad()
        ids = torch.tensor([doc])
        per_sample_loss(model, ids, torch.tensor([len(doc)])).sum().backward()
        norm = torch.sqrt(sum(p.grad.square().sum() for _, p in trained))
        factor = min(1.0, max_grad_norm / (float(norm) + 1e-6))
        for name, p in trained:
            total[name] += factor * p.grad
        norms.append(float(norm))
    model.zero_grad()
    return total, torch.tensor(norms, dtype=torch.float64)


def bk_clipped(model, docs, max_grad_norm, max_length=32, stack_layers=None):
    clipper = BookKeepingClipper(model, stack_layers)
    batch = pad_batch(docs, max_length, EOS)
    lengths = torch.tensor([len(d) for d in docs])
    per_sample_loss(model, batch, lengths).sum().backward()
    norms = clipper.clipped_sum(max_grad_norm)
    clipper.detach()
    return {name: p.grad for name, p in model.named_parameters()}, norms


@pytest.mark.parametrize("stack_layers", [False, True])  # True: as on a GPU
@pytest.mark.parametrize("n_embd", [4, 32])  # 4: per-sample gradients formed; 32: ghost norms
def test_clipped_sum_matches_clipping_one_example_at_a_time(n_embd, stack_layers):
    docs = documents([12, 5, 9, 3, 12, 7])
    _, ref_norms = reference(model_(n_embd=n_embd), docs, max_grad_norm=1e9)
    clip = float(ref_norms.median())  # some samples clipped, some not
    expected, _ = reference(model_(n_embd=n_embd), docs, max_grad_norm=clip)
    got, norms = bk_clipped(model_(n_embd=n_embd), docs, max_grad_norm=clip,
                            stack_layers=stack_layers)
    assert torch.allclose(norms.double(), ref_norms, rtol=1e-10)
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, rtol=1e-9, atol=1e-12), name


def test_clipped_sum_in_float32_matches_to_float_tolerance():
    docs = documents([20, 4, 11, 16], seed=3)
    expected, _ = reference(model_(dtype=torch.float64), docs, max_grad_norm=1.0)
    got, _ = bk_clipped(model_(dtype=torch.float32), docs, max_grad_norm=1.0)
    for name, grad in expected.items():
        assert torch.allclose(got[name].double(), grad, rtol=1e-4, atol=1e-6), name


def test_a_sample_whose_gradient_is_not_finite_is_left_out_not_spread_to_every_weight():
    docs = documents([12, 5, 9, 3], seed=4)
    expected, _ = reference(model_(), [d for i, d in enumerate(docs) if i != 1], 1.0)
    model = model_()

    def overflow(module, inputs, output):  # sample 1 overflows inside the first block
        return torch.where(torch.arange(len(output)).view(-1, 1, 1) == 1, torch.inf, output)

    model.transformer.h[0].ln_1.register_forward_hook(overflow)
    got, norms = bk_clipped(model, docs, max_grad_norm=1.0)
    assert not torch.isfinite(norms[1]) and torch.isfinite(norms[[0, 2, 3]]).all()
    for name, grad in expected.items():
        assert torch.isfinite(got[name]).all(), name
        assert torch.allclose(got[name], grad, rtol=1e-9, atol=1e-12), name


def test_norms_and_sum_are_taken_in_full_float32_whatever_the_process_allows(monkeypatch):
    seen = []
    real = BookKeepingClipper._clipped_sum

    def spy(self, max_grad_norm):
        seen.append(torch.get_float32_matmul_precision())
        return real(self, max_grad_norm)

    monkeypatch.setattr(BookKeepingClipper, "_clipped_sum", spy)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")  # a user's TF32 / bf16 setting
    try:
        bk_clipped(model_(dtype=torch.float32), documents([6, 3]), max_grad_norm=1.0)
        assert seen == ["highest"]
        assert torch.get_float32_matmul_precision() == "medium"  # restored afterwards
    finally:
        torch.set_float32_matmul_precision(before)


def test_frozen_parameters_are_left_out_of_norm_and_update():
    docs = documents([10, 6, 8])
    model = model_()
    for p in model.transformer.h[0].parameters():
        p.requires_grad_(False)
    got, _ = bk_clipped(model, docs, max_grad_norm=1e9)
    assert model.transformer.h[0].attn.c_attn.weight.grad is None
    ref = model_()
    total = 0.0
    for doc in docs:  # unclipped: the sum of per-sample gradients of the trainable part
        ref.zero_grad()
        per_sample_loss(ref, torch.tensor([doc]), torch.tensor([len(doc)])).sum().backward()
        total += ref.lm_head.weight.grad.clone()
    assert torch.allclose(got["lm_head.weight"], total, rtol=1e-9)
    frozen = {id(p) for p in model.transformer.h[0].parameters()}
    assert all(p.requires_grad == (id(p) not in frozen) for p in model.parameters())


def test_the_closing_end_of_text_is_a_target_and_padding_is_not():
    batch = pad_batch([[5, 6, EOS], [7, EOS]], 6, EOS)
    inputs, targets, positions = shifted_batch(batch, torch.tensor([3, 2]))
    assert inputs.shape == (2, 2)  # cut to the longest sequence
    assert targets.tolist() == [[6, EOS], [EOS, IGNORE]]
    assert positions.tolist() == [[0, 1], [0, 1]]


def one_dp_step(model, docs, mode, physical, stack_layers=None):
    """One noiseless DP step (clip 2, AdamW) on `docs`, drawn from 8 records at rate 1/2:
    opacus divides the clipped sum by 4."""
    config = DpTraining(steps=1, sampling_rate=0.5, noise_multiplier=0.0, max_grad_norm=2.0,
                        learning_rate=1e-2, max_length=16, grad_sample_mode=mode,
                        physical_batch_size=physical, stack_layers=stack_layers)
    ids = pad_batch(docs * 2, 16, EOS)
    loader = poisson_loader(
        torch.utils.data.TensorDataset(ids, torch.tensor([len(d) for d in docs * 2])), 0.5)
    step = dp_step(model, torch.optim.AdamW(model.parameters(), lr=1e-2), loader, config,
                   torch.Generator())
    step.step(*shifted_batch(ids[: len(docs)], torch.tensor([len(d) for d in docs])))
    step.close()
    return step


def assert_adamw_on(model, clipped_sum):
    """`model` is a fresh model after one AdamW step on `clipped_sum` / 4."""
    twin = model_()
    optimizer = torch.optim.AdamW(twin.parameters(), lr=1e-2)
    for name, p in twin.named_parameters():
        p.grad = clipped_sum[name] / 4
    optimizer.step()
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values(),
                            strict=True):
        assert torch.isfinite(a).all(), name
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12), name


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
@pytest.mark.parametrize("physical", [None, 1, 3])  # the batch whole, or in chunks
def test_a_dp_step_is_adamw_on_the_noiseless_clipped_mean(mode, physical):
    """In every mode, a batch taken in chunks makes the update the batch taken whole would."""
    docs = documents([12, 5, 9, 3], seed=5)
    model, passes = model_(), []
    model.transformer.wte.register_forward_hook(lambda m, i, o: passes.append(len(i[0])))
    one_dp_step(model, docs, mode, physical)
    assert passes == {None: [4], 1: [1, 1, 1, 1], 3: [3, 1]}[physical]  # records per pass
    assert_adamw_on(model, reference(model_(), docs, max_grad_norm=2.0)[0])


def test_a_stacked_dp_step_is_the_same_update():
    """DpTraining.stack_layers reaches the clipper (as on a GPU), and the update is the one
    each layer alone makes."""
    docs = documents([12, 5, 9, 3], seed=5)
    model = model_()
    assert one_dp_step(model, docs, "bk", 3, stack_layers=True).clipper.stack_layers is True
    assert_adamw_on(model, reference(model_(), docs, max_grad_norm=2.0)[0])


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
@pytest.mark.parametrize("physical", [None, 1, 3])  # 1: a chunk of nothing but the overflow
def test_a_record_whose_gradient_is_not_finite_adds_nothing_in_every_mode(mode, physical):
    """A record that overflows (its per-sample gradient not finite) is left out of the step's
    clipped sum, as a record of norm 0 would be, in every mode: the update is the one made
    without it, finite, not NaN in every weight after a release."""
    docs = documents([12, 5, 9, 3], seed=5)
    mark = VOCAB - 1
    docs[1][0] = mark  # the overflowing record, found by its first token in any chunk
    assert all(d[0] != mark for i, d in enumerate(docs) if i != 1)
    model = model_()

    def overflow(module, inputs, output):
        return torch.where((inputs[0][:, :1] == mark).unsqueeze(-1), torch.inf, output)

    model.transformer.wte.register_forward_hook(overflow)
    one_dp_step(model, docs, mode, physical)
    assert_adamw_on(model, reference(model_(), [d for i, d in enumerate(docs) if i != 1],
                                     max_grad_norm=2.0)[0])


def test_a_record_is_not_finite_where_any_one_of_its_parameter_gradients_is_not():
    ok = torch.ones(3, 2, 2)
    late = torch.ones(3, 4)
    late[2, 3] = torch.nan  # record 2, in the last parameter only
    early = torch.ones(3, 5)
    early[0, 0] = torch.inf  # record 0, in the first parameter only
    assert _finite_rows([ok, late]).tolist() == [True, True, False]
    assert _finite_rows([early, ok, late]).tolist() == [False, True, False]


def test_unsupported_trainable_layers_are_refused():
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 3))
    with pytest.raises(TypeError, match="hooks"):
        BookKeepingClipper(net)


def test_tied_weights_are_refused():
    with pytest.raises(TypeError, match="untie"):
        BookKeepingClipper(model_(tied=True))


def llama_(seed=0, lora_rank=0, dtype=torch.float64):
    """A tiny Llama (RMSNorm, rotary positions, gated MLP) as SmolLM2 is built, untied; with
    `lora_rank`, peft's LoRA adapters on every linear layer, set off zero so they matter."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=24,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=32, tie_word_embeddings=False,
                         bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS)
    model = LlamaForCausalLM(config).to(dtype)
    if not lora_rank:
        return model
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    return model


def trained_grads(grads, model):
    return {name: grads[name] for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("stack_bytes", [None, 1 << 14])  # 16 KB: stacks taken in parts
@pytest.mark.parametrize("stack_layers", [False, True])
@pytest.mark.parametrize("lora_rank", [0, 4])  # 0: RMSNorm and all; 4: LoRA adapters only
def test_clipped_sum_matches_clipping_one_example_at_a_time_on_llama(lora_rank, stack_layers,
                                                                     stack_bytes, monkeypatch):
    from dpsynth.private.training import bk_clipping

    if stack_bytes:
        monkeypatch.setattr(bk_clipping, "STACK_BYTES", stack_bytes)
    docs = documents([12, 5, 9, 3, 12, 7])
    _, ref_norms = reference(llama_(lora_rank=lora_rank), docs, max_grad_norm=1e9)
    clip = float(ref_norms.median())
    model = llama_(lora_rank=lora_rank)
    expected, _ = reference(llama_(lora_rank=lora_rank), docs, max_grad_norm=clip)
    got, norms = bk_clipped(model, docs, max_grad_norm=clip, stack_layers=stack_layers)
    assert torch.allclose(norms.double(), ref_norms, rtol=1e-9)
    trained = trained_grads(expected, model)
    assert any("norm" in name for name in trained) == (lora_rank == 0)
    assert all("lora_" in name for name in trained) == (lora_rank > 0)
    for name, grad in trained.items():
        assert torch.allclose(got[name], grad, rtol=1e-8, atol=1e-11), name


@pytest.mark.parametrize("stack_bytes", [1 << 28, 1 << 14])
def test_stacking_groups_same_shaped_linear_layers_up_to_its_byte_bound(stack_bytes,
                                                                        monkeypatch):
    """LoRA's adapters of one shape across blocks share a group (one product each for
    norms and sums), never more than STACK_BYTES of inputs or of output gradients a group;
    without stacking every layer is alone."""
    from dpsynth.private.training import bk_clipping

    monkeypatch.setattr(bk_clipping, "STACK_BYTES", stack_bytes)
    docs = documents([12, 5, 9, 3])
    sizes, largest = {}, 0
    for stack in (False, True):
        clipper = BookKeepingClipper(llama_(lora_rank=4), stack_layers=stack)
        batch = pad_batch(docs, 32, EOS)
        per_sample_loss(clipper.model, batch, torch.tensor([len(d) for d in docs])).sum(
            ).backward()
        groups = clipper._groups()
        sizes[stack] = sorted(len(group) for group in groups)
        for group in groups:
            x, g = clipper._saved[group[0]]
            if len(group) > 1:
                largest = max(largest, len(group) * max(x.nbytes, g.nbytes))
        clipper.clear()
        clipper.detach()
    assert sizes[False] == [1] * 28  # 2 blocks × 7 adapters × (A, B), each alone
    assert sum(sizes[True]) == 28 and largest <= stack_bytes
    if stack_bytes == 1 << 28:  # q, k, v, o, gate and up's A (16 → 4) in both blocks: 12
        assert sizes[True] == [2, 4, 4, 6, 12]
    else:
        assert 2 <= max(sizes[True]) < 12


class SequenceFirst(torch.nn.Module):
    """Two linear layers of the same widths and sizes, `a` on (batch, T, d) and `b` on
    (T, batch, d): stacked by sizes alone, `b`'s rows would be read as other samples."""

    def __init__(self, d=4):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, d).double()
        self.a, self.b = torch.nn.Linear(d, d).double(), torch.nn.Linear(d, d).double()
        self.head = torch.nn.Linear(d, 3).double()

    def forward(self, ids):
        h = torch.tanh(self.a(self.emb(ids)))
        h = torch.tanh(self.b(h.transpose(0, 1))).transpose(0, 1)
        return self.head(h).square().mean(dim=(1, 2))  # one loss per sample


@pytest.mark.parametrize("stack_layers", [False, True])
def test_a_layer_whose_input_is_not_batch_first_is_refused_stacked_or_not(stack_layers):
    ids = torch.randint(1, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))
    model = SequenceFirst()
    clipper = BookKeepingClipper(model, stack_layers=stack_layers)
    model(ids).sum().backward()
    with pytest.raises(TypeError, match="batch-first"):
        clipper.clipped_sum(1.0)


@pytest.mark.parametrize("stack_layers", [False, True])
def test_a_sample_that_is_not_finite_is_left_out_stacked_or_not(stack_layers):
    docs = documents([12, 5, 9, 3], seed=4)
    expected, _ = reference(model_(), [d for i, d in enumerate(docs) if i != 1], 1.0)
    model = model_()

    def overflow(module, inputs, output):
        return torch.where(torch.arange(len(output)).view(-1, 1, 1) == 1, torch.inf, output)

    model.transformer.h[0].ln_1.register_forward_hook(overflow)
    got, norms = bk_clipped(model, docs, max_grad_norm=1.0, stack_layers=stack_layers)
    assert not torch.isfinite(norms[1])
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, rtol=1e-9, atol=1e-12), name


@pytest.mark.parametrize("frozen", [["transformer.h.0.attn.c_attn.bias"],
                                    ["transformer.h.1.mlp.c_fc.weight"],
                                    ["transformer.h.0.attn.c_attn.weight",
                                     "transformer.h.1.attn.c_attn.bias"]])
def test_stacking_keeps_apart_layers_frozen_differently(frozen):
    """Same-shaped layers of two blocks, a weight or a bias frozen in one only: each group's
    norms and sums take exactly its own trainable parameters."""
    docs = documents([12, 5, 9, 3, 12, 7])

    def build():
        model = model_(n_embd=4)
        for name, p in model.named_parameters():
            p.requires_grad_(name not in frozen)
        return model

    _, ref_norms = reference(build(), docs, max_grad_norm=1e9)
    clip = float(ref_norms.median())
    expected, _ = reference(build(), docs, max_grad_norm=clip)
    model = build()
    got, norms = bk_clipped(model, docs, max_grad_norm=clip, stack_layers=True)
    assert torch.allclose(norms.double(), ref_norms, rtol=1e-10)
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, rtol=1e-9, atol=1e-12), name
    assert all(dict(model.named_parameters())[name].grad is None for name in frozen)


def test_a_prompt_before_its_start_is_context_not_target():
    batch = pad_batch([[5, 6, 7, 8, EOS], [7, 9, EOS]], 6, EOS)
    _, targets, _ = shifted_batch(batch, torch.tensor([5, 3]), torch.tensor([3, 1]))
    assert targets.tolist() == [[IGNORE, IGNORE, 8, EOS], [9, EOS, IGNORE, IGNORE]]
