"""Embedding-EDA end to end on a tiny LM and a tiny inversion decoder with the hashed
bag-of-words embedder: budget, stopping, resume, no private text anywhere, and Alg. 2."""

import json

import numpy as np
import pandas as pd
import pytest

from dpsynth.config import parse_config
from dpsynth.errors import ConfigError
from dpsynth.methods.parts.gaussian import GaussianModel, estimate
from dpsynth.run import run
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator, ticket_dataset
from tests.tiny_lm import INVERSION_DIM, one_torch_thread

DIM = INVERSION_DIM
# domain_size >= every label's population (10, then 15): plain Gumbel top-k, never empty
PARAMS = {"iterations": 3, "n_public": 40, "n_offspring": 60, "domain_size": 20,
          "n_parents": 4, "n_output": 16, "text_words": 8}


@pytest.fixture
def decoder_dir(tiny_inversion):
    with one_torch_thread():
        yield tiny_inversion[1]


def make_config(tmp_path, tickets, decoder_dir, out="out", epsilon=8.0,
                noise="cryptographic", **params):
    texts, labels = tickets
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": sorted(set(labels))},
           "budget": {"epsilon": epsilon, "noise": noise},
           "recipe": {"name": "eda",
                      "params": {**PARAMS, "decoder": str(decoder_dir), **params}},
           "output": {"dir": str(tmp_path / out)}, "seed": 7}
    return parse_config(raw, base_dir=tmp_path)


def test_eda_runs_spends_its_budget_and_leaks_nothing(tmp_path, tickets, decoder_dir, caplog):
    generator = RecordingGenerator()
    with caplog.at_level("WARNING", logger="dpsynth.methods.eda"):
        outputs = run(make_config(tmp_path, tickets, decoder_dir), embedder=HashEmbedder(DIM),
                      generator=generator)
    assert not [r for r in caplog.records if "⊥ bar" in r.getMessage()]  # populations ≤ K
    synthetic = pd.read_csv(outputs.synthetic)
    assert 0 < len(synthetic) <= PARAMS["n_output"]
    assert set(synthetic["label"]) <= {"billing", "shipping", "technical", "account"}
    privacy = json.loads(outputs.privacy.read_text())
    rows = [json.loads(r) for r in outputs.metrics.read_text().splitlines()]
    releases = privacy["breakdown"]["selection"]["releases"]
    assert releases == len(rows) >= 1  # one charge per iteration, all labels together
    assert privacy["spent"]["epsilon"] <= 8.0
    if releases == PARAMS["iterations"]:  # ran to T: the plan fills the budget
        assert privacy["spent"]["epsilon"] > 7.8
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())["generator"]
    assert usage["outputs_generate"] == PARAMS["n_public"]  # = expected_generations
    assert any(r["selected"] for r in rows)
    assert all(r["selected"] == sum(r["selected_by_label"].values()) for r in rows)
    # private text never reaches the generator, a checkpoint, a metric or the output
    sent = "\n".join(generator.inputs)
    for text in tickets[0]:
        assert text not in sent
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert "zqx-canary" not in path.read_text(errors="ignore"), path
    assert CANARY not in outputs.result.texts


def test_an_empty_selection_stops_the_loop(tmp_path, tickets, decoder_dir, caplog):
    """At a tiny ε the ⊥ bar of LimitedDomain sits far above any count: nothing is
    selected in the first iteration, every label stops, and no more budget is spent."""
    with caplog.at_level("WARNING", logger="dpsynth.methods.eda"):
        # seeded: under fresh noise a candidate clears the bar with probability about
        # δ₀ = 1.5e-4 each, so about once in a hundred runs of this test (seen once)
        outputs = run(make_config(tmp_path, tickets, decoder_dir, epsilon=0.05, iterations=4,
                                  domain_size=4, n_parents=4, noise="seeded_not_private"),
                      embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    # the warning foresaw it, from public parameters: 15 offspring a label > K = 4
    warned = [r.getMessage() for r in caplog.records if "⊥ bar" in r.getMessage()]
    assert len(warned) == 1 and "up to 15 per label" in warned[0] and "= 16 keep" in warned[0]
    rows = [json.loads(r) for r in outputs.metrics.read_text().splitlines()]
    assert len(rows) == 1
    assert rows[0]["selected"] == 0 and rows[0]["labels_running"] == 0
    assert json.loads(outputs.privacy.read_text())["breakdown"]["selection"]["releases"] == 1
    # the fallback output decodes the public initial population
    assert outputs.result.texts


class _Crash(RuntimeError):
    pass


def test_kill_and_resume_gives_the_uninterrupted_output(tmp_path, tickets, decoder_dir,
                                                       monkeypatch):
    from dpsynth.methods import eda

    def config(out):  # a seeded (non-private) reproduction, so two runs can be compared
        return make_config(tmp_path, tickets, decoder_dir, out=out, noise="seeded_not_private")

    whole = run(config("whole"), embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    assert len(whole.ledger.charges) >= 2, "the run must reach a second iteration"
    calls = {"n": 0}
    original = eda.estimate

    def crashing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:  # in the second iteration, after its charge
            raise _Crash
        return original(*args, **kwargs)

    monkeypatch.setattr(eda, "estimate", crashing)
    with pytest.raises(_Crash):
        run(config("resumed"), embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    monkeypatch.setattr(eda, "estimate", original)
    resumed = run(config("resumed"), embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    assert resumed.result.texts == whole.result.texts
    assert resumed.result.labels == whole.result.labels
    assert resumed.ledger.to_dict()["charges"] == whole.ledger.to_dict()["charges"]


def test_a_checkpoint_of_an_older_state_layout_is_refused_before_any_release(
        tmp_path, tickets, decoder_dir, monkeypatch):
    """A folder an older eda stopped mid-run holds no label shares: resuming must say so,
    not fail on a missing key after releasing more."""
    from dpsynth.errors import InputError
    from dpsynth.methods import eda

    config = make_config(tmp_path, tickets, decoder_dir, out="old")
    def crash(*_args, **_kwargs):
        raise _Crash

    monkeypatch.setattr(eda, "estimate", crash)
    with pytest.raises(_Crash):
        run(config, embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    monkeypatch.undo()
    for path in (tmp_path / "old" / "checkpoints").glob("step-*.json"):
        saved = json.loads(path.read_text())
        del saved["state"]["state_version"], saved["state"]["recipe"]["shares"]
        path.write_text(json.dumps(saved))
    journal = tmp_path / "old" / "checkpoints" / "releases.jsonl"
    before = journal.read_text()
    with pytest.raises(InputError, match="another layout.*use a new output folder"):
        run(config, embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    assert journal.read_text() == before


@pytest.mark.parametrize("label_fraction", [0.05, 0.0])
def test_the_output_follows_the_dp_label_histogram(tmp_path, tickets, decoder_dir,
                                                    label_fraction):
    """Five records in eight are billing: the output is mostly billing too (a DP label
    histogram, charged), or split evenly with label_fraction 0 (nothing charged for it).
    ε = 20 puts the histogram's Laplace scale at 1 a count (at ε = 8 it is 2.5 on counts
    of about 10, and the billing share fell to one half in a run of five)."""
    kept = [(t, y) for i, (t, y) in enumerate(zip(*tickets, strict=True))
            if y == "billing" or (i // 4) % 5 == 0]
    skewed = ([t for t, _ in kept], [y for _, y in kept])
    outputs = run(make_config(tmp_path, skewed, decoder_dir, epsilon=20.0, n_output=40,
                              label_fraction=label_fraction),
                  embedder=HashEmbedder(DIM), generator=RecordingGenerator())
    shares = pd.read_csv(outputs.synthetic)["label"].value_counts(normalize=True)
    stages = json.loads(outputs.privacy.read_text())["breakdown"]
    if label_fraction:
        assert stages["label_histogram"]["releases"] == 1
        assert shares["billing"] > 0.5
    else:
        assert "label_histogram" not in stages
        assert shares["billing"] < 0.4


def test_plan_bounds_the_iterations_by_the_budget(tickets):
    from dpsynth.methods.eda import Eda

    private = ticket_dataset(tickets)
    few = Eda.from_config({"iterations": 2}).budget_plan(private, 2.0, 1e-5)
    many = Eda.from_config({"iterations": 8}).budget_plan(private, 2.0, 1e-5)
    assert many.stage("selection").noise_scale > few.stage("selection").noise_scale
    for plan in (few, many):
        assert plan.epsilon_composed <= 2.0
        # votes only grow when a record is added: Gumbel 1/ε₀ per selection, not 2/ε₀
        mech = plan.stage("selection").mechanism
        assert mech.monotonic and mech.noise_scale == pytest.approx(1 / mech.epsilon)


def test_offspring_follow_algorithm_2():
    """Offspring mean and spread match μ̂ and σ̂ of Alg. 2, computed here by hand."""
    rng = np.random.default_rng(0)
    parents = rng.normal(size=(12, 5)) * np.array([1, 2, 3, 4, 5]) + 10
    alpha, r = 0.3, 4
    mu, sigma = parents.mean(0), parents.std(0)
    top = parents[:r]
    mu_hat = (1 - alpha) * mu + alpha * (parents[0] + parents[1] - parents[-1])
    sigma_hat = (1 - alpha) * sigma + alpha * np.sqrt(((top - top.mean(0)) ** 2).mean(0))
    model = estimate(parents, alpha, r)
    np.testing.assert_allclose(model.mean, mu_hat)
    np.testing.assert_allclose(model.std, sigma_hat)
    draws = model.mean + rng.standard_normal((200_000, 5)) * model.std
    np.testing.assert_allclose(draws.mean(0), mu_hat, atol=0.05)
    np.testing.assert_allclose(draws.std(0), sigma_hat, rtol=0.01)
    # `sample` draws from that Gaussian, then scales each draw to unit length
    unit = GaussianModel(model.mean, model.std).sample(50_000, np.random.default_rng(1))
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-5)
    expected = (draws / np.linalg.norm(draws, axis=1, keepdims=True)).mean(0)
    np.testing.assert_allclose(unit.mean(0), expected, atol=0.01)


def test_one_parent_gives_a_point_mass():
    model = estimate(np.array([[0.6, 0.8]]), 0.1, 10)
    np.testing.assert_allclose(model.mean, [0.6, 0.8])
    np.testing.assert_allclose(model.std, [0.0, 0.0])


def test_unlabelled_data_gives_an_unlabelled_set(tmp_path, tickets, decoder_dir):
    texts, _ = tickets
    pd.DataFrame({"text": texts}).to_csv(tmp_path / "private.csv", index=False)
    raw = {"data": {"path": "private.csv"}, "budget": {"epsilon": 4.0},
           "recipe": {"name": "eda", "params": {**PARAMS, "n_offspring": 15, "domain_size": 40,
                                                "decoder": str(decoder_dir)}},
           "output": {"dir": str(tmp_path / "out")}, "seed": 3}
    outputs = run(parse_config(raw, base_dir=tmp_path), embedder=HashEmbedder(DIM),
                  generator=RecordingGenerator())
    assert outputs.result.labels is None and outputs.result.texts
    rows = [json.loads(r) for r in outputs.metrics.read_text().splitlines()]
    assert rows[0]["selected_by_label"] == {"": PARAMS["n_parents"]}


def test_the_plan_note_weighs_the_selection_noise_against_the_votes():
    from dpsynth.data import PrivateDataset
    from dpsynth.methods.eda import Eda

    private = PrivateDataset([f"t{i}" for i in range(5_000)],
                             labels=["abc"[i % 3] for i in range(5_000)],
                             label_names=["a", "b", "c"])
    recipe = Eda.from_config({"n_offspring": 1_200})  # 4.2 votes a candidate
    low, high = (recipe.budget_plan(private, eps, 1e-5) for eps in (1.0, 8.0))
    assert low.stage("selection").mechanism.noise_scale > 4 * 5_000 / 1_200
    assert "4.2 votes a candidate" in recipe.plan_notes(private, low)[0]
    assert recipe.plan_notes(private, high) == []
    fewer = Eda.from_config({"n_offspring": 300})  # 17 votes a candidate: the same ε will do
    assert fewer.plan_notes(private, fewer.budget_plan(private, 1.0, 1e-5)) == []


def test_fewer_offspring_than_labels_is_refused_before_any_release(tmp_path, tickets,
                                                                   decoder_dir):
    """With n_offspring under the label count some label draws nothing once it has a
    Gaussian, which would stop the run after its releases: refused up front."""
    with pytest.raises(ConfigError, match="n_offspring: 3 .* 4 labels"):
        run(make_config(tmp_path, tickets, decoder_dir, n_offspring=3),
            embedder=HashEmbedder(INVERSION_DIM), generator=RecordingGenerator())
    assert not (tmp_path / "out" / "checkpoints" / "releases.jsonl").exists()
