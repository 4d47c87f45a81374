"""Every recipe end to end as users run it: no `seed`, so the public seed is drawn once per
output folder and the DP noise is cryptographic. The default suite runs each recipe on the
tiny stand-ins the recipe tests use; the slow suite runs each on the shipped models, built
from the config as `dpsynth run` builds them."""

import contextlib
import json

import pandas as pd
import pytest

from dpsynth.config import parse_config
from dpsynth.methods.registry import RECIPES as REGISTRY
from dpsynth.run import run
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator
from tests.smollm import require_smollm

RECIPES = ["pe", "dpga", "eda", "ctcl", "dpft", "kd_tutor", "dp_decoding"]
TINY = {
    "pe": {"iterations": 3, "n_output": 12, "label_fraction": 0.1},
    "dpga": {"iterations": 3, "n_init": 40, "n_output": 12, "n_rewrite": 8, "n_fill": 8,
             "n_crossover": 8, "n_generate": 8, "length_bins": 10, "max_words": 60,
             "keyword_probe_samples": 5},
    "kd_tutor": {"n_output": 12, "pool_factor": 3, "n_negatives": 40, "teachers": 4,
                 "n_queries": 24, "query_batch": 10},
    "eda": {"iterations": 2, "n_public": 40, "n_offspring": 60, "domain_size": 20,
            "n_parents": 4, "n_output": 16, "text_words": 8},
    "ctcl": {"n_output": 20, "steps": 4, "batch_size": 32, "max_length": 32},
    "dpft": {"n_output": 20, "steps": 4, "batch_size": 32, "max_length": 32},
    "dp_decoding": {"n_output": 12, "batch_size": 4, "max_tokens": 6, "max_example_tokens": 16,
                    "forward_batch": 4},  # RecordingGenerator's tiny GPT-2
}


def _config(tmp_path, tickets, recipe, params, backends=None, epsilon=4.0):
    texts, labels = tickets
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label",
                    "labels": sorted(set(labels))},
           "budget": {"epsilon": epsilon},  # noise: cryptographic, the default
           "recipe": {"name": recipe, "params": params},
           "output": {"dir": str(tmp_path / "out")}}  # no seed: as users run it
    if backends is not None:
        raw["backends"] = backends
    config = parse_config(raw, base_dir=tmp_path)
    assert config.seed is None and config.budget.private
    return config


def _check(outputs, tmp_path, tickets, epsilon=4.0):
    synthetic = pd.read_csv(outputs.synthetic, keep_default_na=False)
    assert len(synthetic) > 0 and (synthetic["text"].str.strip() != "").all()
    assert set(synthetic["label"]) <= set(tickets[1])
    privacy = json.loads(outputs.privacy.read_text())
    assert privacy["private"] is True and "NOT_PRIVATE" not in privacy
    assert 0 < privacy["spent"]["epsilon"] <= epsilon
    assert privacy["recomputed_epsilon"] == pytest.approx(privacy["spent"]["epsilon"])
    header = json.loads((tmp_path / "out" / "checkpoints" / "releases.jsonl")
                        .read_text().splitlines()[0])["header"]
    assert header["noise"] == "cryptographic"
    assert 0 <= header["public_seed"] < 2**31  # a seed every library takes
    assert CANARY not in outputs.result.texts


def tiny_stand_ins(recipe, tmp_path, getfixturevalue):
    """(params, embedder) for a recipe on the tiny stand-ins of its own tests."""
    params = dict(TINY[recipe])
    embedder = HashEmbedder()
    if recipe == "eda":
        pytest.importorskip("torch")
        from tests.tiny_lm import INVERSION_DIM

        params["decoder"] = str(getfixturevalue("tiny_inversion")[1])
        embedder = HashEmbedder(INVERSION_DIM)
    if recipe == "dp_decoding":
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    if recipe in ("ctcl", "dpft"):
        pytest.importorskip("torch")
        pytest.importorskip("opacus")
        params["model"] = str(getfixturevalue("tiny_lm"))
    if recipe == "ctcl":
        from dpsynth.methods.parts.topics import TopicModel

        centroids = HashEmbedder().encode(["invoice refund charge", "parcel courier delivery",
                                           "wifi screen battery"])
        params["topic_model"] = str(TopicModel(
            centroids, [["invoice", "refund"], ["parcel", "courier"], ["wifi", "battery"]],
            {"method": "test"}).save(tmp_path / "topics"))
    return params, embedder


@pytest.fixture
def stand_ins(request, tmp_path):
    recipe = request.param
    return (recipe, *tiny_stand_ins(recipe, tmp_path, request.getfixturevalue))


def _one_thread_if_torch(recipe):
    if recipe not in ("eda", "ctcl", "dpft", "dp_decoding"):
        return contextlib.nullcontext()
    from tests.tiny_lm import one_torch_thread

    return one_torch_thread()


@pytest.mark.parametrize("stand_ins", RECIPES, indirect=True)
def test_every_recipe_runs_unseeded_on_tiny_stand_ins(tmp_path, tickets, stand_ins):
    recipe, params, embedder = stand_ins
    with _one_thread_if_torch(recipe):
        outputs = run(_config(tmp_path, tickets, recipe, params), embedder=embedder,
                      generator=RecordingGenerator())
    _check(outputs, tmp_path, tickets)


@pytest.mark.parametrize("votes", ["hard", "soft"])
def test_kd_tutor_runs_unseeded_with_either_vote(tmp_path, tickets, votes):
    outputs = run(_config(tmp_path, tickets, "kd_tutor", {**TINY["kd_tutor"], "votes": votes}),
                  embedder=HashEmbedder(), generator=RecordingGenerator())
    _check(outputs, tmp_path, tickets)


@pytest.mark.parametrize("stand_ins", RECIPES, indirect=True)
def test_no_recipe_outputs_a_text_twice_from_a_generator_that_repeats_itself(
        tmp_path, tickets, stand_ins):
    """Each text at most once, whitespace aside, where every generator answer comes twice
    (ctcl and dpft sample their own LM: greedily, so every request of one condition is
    answered alike); a repeat is asked again or dropped, never output."""
    from tests.methods.fakes import RepeatingGenerator

    recipe, params, embedder = stand_ins
    if recipe in ("ctcl", "dpft"):
        params["temperature"] = 0.0
    if recipe == "dpga":  # elites nearly the whole population: copies would be chosen
        params |= {"iterations": 1, "n_init": 16, "n_output": 12}
    with _one_thread_if_torch(recipe):
        outputs = run(_config(tmp_path, tickets, recipe, params), embedder=embedder,
                      generator=RepeatingGenerator())
    texts = [" ".join(t.split()) for t in outputs.result.texts]
    assert texts and len(set(texts)) == len(texts)


SHIPPED = {  # small sizes; every model is the shipped default, built from the config
    "pe": {"iterations": 2, "n_output": 16},
    "dpga": {"iterations": 2, "n_init": 40, "n_output": 12, "n_rewrite": 8, "n_fill": 8,
             "n_crossover": 8, "n_generate": 8, "length_bins": 10, "max_words": 40,
             "keyword_probe_samples": 4},
    "kd_tutor": {"n_output": 12, "pool_factor": 2, "n_negatives": 30, "teachers": 3,
                 "n_queries": 20, "query_batch": 10},
    "eda": {"iterations": 2, "n_public": 40, "n_offspring": 60, "domain_size": 40,
            "n_parents": 4, "n_output": 12},
    "ctcl": {"n_output": 12, "steps": 2, "batch_size": 16, "max_length": 32},
    "dpft": {"n_output": 12, "steps": 2, "batch_size": 16, "max_length": 32},
    "dp_decoding": {"n_output": 4, "batch_size": 4, "max_tokens": 12, "forward_batch": 4},
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_runs_unseeded_on_the_shipped_models(tmp_path, tickets, recipe):
    pytest.importorskip("torch")
    from tests.tiny_lm import one_torch_thread

    if REGISTRY[recipe].uses_backend_generator:
        require_smollm()
    backends = {"embedder": {"name": "minilm"}}  # and the default generator, smollm
    with one_torch_thread():
        outputs = run(_config(tmp_path, tickets, recipe, SHIPPED[recipe], backends))
    _check(outputs, tmp_path, tickets)
