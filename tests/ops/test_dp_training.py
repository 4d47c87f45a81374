"""DP fine-tuning on a tiny local GPT-2: it learns, charges every step, stops at the budget."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from dp_accounting import dp_event  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from dpsynth.errors import BudgetExceededError  # noqa: E402
from dpsynth.ops.dp_training import DpTraining, SequenceLoss, dp_finetune  # noqa: E402
from dpsynth.privacy.ledger import PrivacyLedger  # noqa: E402

VOCAB, PAD = 50, 0


def tiny_model(seed=0):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                        tie_word_embeddings=False, bos_token_id=1, eos_token_id=1)
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
    from dpsynth.ops.training_state import TrainingCheckpoints
    from dpsynth.privacy.noise import NoiseSource

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
    assert "step-000004" in [p.name for p in (tmp_path / "resumed").iterdir()]
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
    from dpsynth.ops.training_state import TrainingCheckpoints

    checkpoints = TrainingCheckpoints(tmp_path, 2, lambda step: None, resume_step=4)
    model = tiny_model()
    with pytest.raises(FileNotFoundError, match="step-000004"):
        checkpoints.load(model, torch.optim.AdamW(model.parameters()))


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
