"""One name for the output size (`n_output`), N by default; the other sizes follow from it as
each seed's appendix does; `recipe.time` / `--time` lowers the sizes the config leaves out
until the planned generator outputs fit a measured rate."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from dpsynth.cli import main
from dpsynth.config import parse_config, parse_duration
from dpsynth.data import PrivateDataset
from dpsynth.errors import ConfigError
from dpsynth.methods.registry import RECIPES
from dpsynth.preflight import make_plan
from dpsynth.run import run
from dpsynth.sizing import FIT_FILE, HEADROOM, Rate, propose
from tests.methods.fakes import HashEmbedder, RecordingGenerator, ticket_texts

LABELS = ["account", "billing", "shipping", "technical"]


def facts(n: int, labels=("a", "b")) -> PrivateDataset:
    return PrivateDataset([f"text {i}" for i in range(n)],
                          labels=[labels[i % len(labels)] for i in range(n)],
                          label_names=list(labels))


FIXED_OUTPUT = {"dp_decoding"}
"""Recipes whose output size must not follow N: dp_decoding's texts count its disjoint
batches, and a count that moved with one unit would reshuffle every record's batch."""


def test_a_recipe_with_a_fixed_output_size_still_calls_it_n_output():
    for name in FIXED_OUTPUT:
        recipe = RECIPES[name].from_config({})
        assert recipe.resolved(facts(300)).params.n_output == recipe.params.n_output
        assert recipe.resolved(facts(5_000)).params.n_output == recipe.params.n_output


@pytest.mark.parametrize("name", sorted(set(RECIPES) - FIXED_OUTPUT))
def test_every_recipe_names_its_output_size_n_output_and_defaults_it_to_n(name):
    recipe = RECIPES[name].from_config({})
    assert recipe.params.n_output is None  # left out: fixed at plan time, from N
    assert recipe.resolved(facts(300)).params.n_output == 300
    assert recipe.resolved(facts(5_000)).params.n_output == 5_000
    assert RECIPES[name].from_config({"n_output": 40}).resolved(facts(300)).params.n_output == 40


def test_the_default_is_the_declared_bound_where_n_is_not_public(tmp_path):
    texts, labels = ticket_texts(60)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "d.csv", index=False)
    raw = {"data": {"path": "d.csv", "label_column": "label", "labels": LABELS,
                    "max_units": 90},
           "budget": {"epsilon": 2.0}, "recipe": {"name": "pe"},
           "output": {"dir": str(tmp_path / "out")}}
    plan = make_plan(parse_config(raw, base_dir=tmp_path))
    assert plan.recipe.params.n_output == 90  # the bound, never the 60 records read


@pytest.mark.parametrize("name,old", [("pe", "n_samples"), ("dpga", "n_elite")])
def test_an_old_name_is_refused_naming_the_new_one(name, old):
    raw = {"data": {"path": "d.csv"}, "budget": {"epsilon": 1.0},
           "recipe": {"name": name, "params": {old: 500}}}
    with pytest.raises(ConfigError, match=rf"run.yaml: recipe.params.{old}: renamed n_output, "
                                          r"the output size every recipe shares; write "
                                          r"n_output: 500"):
        parse_config(raw, "run.yaml")


def test_dpga_scales_its_populations_as_app_d4_does():
    dpga = RECIPES["dpga"]
    sized = dpga.from_config({}).resolved(facts(300)).params
    assert (sized.n_output, sized.n_init, sized.n_rewrite, sized.n_fill, sized.n_crossover,
            sized.n_generate) == (300, 1_500, 300, 300, 300, 300)
    seed = dpga.from_config({"n_output": 2_000}).resolved(facts(300)).params
    assert (seed.n_init, seed.n_rewrite + seed.n_fill, seed.n_crossover, seed.n_generate) == (
        10_000, 4_000, 2_000, 2_000)  # App. D.4, word for word
    kept = dpga.from_config({"n_init": 700, "n_fill": 0}).resolved(facts(300)).params
    assert (kept.n_init, kept.n_fill, kept.n_rewrite) == (700, 0, 300)  # as given


def test_the_other_recipes_scale_from_the_output_size():
    kd = RECIPES["kd_tutor"].from_config({}).resolved(facts(300)).params
    assert (kd.n_output, kd.n_negatives) == (300, 300)
    assert RECIPES["kd_tutor"].from_config({}).expected_generations(facts(300)) == {
        "generate": 300 + 3 * 300}  # negatives and pool_factor × output
    eda = RECIPES["eda"].from_config({}).resolved(facts(8_000, tuple("abcd"))).params
    assert (eda.n_output, eda.n_public, eda.n_offspring) == (8_000, 8_000, 400)  # N / 20
    small = RECIPES["eda"].from_config({}).resolved(facts(300)).params
    assert small.n_offspring == 60  # at least n_parents (30) a label
    pe = RECIPES["pe"].from_config({"iterations": 3}).expected_generations(facts(300))
    assert pe == {"generate": 300, "rewrite": 600}


def test_a_run_at_the_defaults_writes_n_records(tmp_path):
    texts, labels = ticket_texts(48)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "d.csv", index=False)
    raw = {"data": {"path": "d.csv", "label_column": "label", "labels": LABELS},
           "budget": {"epsilon": 2.0}, "recipe": {"name": "pe", "params": {"iterations": 2}},
           "output": {"dir": str(tmp_path / "out")}, "seed": 3}
    outputs = run(parse_config(raw, base_dir=tmp_path), embedder=HashEmbedder(),
                  generator=RecordingGenerator())
    assert len(pd.read_csv(outputs.synthetic)) <= 48
    assert json.loads((tmp_path / "out" / "config.json").read_text())["recipe"]["params"] == {
        "iterations": 2}  # the config as written: N fixes the size, the fingerprint is stable


# -- the time budget --------------------------------------------------------------------------

def test_durations():
    assert [parse_duration(t) for t in ("15m", "1h30m", "90s", "2.5h", "900", "15 min")] == [
        900, 5400, 90, 9000, 900, 900]
    for bad in ("abc", "15x", "0m", "1h30", ""):
        with pytest.raises(ValueError, match="duration|no time"):
            parse_duration(bad)


def test_pe_lowers_its_iterations_first_and_keeps_the_output():
    pe = RECIPES["pe"].from_config({})
    assert propose(pe, facts(300), 3_000) == {}  # T·N = 3,000 fits
    assert propose(pe, facts(300), 1_000) == {"iterations": 3}  # 900
    assert propose(pe, facts(300), 599) == {"iterations": 2, "n_output": 299}  # T = 2 costs T = 1's


def test_dpga_lowers_its_iterations_then_the_output_and_what_follows_from_it():
    dpga = RECIPES["dpga"].from_config({})
    probes = 20 * 2  # keyword probes per label: fixed
    assert propose(dpga, facts(300), 1_500 + 1_200 * 2 + probes) == {"iterations": 3}
    changes = propose(dpga, facts(300), 800)
    assert changes["iterations"] == 1 and 5 * changes["n_output"] + probes <= 800
    assert 5 * (changes["n_output"] + 1) + probes > 800  # the largest that fits


def test_explicit_sizes_are_kept_and_named_when_they_keep_the_plan_over(tmp_path):
    dpga = RECIPES["dpga"].from_config({"iterations": 4, "n_output": 300})
    assert propose(dpga, facts(300), 800) == {}  # nothing it may change
    path = _config(tmp_path, "dpga", {"iterations": 4, "n_output": 300})
    plan = make_plan(_load(path, "15m"), measure=lambda: Rate(1.0, 10.0))
    assert plan.recipe.params.iterations == 4 and plan.recipe.params.n_output == 300
    assert "still over the time: the config sets iterations, n_output" in " ".join(
        plan.fit.lines())


def _config(tmp_path, recipe="pe", params=None, n=300):
    texts, labels = ticket_texts(n)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "d.csv", index=False)
    raw = {"data": {"path": "d.csv", "label_column": "label", "labels": LABELS},
           "budget": {"epsilon": 4.0}, "recipe": {"name": recipe, "params": params or {}},
           "output": {"dir": str(tmp_path / "out")}, "seed": 1}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path / "run.yaml"


def _load(path, time):
    raw = yaml.safe_load(path.read_text())
    raw["recipe"]["time"] = time
    return parse_config(raw, base_dir=path.parent)


@pytest.fixture
def rate(monkeypatch):
    """A measured rate of 1 s an output after 10 s of loading, without a model."""
    calls = []

    def measure(config, data):
        def measured():
            calls.append(1)
            return Rate(1.0, 10.0)
        return measured

    monkeypatch.setattr("dpsynth.preflight._measure", measure)
    return calls


@pytest.mark.parametrize("recipe,shrunk", [
    ("pe", "iterations 10 → 2"),
    ("dpga", "iterations 10 → 1, n_output 300 → 126, n_init 1,500 → 630"),  # 5n + 80 probes
])
def test_plan_with_a_time_says_what_it_shrank_and_to_what(tmp_path, capsys, rate, recipe,
                                                          shrunk):
    main(["plan", str(_config(tmp_path, recipe)), "--time", "15m"])
    out = " ".join(capsys.readouterr().out.split())
    budget = int(HEADROOM * 900 - 10)  # 710 outputs at 1 s each
    assert f"so about {budget:,} outputs" in out
    assert f"shrank to fit: {shrunk}" in out
    assert "(time)" in out and rate == [1]


def test_a_time_that_fits_changes_nothing(tmp_path, capsys, rate):
    main(["plan", str(_config(tmp_path, "pe", {"iterations": 1, "n_output": 10})),
          "--time", "1h"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the planned 20 outputs fit" in out and "nothing changed" in out


def test_a_bad_time_is_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(_config(tmp_path)), "--time", "soon"])
    assert exc.value.code == 2 and "'soon' is not a duration" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="recipe.time: .*not a duration"):
        _load(_config(tmp_path), "15 parsecs")


def test_a_run_keeps_the_sizes_of_its_first_start(tmp_path, rate):
    """A rerun, finished or resumed, reads the folder's fit instead of timing the generator
    again: a new rate would change the sizes its releases were made under."""
    path = _config(tmp_path, "pe", {"label_fraction": 0.2}, n=40)  # T·N = 400 outputs
    config = _load(path, "50s")  # 30 outputs fit: T = 2 at 40 costs 80, so N shrinks to 15
    outputs = run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    recorded = json.loads((tmp_path / "out" / "checkpoints" / FIT_FILE).read_text())
    assert recorded["proposed"] == {"label_fraction": 0.2, "iterations": 2, "n_output": 15}
    assert len(outputs.result.texts) == 15 and rate == [1]
    again = run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    assert again.already_complete and rate == [1]  # not measured again
    with pytest.raises(ConfigError, match="sized at its first start for recipe.time 50s"):
        run(_load(path, "1h"), embedder=HashEmbedder(), generator=RecordingGenerator())
    with pytest.raises(ConfigError, match="resume it with --time 50s"):
        run(_load(path, None), embedder=HashEmbedder(), generator=RecordingGenerator())


def test_recipes_without_generator_outputs_are_not_resized(tmp_path, capsys, rate):
    main(["plan", str(_config(tmp_path, "dpft", {"steps": 2})), "--time", "1m"])
    out = " ".join(capsys.readouterr().out.split())
    assert "time 1m: dpft's time is its DP training" in out and rate == []
