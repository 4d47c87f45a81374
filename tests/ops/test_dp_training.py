"""DP fine-tuning on a tiny local GPT-2: it learns, charges every step, stops at the budget."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from dp_accounting import dp_event  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from dpsynth.errors import BudgetExceededError, InputError  # noqa: E402
from dpsynth.privacy.ledger import PrivacyLedger  # noqa: E402
from dpsynth.private.training.dp_training import DpTraining, SequenceLoss, dp_finetune  # noqa: E402

VOCAB, PAD = 50, 0


def tiny_model(seed=0, dropout=0.1):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                        tie_word_embeddings=False, bos_token_id=1, eos_token_id=1,
                        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return GPT2LMHeadModel(config)


def sequences(n=64):
    # a repeated pattern a model can learn: 2 3 4 5 2 3 4 5 ...
    return [[2 + (i + j) % 4 for j in range(12)] for i in range(n)]


def mean_loss(model, seqs):
    ids = torch.tensor(seqs)
    with torch.no_grad():
        logits = model(input_ids=ids[:, :-1]).logits
    return float(SequenceLoss(PAD)(logits, ids[:, 1:]))


def step_event(sigma, q):
    return dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
def test_dp_finetune_learns_and_charges_every_step(mode):
    model, seqs = tiny_model(), sequences()
    before = mean_loss(model, seqs)
    ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2)
    config = DpTraining(steps=30, sampling_rate=0.25, noise_multiplier=0.5,
                        learning_rate=5e-3, max_length=12, grad_sample_mode=mode)
    trained = dp_finetune(model, seqs, PAD, config, ledger, "training",
                          step_event(0.5, 0.25), next_key=lambda: b"k" * 16)
    assert ledger.breakdown()["training"]["releases"] == 30
    assert mean_loss(trained, seqs) < before - 0.5


def test_opacus_modes_are_refused_off_the_cpu_before_any_charge():
    ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2)
    config = DpTraining(steps=3, sampling_rate=0.25, noise_multiplier=0.5, max_length=12,
                        grad_sample_mode="hooks", device="cuda")
    with pytest.raises(ValueError, match="only grad_sample_mode bk runs off the CPU"):
        dp_finetune(tiny_model(), sequences(), PAD, config, ledger, "training",
                    step_event(0.5, 0.25), next_key=lambda: b"k" * 16)
    assert ledger.spent() == 0
    on_cpu = DpTraining(steps=2, sampling_rate=0.25, noise_multiplier=0.5, max_length=12,
                        grad_sample_mode="hooks", device="cpu:0")  # a CPU by another name
    dp_finetune(tiny_model(), sequences(), PAD, on_cpu, ledger, "training",
                step_event(0.5, 0.25), next_key=lambda: b"k" * 16)
    assert ledger.breakdown()["training"]["releases"] == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_takes_the_steps_the_cpu_takes():
    """Same keys, so the same batches and the same (CPU-drawn) noise: the weights agree up
    to float rounding, and every step is charged the same. Without dropout, whose masks a GPU
    draws from its own generator (the shipped LM has none)."""
    keys = [bytes([i]) * 16 for i in range(20)]
    trained, spent = [], []
    for device in ("cpu", "cuda"):
        stream = iter(keys)
        ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2)
        config = DpTraining(steps=20, sampling_rate=0.25, noise_multiplier=0.5,
                            learning_rate=5e-3, max_length=12, device=device)
        model = dp_finetune(tiny_model(dropout=0.0), sequences(), PAD, config, ledger,
                            "training", step_event(0.5, 0.25),
                            next_key=lambda s=stream: next(s))
        assert next(model.parameters()).device.type == device
        trained.append({k: v.detach().cpu() for k, v in model.state_dict().items()})
        spent.append(ledger.spent())
    assert spent[0] == spent[1]
    for name, weight in trained[0].items():
        assert torch.allclose(weight, trained[1][name], atol=1e-3), name
    assert mean_loss(tiny_model(), sequences()) > mean_loss(
        _loaded(trained[1]), sequences()) + 0.5


def _loaded(weights):
    model = tiny_model(dropout=0.0)
    model.load_state_dict(weights)
    return model


def test_training_stops_at_the_budget_before_overspending():
    ledger = PrivacyLedger(1.0, 1e-5, discretization=1e-2)
    config = DpTraining(steps=500, sampling_rate=0.25, noise_multiplier=5.0, max_length=12)
    with pytest.raises(BudgetExceededError, match="over the budget"):
        dp_finetune(tiny_model(), sequences(), PAD, config, ledger, "training",
                    step_event(5.0, 0.25), next_key=lambda: b"k" * 16)
    assert 0 < ledger.breakdown()["training"]["releases"] < 500
    assert ledger.spent() <= 1.0


def test_sequence_loss_counts_each_sequence_once():
    logits = torch.zeros(2, 3, VOCAB)
    targets = torch.tensor([[2, 3, PAD], [2, PAD, PAD]])
    loss = SequenceLoss(PAD)
    loss.reduction = "none"
    per_sample = loss(logits, targets)
    assert per_sample.shape == (2,)
    assert torch.allclose(per_sample, torch.full((2,), float(torch.log(torch.tensor(50.0)))))


class _Killed(RuntimeError):
    pass


def test_training_resumed_at_a_checkpoint_ends_where_an_unbroken_run_ends(tmp_path):
    from dpsynth.privacy.noise import NoiseSource
    from dpsynth.private.training.state import TrainingCheckpoints

    config = DpTraining(steps=6, sampling_rate=0.25, noise_multiplier=0.5,
                        learning_rate=5e-3, max_length=12)

    def train(folder, noise, committed, resume_step=0):
        checkpoints = TrainingCheckpoints(folder, 2, committed, resume_step)
        ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2)
        model = dp_finetune(tiny_model(), sequences(), PAD, config, ledger, "training",
                            step_event(0.5, 0.25), noise.random_key, checkpoints)
        return model, ledger

    whole, _ = train(tmp_path / "whole", NoiseSource(7), lambda step: None)
    noise, states = NoiseSource(7), {}

    def kill_at_four(step):
        states[step] = noise.state_dict()  # what the recipe's JSON checkpoint keeps
        if step == 4:
            raise _Killed

    with pytest.raises(_Killed):
        train(tmp_path / "resumed", noise, kill_at_four)
    assert "step-000004.safetensors" in [p.name for p in (tmp_path / "resumed").iterdir()]
    resumed, ledger = train(tmp_path / "resumed", NoiseSource.from_state_dict(states[4]),
                            lambda step: None, resume_step=4)
    assert ledger.breakdown()["training"]["releases"] == 2
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    fresh, _ = train(tmp_path / "other", NoiseSource(8), lambda step: None)
    assert not torch.equal(fresh.state_dict()["lm_head.weight"],
                           whole.state_dict()["lm_head.weight"])


def test_resuming_without_the_saved_state_is_a_clear_error(tmp_path):
    from dpsynth.private.training.state import TrainingCheckpoints

    checkpoints = TrainingCheckpoints(tmp_path, 2, lambda step: None, resume_step=4)
    with pytest.raises(InputError, match="step-000004"):
        checkpoints.recover()


def _journaled_ledger(journal, resume_from):
    """The ledger a resumed run gets (as `run.resume` rebuilds it): every journaled charge on
    it, those after the recipe's checkpoint expected again in order."""
    from dpsynth.privacy.ledger import Journaled

    ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2, charges=list(journal),
                           on_charge=journal.append)
    ledger.replay([Journaled(i, c) for i, c in enumerate(journal) if i >= resume_from])
    return ledger


@pytest.mark.parametrize("seeded", [False, True])
def test_a_state_written_but_not_committed_is_adopted_not_drawn_again(tmp_path, seeded):
    """Killed after the state for step 4 is on disk but before the recipe's checkpoint names
    it: those weights are a draw of steps 2-3, so the resumed run must carry on from them
    (charging each step once) rather than draw steps 2-3 again under the same charges."""
    import secrets

    from safetensors.torch import load_file

    from dpsynth.privacy.noise import NoiseSource
    from dpsynth.private.training.state import TrainingCheckpoints

    config = DpTraining(steps=6, sampling_rate=0.25, noise_multiplier=0.5,
                        learning_rate=5e-3, max_length=12)

    def train(folder, ledger, noise, committed, resume_step=0):
        key = noise.random_key if seeded else (lambda: secrets.token_bytes(16))
        return dp_finetune(tiny_model(), sequences(), PAD, config, ledger, "training",
                           step_event(0.5, 0.25), key,
                           TrainingCheckpoints(folder, 2, committed, resume_step))

    noise, states, journal = NoiseSource(7), {}, []

    def kill_before_committing_four(step):
        if step == 4:
            raise _Killed
        states[step] = noise.state_dict()

    with pytest.raises(_Killed):
        train(tmp_path, PrivacyLedger(50.0, 1e-5, discretization=1e-2,
                                      on_charge=journal.append), noise,
              kill_before_committing_four)
    on_disk = load_file(str(tmp_path / "step-000004.safetensors"))
    assert len(journal) == 4
    ledger, seen = _journaled_ledger(journal, resume_from=2), {}

    def committed(step):
        seen[step] = load_file(str(tmp_path / f"step-{step:06d}.safetensors"))

    resumed = train(tmp_path, ledger, NoiseSource.from_state_dict(states[2]), committed,
                    resume_step=2)
    assert sorted(seen) == [4, 6]
    assert all(torch.equal(on_disk[k], seen[4][k]) for k in on_disk)
    assert len(ledger.charges) == config.steps
    assert not ledger._pending
    if seeded:  # the keys of the adopted steps are drawn too: the stream stays aligned
        whole = train(tmp_path / "whole", PrivacyLedger(50.0, 1e-5, discretization=1e-2),
                      NoiseSource(7), lambda step: None)
        for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(),
                                strict=True):
            assert torch.equal(a, b), name


def test_a_kill_while_a_state_is_written_leaves_nothing_of_it(tmp_path, monkeypatch):
    """The state is written to a file with no name and linked into place once whole: a kill
    before the link leaves no trace of it (nothing a reader could take as a second draw)."""
    from dpsynth.private.training import state as training_state
    from dpsynth.private.training.state import TrainingCheckpoints

    def killed(*args, **kwargs):
        raise _Killed

    monkeypatch.setattr(training_state.os, "link", killed)
    checkpoints = TrainingCheckpoints(tmp_path, 2, lambda step: None)
    model = tiny_model()
    with pytest.raises(_Killed):
        checkpoints.save(2, model, torch.optim.AdamW(model.parameters()))
    assert not list(tmp_path.iterdir())


def test_a_partly_written_named_state_charges_again_what_is_drawn_again(tmp_path):
    """Without unnamed files a state is first written under a temporary name; one left by a
    kill may have been read, so the steps it holds are charged again when drawn again."""
    from dpsynth.private.training.state import Recovered, TrainingCheckpoints

    config = DpTraining(steps=4, sampling_rate=0.25, noise_multiplier=0.5, max_length=12)
    journal = []
    ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2, on_charge=journal.append)
    dp_finetune(tiny_model(), sequences(), PAD, config, ledger, "training",
                step_event(0.5, 0.25), lambda: b"k" * 16)
    assert len(journal) == 4
    (tmp_path / ".step-000002.tmp").write_bytes(b"partial")
    checkpoints = TrainingCheckpoints(tmp_path, 2, lambda step: None)
    assert checkpoints.recover() == Recovered(0, drawn_beyond=True)
    (tmp_path / ".step-000002.tmp").write_bytes(b"partial")
    resumed = _journaled_ledger(journal, resume_from=0)
    dp_finetune(tiny_model(), sequences(), PAD, config, resumed, "training",
                step_event(0.5, 0.25), lambda: b"k" * 16, checkpoints)
    assert len(resumed.charges) == 8
    assert [p.name for p in tmp_path.iterdir()] == ["step-000004.safetensors"]


def test_a_key_sets_the_whole_generator_state():
    """Keys that agree on their first bytes give different streams (manual_seed keeps 32
    bits of a seed); the same key gives the same stream whatever was drawn before."""
    from dpsynth.private.training.dp_training import keyed

    def normals(key, before=0):
        generator = torch.Generator()
        torch.randn(before, generator=generator)
        return torch.randn(8, generator=keyed(generator, key, b"noise"))

    assert torch.equal(normals(b"k" * 16), normals(b"k" * 16, before=3))
    assert not torch.equal(normals(b"k" * 15 + b"a"), normals(b"k" * 15 + b"b"))
    assert not torch.equal(torch.randn(8, generator=keyed(torch.Generator(), b"k", b"noise")),
                           torch.randn(8, generator=keyed(torch.Generator(), b"k", b"sampler")))


def test_every_step_draws_its_own_key():
    """No seed drives more than one step's sampling and noise."""
    import secrets

    keys = []

    def key():
        keys.append(secrets.token_bytes(16))
        return keys[-1]

    config = DpTraining(steps=5, sampling_rate=0.25, noise_multiplier=0.5, max_length=12)
    dp_finetune(tiny_model(), sequences(), PAD, config,
                PrivacyLedger(50.0, 1e-5, discretization=1e-2), "training",
                step_event(0.5, 0.25), key)
    assert len(keys) == config.steps == len(set(keys))


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
@pytest.mark.parametrize(("n", "rate"), [(1000, 0.0106), (106, 32 / 106), (40, 0.25)])
def test_the_sampler_runs_at_the_rate_the_ledger_charges(monkeypatch, mode, n, rate):
    """At 1,000 sequences and q = 0.0106 a plain loader of batches of round(10.6) = 11 would
    sample at 1/91 = 0.01099; at 106 and 32/106 = 0.302, at 1/4 = 0.25. The sampler now runs
    at q itself, and the number of sequences it draws per step has mean N·q."""
    from opacus.data_loader import DPDataLoader

    seen = []
    original = DPDataLoader.__iter__

    def spy(self):
        seen.append(self.sample_rate)
        return original(self)

    monkeypatch.setattr(DPDataLoader, "__iter__", spy)
    config = DpTraining(steps=2, sampling_rate=rate, noise_multiplier=1.0, max_length=12,
                        grad_sample_mode=mode)
    ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2)
    dp_finetune(tiny_model(), sequences(n), PAD, config, ledger, "training",
                step_event(1.0, rate), next_key=lambda: b"k" * 16)
    assert seen == [rate, rate]
    assert len(ledger.charges) == 2


@pytest.mark.parametrize("public", [None, 32])
def test_every_mode_divides_by_the_same_expected_batch_size(monkeypatch, public):
    """bk, hooks and ghost average a step's noisy sum over one figure: int(N·q) from the
    sequences, or the config's public figure (under data.max_units the data's N must not
    set it: 106 and 107 sequences divide by the same 32)."""
    from dpsynth.private.training import dp_training

    seen = {}
    original = dp_training.expected_batch_size

    def spy(loader, config):
        seen.setdefault(config.grad_sample_mode, []).append(original(loader, config))
        return seen[config.grad_sample_mode][-1]

    monkeypatch.setattr(dp_training, "expected_batch_size", spy)
    rate = 32 / 500
    for n in (106, 107):
        for mode in ("bk", "hooks", "ghost"):
            config = DpTraining(steps=1, sampling_rate=rate, noise_multiplier=1.0,
                                max_length=12, grad_sample_mode=mode,
                                expected_batch_size=public)
            dp_finetune(tiny_model(), sequences(n), PAD, config,
                        PrivacyLedger(50.0, 1e-5, discretization=1e-2), "training",
                        step_event(1.0, rate), next_key=lambda: b"k" * 16)
    assert set(seen) == {"bk", "hooks", "ghost"}
    assert len({tuple(v) for v in seen.values()}) == 1  # the same in every mode
    expected = [32, 32] if public else [int(106 * rate), int(107 * rate)]
    assert seen["bk"] == expected


def test_poisson_batches_have_the_charged_mean_size():
    import torch

    from dpsynth.private.training.dp_training import poisson_loader

    loader = poisson_loader(torch.utils.data.TensorDataset(torch.arange(106)), 32 / 106)
    torch.manual_seed(0)
    sizes = [len(next(iter(loader))[0]) for _ in range(2000)]
    # mean 32, std of the mean sqrt(32 · (1 - q) / 2000) ≈ 0.106: 5 std either side
    assert abs(np.mean(sizes) - 32) < 0.55


@pytest.mark.parametrize("mode", ["bk", "hooks"])
def test_frozen_parameters_keep_their_public_values(mode):
    model = tiny_model()
    public = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = DpTraining(steps=3, sampling_rate=0.25, noise_multiplier=0.5, learning_rate=5e-3,
                        max_length=12, grad_sample_mode=mode,
                        frozen=("transformer.wte", "lm_head"))
    ledger = PrivacyLedger(50.0, 1e-5, discretization=1e-2)
    trained = dp_finetune(model, sequences(), PAD, config, ledger, "training",
                          step_event(0.5, 0.25), next_key=lambda: b"k" * 16)
    after = dict(trained.named_parameters())
    assert torch.equal(after["lm_head.weight"], public["lm_head.weight"])
    assert torch.equal(after["transformer.wte.weight"], public["transformer.wte.weight"])
    assert not torch.equal(after["transformer.h.0.mlp.c_fc.weight"],
                           public["transformer.h.0.mlp.c_fc.weight"])
    assert ledger.breakdown()["training"]["releases"] == 3


def test_a_frozen_prefix_that_names_no_parameter_is_an_error():
    config = DpTraining(steps=1, sampling_rate=0.25, noise_multiplier=0.5, max_length=12,
                        frozen=("transformer.embeddings",))
    with pytest.raises(ValueError, match="transformer.embeddings"):
        dp_finetune(tiny_model(), sequences(), PAD, config,
                    PrivacyLedger(50.0, 1e-5, discretization=1e-2), "training",
                    step_event(0.5, 0.25), next_key=lambda: b"k" * 16)


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
def test_the_worst_chunk_is_tried_on_pad_tokens_and_trains_nothing(mode):
    from dpsynth.private.training.dp_training import try_worst_chunk

    model, twin = tiny_model(dropout=0.0), tiny_model(dropout=0.0)
    seen, clipped = [], []
    model.transformer.wte.register_forward_hook(lambda m, i, o: seen.append(i[0].clone()))
    model.lm_head.register_full_backward_hook(lambda m, gi, go: clipped.append(True))
    try_worst_chunk(model, PAD, chunk=3, max_length=16, device="cpu", grad_sample_mode=mode)
    # a step, then two passes with Adam's moments and the summed gradient held
    assert [tuple(ids.shape) for ids in seen] == [(3, 15)] * 3  # chunk × max_length, shifted
    assert bool((seen[0] == PAD).all())  # public pad tokens, nothing else
    assert clipped  # the backward pass ran, not the forward alone
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b) and a.requires_grad
    assert not any(m._forward_hooks for m in model.modules()
                   if m is not model.transformer.wte)  # opacus' hooks let go


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
def test_a_worst_chunk_that_does_not_fit_is_a_config_error(monkeypatch, mode):
    from dpsynth.errors import ConfigError
    from dpsynth.private.training.dp_training import try_worst_chunk

    def full(self, logits, targets):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(SequenceLoss, "forward", full)
    model = tiny_model()
    with pytest.raises(ConfigError, match="physical_batch_size: 64 records of max_length 32"):
        try_worst_chunk(model, PAD, chunk=64, max_length=32, device="cpu",
                        grad_sample_mode=mode)
    assert all(p.requires_grad for p in model.parameters())  # the clipper let go


def test_a_gpu_pass_takes_the_largest_chunk_that_fits_and_a_given_size_is_kept(monkeypatch):
    from dpsynth.errors import ConfigError
    from dpsynth.private.training.dp_training import GPU_CHUNKS, chunk_sizes, fitting_chunk

    forward = SequenceLoss.forward

    def bounded(self, logits, targets):  # a device that holds at most 32 records a pass
        if logits.shape[0] > 32:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return forward(self, logits, targets)

    monkeypatch.setattr(SequenceLoss, "forward", bounded)
    built = []

    def fresh():
        built.append(tiny_model())
        return built[-1]

    assert fitting_chunk(fresh, PAD, (128, 64, 32, 16), max_length=8, device="cpu") == 32
    assert len(built) == 3  # 128 and 64 did not fit, each on a model of its own
    with pytest.raises(ConfigError, match="physical_batch_size: 48 records"):
        fitting_chunk(fresh, PAD, (64, 48), max_length=8, device="cpu")
    assert chunk_sizes(None, "cuda") == GPU_CHUNKS and GPU_CHUNKS[0] > GPU_CHUNKS[-1]
    assert chunk_sizes(None, "cpu") == (8,)  # the CPU's memory kills rather than tells
    assert chunk_sizes(24, "cuda") == (24,)


@pytest.mark.parametrize("mode", ["bk", "hooks", "ghost"])
def test_a_large_poisson_batch_is_taken_in_chunks_in_every_mode(mode):
    """The sampler may draw any number of records; no pass ever holds more than the config's
    chunk, so memory is the config's, not the batch's."""
    model, seen = tiny_model(), []
    model.transformer.wte.register_forward_hook(lambda m, i, o: seen.append(len(i[0])))
    config = DpTraining(steps=3, sampling_rate=0.9, noise_multiplier=0.5, max_length=12,
                        grad_sample_mode=mode, physical_batch_size=5)
    dp_finetune(model, sequences(), PAD, config, PrivacyLedger(50.0, 1e-5, discretization=1e-2),
                "training", step_event(0.5, 0.9), next_key=lambda: b"k" * 16)
    assert max(seen) == 5 and sum(seen) > 3 * 40  # batches of about 58 records, in fives
