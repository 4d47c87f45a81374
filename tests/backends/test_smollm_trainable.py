"""SmolLM2 as the LM ctcl and dpft fine-tune: documents in the chat format the sampler asks,
LoRA adapters that really move under DP-Adam (opacus #820 reports DP-LoRA updates silently
lost with recent peft), and a no-noise run that learns a toy task end to end."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from dp_accounting import dp_event  # noqa: E402

from dpsynth.privacy.ledger import PrivacyLedger  # noqa: E402
from dpsynth.private.training.dp_training import DpTraining, dp_finetune  # noqa: E402
from tests.smollm import require_smollm  # noqa: E402

END = 1
"""The toy's end of text, which pads too (not a padding index: tied, its logit would stay 0)."""
EVENT = dp_event.PoissonSampledDpEvent(1.0, dp_event.GaussianDpEvent(1.0))


def keys():
    counter = iter(range(10**6))
    return lambda: next(counter).to_bytes(16, "big")


def train(model, documents, pad_id, steps, noise, learning_rate, frozen=()):
    config = DpTraining(steps=steps, sampling_rate=1.0, noise_multiplier=noise,
                        max_grad_norm=1.0, learning_rate=learning_rate, max_length=64,
                        frozen=frozen, expected_batch_size=len(documents))
    ledger = PrivacyLedger(1e9, 1e-5, discretization=0.1)
    return dp_finetune(model, [ids for ids, _ in documents], pad_id, config, ledger,
                       "training", EVENT, keys(), starts=[start for _, start in documents])


def tiny_lora_llama():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=32, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=END, pad_token_id=None)
    return get_peft_model(LlamaForCausalLM(config), LoraConfig(
        r=8, lora_alpha=16, lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"]))


def test_a_no_noise_lora_run_learns_a_toy_task_through_dp_finetune():
    """Two prompts, each with its own reply: after DP-Adam at σ = 0 on the adapters alone,
    the model writes each reply after its prompt (greedy), which the public model did not."""
    documents = [([3, 4, 10, 11, 12, END], 2), ([3, 5, 20, 21, 22, END], 2)] * 4
    model = tiny_lora_llama()

    def replies():
        with torch.no_grad():
            out = []
            for ids, start in documents[:2]:
                logits = model(input_ids=torch.tensor([ids[:-1]])).logits[0]
                out.append(logits[start - 1:].argmax(-1).tolist())
            return out

    wanted = [ids[start:] for ids, start in documents[:2]]
    assert replies() != wanted
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    train(model, documents, END, steps=40, noise=0.0, learning_rate=1e-2)
    model.eval()
    assert replies() == wanted
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)


def test_the_noise_reaches_the_adapters_and_nothing_else():
    """With σ > 0 and a batch whose clipped gradients are zero (every target ignored), every
    adapter weight moves and no base weight does: the update is not dropped on the way."""
    model = tiny_lora_llama()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train(model, [([3, 4, 5, END], 9)] * 4, END, steps=1, noise=1.0, learning_rate=1e-3)
    for name, p in model.named_parameters():
        moved = not torch.equal(p, before[name])
        assert moved == ("lora_" in name), name


@pytest.fixture(scope="module")
def smollm():
    require_smollm()
    from dpsynth.backends.smollm.trainable import SmolLMTrainable

    return SmolLMTrainable(lora_rank=4)


def test_a_document_is_the_samplers_prompt_then_the_reply(smollm, monkeypatch, tmp_path):
    from dpsynth.backends import Condition
    from dpsynth.backends.smollm import engines

    ids, start = smollm.document("Sports", ("match", "goal"), " A late goal won it. ")
    assert ids[:start] == smollm.prompt_ids("Sports", ("match", "goal"))
    assert smollm._tokenizer.decode(ids[start:]) == "A late goal won it.<|im_end|>"
    assert ids[-1] == smollm.pad_id
    kind_ids, kind_start = smollm.document("Sports", (), "A goal.", kind="news report")
    assert "Write a short news report about Sports" in smollm._tokenizer.decode(
        kind_ids[:kind_start])
    asked = []

    class Engine:
        name = "fake"

        def __init__(self, *args):
            pass

        def sample(self, prompts, *args):
            asked.extend(prompts)
            return [[] for _ in prompts]

    monkeypatch.setattr(engines, "CT2Engine", Engine)
    smollm.generator(tmp_path, 0.7, 0.9, 0, 1.0).generate(
        [Condition(label="Sports", keywords=("match", "goal"))])
    assert asked[0] == ids[:start]  # trained on exactly what sampling asks


def test_smollm_lora_weights_move_and_the_export_differs_from_the_public_model(smollm,
                                                                               tmp_path):
    model = smollm.fresh_model()
    documents = [smollm.document("Sports", (), "The home side won the cup final 2-1."),
                 smollm.document("Business", (), "Shares rose after the bank's results.")]
    adapters = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    assert len(adapters) == 30 * 7 * 2  # A and B on every linear layer of the 30 blocks
    train(model, documents, smollm.pad_id, steps=2, noise=0.0, learning_rate=1e-2)
    moved = [n for n, p in model.named_parameters() if n in adapters
             and not torch.equal(p, adapters[n])]
    assert len(moved) == len(adapters)
    public = smollm.fresh_model().merge_and_unload().state_dict()
    merged = model.merge_and_unload().state_dict()
    changed = [n for n, t in merged.items() if not torch.equal(t, public[n])]
    assert any("q_proj" in n for n in changed) and any("down_proj" in n for n in changed)
    assert not any("embed_tokens" in n or "norm" in n for n in changed)


def test_a_lora_checkpoint_holds_the_adapters_and_loads_back_onto_the_public_model(tmp_path):
    from safetensors import safe_open

    from dpsynth.private.training.state import TrainingCheckpoints

    documents = [([3, 4, 10, 11, 12, END], 2), ([3, 5, 20, 21, 22, END], 2)] * 4
    model = tiny_lora_llama()
    config = DpTraining(steps=3, sampling_rate=1.0, noise_multiplier=0.5, max_grad_norm=1.0,
                        learning_rate=1e-2, max_length=64, expected_batch_size=8)
    checkpoints = TrainingCheckpoints(tmp_path, 3, lambda step: None)
    dp_finetune(model, [d for d, _ in documents], END, config,
                PrivacyLedger(1e9, 1e-5, discretization=0.1), "training", EVENT, keys(),
                checkpoints, starts=[s for _, s in documents])
    with safe_open(next(tmp_path.glob("step-*.safetensors")), "pt") as state:
        saved = [n[len("model/"):] for n in state.keys() if n.startswith("model/")]  # noqa: SIM118
    assert saved and all("lora_" in n for n in saved)
    fresh = tiny_lora_llama()
    TrainingCheckpoints(tmp_path, 3, lambda step: None, resume_step=3).load_weights(fresh)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
