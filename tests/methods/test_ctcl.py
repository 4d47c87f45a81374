"""CTCL and the DP fine-tune baseline end to end on a tiny local LM and topic model."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpsynth.config import parse_config
from dpsynth.methods.parts.topics import TopicModel
from dpsynth.run import run
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator, ticket_dataset


@pytest.fixture
def topics(tmp_path, tickets):
    embedder = HashEmbedder()
    centroids = embedder.encode(["invoice refund charge", "parcel courier delivery",
                                 "wifi screen battery"])
    model = TopicModel(centroids, [["invoice", "refund"], ["parcel", "courier"],
                                   ["wifi", "battery"]], {"method": "test"})
    return model.save(tmp_path / "topics")


def config(tmp_path, tickets, recipe, tiny_lm, topics, noise="cryptographic", **params):
    import pandas as pd

    texts, labels = tickets
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    base = {"n_output": 30, **({"model": str(tiny_lm)} if tiny_lm else {}), "steps": 6,
            "batch_size": 32, "max_length": 32, **params}
    if recipe == "ctcl":
        base["topic_model"] = str(topics)
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": sorted(set(labels))},
           "budget": {"epsilon": 4.0, "noise": noise},
           "recipe": {"name": recipe, "params": base},
           "output": {"dir": str(tmp_path / recipe)}, "seed": 3}
    return parse_config(raw, base_dir=tmp_path)


@pytest.mark.parametrize("recipe", ["ctcl", "dpft"])
def test_dp_lm_recipes_train_generate_and_account(tmp_path, tickets, tiny_lm, topics, recipe):
    outputs = run(config(tmp_path, tickets, recipe, tiny_lm, topics), embedder=HashEmbedder(),
                  generator=RecordingGenerator())
    # 30 asked; a toy LM's failed replies are dropped, not asked again (24 kept seen once)
    assert 20 <= len(outputs.result.texts) <= 30
    assert set(outputs.result.labels) <= set(tickets[1])
    privacy = json.loads(outputs.privacy.read_text())
    stages = privacy["breakdown"]
    assert stages["training"]["releases"] == 6
    assert ("topic_histogram" in stages) == (recipe == "ctcl")
    assert ("label_histogram" in stages) == (recipe == "dpft")  # ctcl: (label, topic) cells
    assert 3.9 < privacy["spent"]["epsilon"] <= 4.0
    assert CANARY not in "\n".join(outputs.result.texts)
    usage = json.loads((outputs.privacy.parent / "usage.json").read_text())["generator"]
    assert usage["outputs"] == usage["outputs_generate"] >= 30  # the samples of its own LM


def test_ctcl_conditions_pair_each_label_with_the_topics_of_its_cells():
    from types import SimpleNamespace

    from dpsynth.methods.ctcl import Ctcl

    recipe = Ctcl.from_config({"n_output": 40})
    ctx = SimpleNamespace(private=SimpleNamespace(label_names=["billing", "delivery"]))
    state = {"cell_probs": [[0.5, 0.0, 0.0], [0.0, 0.25, 0.25]],
             "topic_keywords": [["invoice"], ["parcel"], ["courier"]]}
    conds = recipe._conditions(ctx, state)
    pairs = {(c.label, c.keywords) for c in conds}
    assert pairs == {("billing", ("invoice",)), ("delivery", ("parcel",)),
                     ("delivery", ("courier",))}
    assert sum(c.label == "billing" for c in conds) == 20


def test_a_folder_of_the_older_conditions_is_refused_before_training_resumes(tmp_path):
    """Its ledger may hold a label histogram the current plan does not: resuming training
    would spend the rest of the budget (or overrun it) only to be refused at sampling."""
    from types import SimpleNamespace

    from dpsynth.errors import InputError
    from dpsynth.methods.ctcl import Ctcl

    recipe = Ctcl.from_config({"steps": 6})

    def trained(*_):
        raise AssertionError("training resumed")

    recipe._train = trained
    old = {"topic_probs": [1.0], "label_probs": [0.5, 0.5], "topic_keywords": [["invoice"]],
           "trained_steps": 2}
    ctx = SimpleNamespace(plan=None, resumed=(2, old),
                          checkpoints=SimpleNamespace(folder=tmp_path))
    with pytest.raises(InputError, match="older dpsynth"):
        recipe.run(ctx)


def test_ctcl_keeps_the_seeds_topic_noise(tmp_path, tickets, tiny_lm, topics):
    from dpsynth.methods.ctcl import Ctcl

    recipe = Ctcl.from_config({"steps": 6, "topic_model": str(topics)})
    plan = recipe.budget_plan(ticket_dataset(tickets), 4.0, 1e-4)
    assert plan.stage("topic_histogram").noise_scale == 10.0
    free = Ctcl.from_config({"steps": 6, "topic_noise_multiplier": None}).budget_plan(
        ticket_dataset(tickets), 4.0, 1e-4)
    assert not np.isclose(free.stage("topic_histogram").noise_scale, 10.0)


def test_dpft_refuses_topic_params():
    from dpsynth.errors import ConfigError
    from dpsynth.methods.dpft import DpFinetune

    with pytest.raises(ConfigError, match="recipe.params.topic_model: unknown key"):
        DpFinetune.from_config({"topic_model": "x"})


def test_a_training_device_torch_cannot_use_is_refused_before_any_release(
        tmp_path, tickets, tiny_lm, topics, monkeypatch):
    import torch

    from dpsynth.errors import ConfigError

    class Counting(HashEmbedder):
        private_calls = 0

        def encode_private(self, texts):
            self.private_calls += 1
            return super().encode_private(texts)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    embedder = Counting()
    for device, message in [("cuda", "torch sees no such device"),
                            ("tpu0", "is not a torch device")]:
        cfg = config(tmp_path, tickets, "ctcl", tiny_lm, topics, device=device)
        with pytest.raises(ConfigError, match=f"recipe.params.device: .*{message}"):
            run(cfg, embedder=embedder, generator=RecordingGenerator())
        assert not (tmp_path / "ctcl" / "privacy.json").exists()
        assert embedder.private_calls == 0


def test_auto_takes_a_gpu_only_where_book_keeping_clipping_can_use_it(monkeypatch):
    import torch

    from dpsynth.errors import ConfigError
    from dpsynth.private.training.dp_training import training_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert training_device("auto", "bk") == "cpu"
    assert training_device("cpu:0", "hooks") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert training_device("auto", "bk") == "cuda"
    assert training_device("auto", "hooks") == "cpu"
    assert training_device("cuda:1", "bk") == "cuda:1"
    with pytest.raises(ConfigError, match="sees 2 GPU"):
        training_device("cuda:2", "bk")
    with pytest.raises(ConfigError, match="needs grad_sample_mode bk"):
        training_device("cuda", "ghost")


class _Killed(RuntimeError):
    pass


def test_ctcl_killed_mid_training_resumes_to_the_unbroken_output(tmp_path, tickets, tiny_lm,
                                                                 topics, monkeypatch):
    from dpsynth.checkpoint import CheckpointStore
    from dpsynth.private.training.state import TrainingCheckpoints

    for name in "ab":
        (tmp_path / name).mkdir()
    whole = run(config(tmp_path / "a", tickets, "ctcl", tiny_lm, topics, checkpoint_every=2,
                       noise="seeded_not_private"),  # reproducible, so comparable
                embedder=HashEmbedder(), generator=RecordingGenerator())
    save = TrainingCheckpoints.save

    def save_then_die(self, step, model, optimizer):
        save(self, step, model, optimizer)
        if step == 4:
            raise _Killed

    resumed_config = config(tmp_path / "b", tickets, "ctcl", tiny_lm, topics,
                            checkpoint_every=2, noise="seeded_not_private")
    with monkeypatch.context() as patch:
        patch.setattr(TrainingCheckpoints, "save", save_then_die)
        with pytest.raises(_Killed):
            run(resumed_config, embedder=HashEmbedder(), generator=RecordingGenerator())
    out = resumed_config.output.dir
    step, envelope = CheckpointStore(out / "checkpoints").latest()
    assert step == 4 and envelope["recipe"]["trained_steps"] == 4
    resumed = run(resumed_config, embedder=HashEmbedder(), generator=RecordingGenerator())
    assert resumed.result.texts == whole.result.texts
    assert resumed.ledger.to_dict()["charges"] == whole.ledger.to_dict()["charges"]
    assert not (out / "checkpoints" / "training").exists()


def test_the_shipped_topic_model_is_what_ctcl_loads_by_default():
    from dpsynth.methods.ctcl import Ctcl

    model = Ctcl.from_config({}).topic_model
    assert model.centroids.shape == (100, 384)
    assert np.allclose(np.linalg.norm(model.centroids, axis=1), 1.0, atol=1e-4)
    assert all(len(words) == 10 and all(w.strip() for w in words) for words in model.keywords)
    assert model.meta["paragraphs"] > 1000


def test_ctcl_killed_after_training_exports_without_training_again(tmp_path, tickets, tiny_lm,
                                                                   topics, monkeypatch):
    from dpsynth.private.training.state import TrainingCheckpoints

    cfg = config(tmp_path, tickets, "ctcl", tiny_lm, topics, checkpoint_every=2)
    save = TrainingCheckpoints.save

    def commit_then_die(self, step, model, optimizer):
        save(self, step, model, optimizer)
        if step == 6:  # the final state is committed; the model folder is not written yet
            raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(TrainingCheckpoints, "save", commit_then_die)
        with pytest.raises(_Killed):
            run(cfg, embedder=HashEmbedder(), generator=RecordingGenerator())
    resumed = run(cfg, embedder=HashEmbedder(), generator=RecordingGenerator())
    stages = [c.stage for c in resumed.ledger.charges]
    assert stages.count("training") == 6  # no step trained twice
    assert resumed.result.texts
    assert not (cfg.output.dir / "checkpoints" / "training").exists()


def test_dpft_neither_uses_nor_probes_the_configured_generator(tmp_path, tickets, tiny_lm,
                                                               topics, caplog, monkeypatch):
    """It samples the LM it fine-tunes: a generator server that is down must not stop it, and
    no generator is even built (the default one would load SmolLM2 for nothing)."""
    from dpsynth.backends.config import BackendsConfig, OpenAIChatConfig

    def no_build(*args, **kwargs):
        raise AssertionError("dpft built backends.generator")

    monkeypatch.setattr("dpsynth.run.models.build_generator", no_build)

    cfg = config(tmp_path, tickets, "dpft", tiny_lm, topics, steps=2, n_output=6)
    down = OpenAIChatConfig(base_url="http://127.0.0.1:9/v1", model="m",
                            http={"max_retries": 0, "timeout_s": 1})
    cfg = cfg.model_copy(update={"backends": BackendsConfig(generator=down)})
    with caplog.at_level("INFO"):
        outputs = run(cfg, embedder=HashEmbedder())
    assert outputs.result.texts
    assert "backends.generator is not used" in caplog.text
    assert "DP fine-tuning: 2 of 2 steps done" in caplog.text  # no bar outside a terminal


@pytest.mark.slow
def test_ctcl_fine_tunes_smollm_with_lora_and_samples_it(tmp_path, tickets, topics):
    """The default LM end to end: LoRA adapters trained under DP-Adam, merged, converted to
    CTranslate2 and sampled through the smollm generator's prompts; only the adapters are
    checkpointed, and the canary never comes out."""
    from tests.smollm import require_smollm

    require_smollm()
    cfg = config(tmp_path, tickets, "ctcl", None, topics, n_output=6, steps=2, batch_size=8,
                 max_length=64, checkpoint_every=1)
    outputs = run(cfg, embedder=HashEmbedder(), generator=RecordingGenerator())
    texts = outputs.result.texts
    assert 1 <= len(texts) <= 6 and all(t.strip() for t in texts)
    assert CANARY not in "\n".join(texts)
    privacy = json.loads(outputs.privacy.read_text())
    assert privacy["breakdown"]["training"]["releases"] == 2
    exported = list((tmp_path / "ctcl").rglob("model.bin"))  # CTranslate2's int8 weights
    assert len(exported) == 1 and not list((tmp_path / "ctcl").rglob("step-*.safetensors"))


@pytest.mark.parametrize(("recipe", "mode"), [("ctcl", "bk"), ("dpft", "bk"),
                                             ("ctcl", "hooks")])
def test_memory_a_step_cannot_have_stops_the_run_before_any_release(
        tmp_path, tickets, tiny_lm, topics, monkeypatch, recipe, mode):
    """The largest pass a DP step can make is tried on pad tokens first: a machine that cannot
    hold it stops the run before the first release, not on a batch of long records later."""
    from dpsynth.errors import ConfigError
    from dpsynth.private.training.dp_training import SequenceLoss

    def full(self, logits, targets):
        raise MemoryError

    monkeypatch.setattr(SequenceLoss, "forward", full)
    cfg = config(tmp_path, tickets, recipe, tiny_lm, topics, physical_batch_size=4,
                 grad_sample_mode=mode)
    with pytest.raises(ConfigError, match="physical_batch_size: 4 records"):
        run(cfg, embedder=HashEmbedder(), generator=RecordingGenerator())
    journal = tmp_path / recipe / "checkpoints" / "releases.jsonl"
    assert not journal.exists() or "charge" not in journal.read_text()


@pytest.mark.parametrize("recipe", ["ctcl", "dpft"])
def test_each_record_is_cut_to_max_length_as_it_is_tokenised(tmp_path, tickets, tiny_lm,
                                                             topics, recipe, monkeypatch):
    """Tokenising happens after ctcl's topic histogram (dpft's label histogram): every whole
    token list, up to data.max_chars a record, was kept until pad_batch cut it, a memory peak
    that followed the private records' lengths after a release. Training now receives each
    record already cut to max_length."""
    from dpsynth.private.training import dp_training

    texts, labels = tickets
    long = [f"{t} " + " ".join(["refund invoice charge"] * 150) for t in texts]
    seen: list[int] = []
    real = dp_training.dp_finetune

    def recording(model, sequences, *args, **kwargs):
        seen.extend(len(s) for s in sequences)
        return real(model, sequences, *args, **kwargs)

    monkeypatch.setattr(dp_training, "dp_finetune", recording)
    run(config(tmp_path, (long, labels), recipe, tiny_lm, topics, steps=2),
        embedder=HashEmbedder(), generator=RecordingGenerator())
    assert len(seen) == len(texts) and max(seen) == 32  # max_length, and records reach it
