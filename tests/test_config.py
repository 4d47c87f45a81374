"""Config loading: located errors for unknown keys and bad values, and the δ rules."""

import logging
import math

import pytest
import yaml

from dpsynth.config import load_config, parse_config
from dpsynth.errors import ConfigError
from dpsynth.examples import EXAMPLE_CONFIG
from dpsynth.privacy.config import BudgetConfig, default_delta, resolve_delta

BASE = {"data": {"path": "d.csv"}, "budget": {"epsilon": 1.0}, "recipe": {"name": "dpga"}}


def with_(section, **values):
    return {**BASE, section: {**BASE.get(section, {}), **values}}


def test_bundled_example_loads():
    cfg = load_config(EXAMPLE_CONFIG)
    assert cfg.recipe.name == "dpga" and cfg.budget.epsilon == 4.0
    assert cfg.base_dir == EXAMPLE_CONFIG.parent


def test_unknown_key_error_gives_its_path():
    with pytest.raises(ConfigError, match=r"budget\.epsilom: unknown key"):
        parse_config({**BASE, "budget": {"epsilon": 1.0, "epsilom": 2}})
    with pytest.raises(ConfigError, match=r"backends\.embedder\.nmae: unknown key"):
        parse_config({**BASE, "backends": {"embedder": {"nmae": "x"}}})
    with pytest.raises(ConfigError, match=r"extra_section: unknown key"):
        parse_config({**BASE, "extra_section": {}})


@pytest.mark.parametrize("epsilon", [0, -1])
def test_epsilon_must_be_positive(epsilon):
    with pytest.raises(ConfigError, match=r"budget\.epsilon: -?\d+ is outside \(0, 100\]"):
        parse_config(with_("budget", epsilon=epsilon))


@pytest.mark.parametrize("delta", [0, 1, 1.5, -0.1])
def test_delta_in_open_unit_interval(delta):
    with pytest.raises(ConfigError, match=r"budget\.delta"):
        parse_config(with_("budget", delta=delta))


def test_missing_section_and_bad_recipe():
    with pytest.raises(ConfigError, match=r"recipe: Field required"):
        parse_config({k: v for k, v in BASE.items() if k != "recipe"})
    with pytest.raises(ConfigError, match=r"recipe\.name"):
        parse_config(with_("recipe", name="magic"))


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(tmp_path / "list.yaml")


def test_default_delta_is_one_over_n_ln_n():
    assert default_delta(8000) == pytest.approx(1 / (8000 * math.log(8000)))
    expected = 1 / (1000 * math.log(1000))
    assert resolve_delta(BudgetConfig(epsilon=1), 1000) == pytest.approx(expected)


def test_large_delta_is_refused_unless_the_config_says_why(caplog):
    with pytest.raises(ConfigError, match=r"at least 1/N=0.01 .*budget.delta_reason"):
        resolve_delta(BudgetConfig(epsilon=1, delta=0.01), 100)
    reason = "a public benchmark of 100 synthetic users"
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        assert resolve_delta(BudgetConfig(epsilon=1, delta=0.01, delta_reason=reason),
                             100) == 0.01
    assert "at least 1/N" in caplog.text and reason in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        resolve_delta(BudgetConfig(epsilon=1, delta=1e-6), 100)
    assert not caplog.records


def test_the_private_file_is_never_a_pool(tmp_path):
    (tmp_path / "d.csv").write_text("text\nsecret\n")
    raw = {**BASE, "backends": {"generator": {"name": "pool", "path": "d.csv"}}}
    with pytest.raises(ConfigError, match="is or holds the private data"):
        parse_config(raw, base_dir=tmp_path)
    raw["backends"]["generator"]["path"] = str(tmp_path)  # a folder holding it
    with pytest.raises(ConfigError, match="is or holds the private data"):
        parse_config(raw, base_dir=tmp_path)


@pytest.mark.parametrize(("labels", "refused"), [
    ([], "at least one label"), (["a", " "], "none of them blank"),
    (["a", "b", "a "], r"label\(s\) \['a'\] declared more than once"),
])
def test_a_declared_label_set_is_a_set_of_labels(labels, refused):
    """A repeated label would give one class two codes (its records voting for neither); a
    blank one names nothing."""
    raw = {"data": {"path": "p.csv", "label_column": "label", "labels": labels},
           "budget": {"epsilon": 1}, "recipe": {"name": "pe"}}
    with pytest.raises(ConfigError, match=refused):
        parse_config(raw)
    assert parse_config({**raw, "data": {**raw["data"], "labels": [" a", "b "]}}
                        ).data.labels == ["a", "b"]  # read stripped, as the data's are


def test_a_run_on_labelled_data_needs_its_label_set_declared():
    """Read from the data, the label set would move with one unit: a user with a label of
    their own would add it to the plan, the prompts and the output, and no charge covers
    that. Declared, it is public; unlabelled data has none to declare."""
    raw = {"data": {"path": "p.csv", "label_column": "label"}, "budget": {"epsilon": 1},
           "recipe": {"name": "pe"}}
    with pytest.raises(ConfigError, match="data.labels: declare the label set") as info:
        parse_config(raw)
    assert "ledger never charged" in str(info.value)
    declared = parse_config({**raw, "data": {**raw["data"], "labels": ["a", "b"]}})
    assert declared.data.labels == ["a", "b"]
    assert parse_config({**raw, "data": {"path": "p.csv"}}).data.label_column is None


@pytest.mark.parametrize("public", [
    {"generator": {"name": "pool", "path": "held.csv"}},
    {"embedder": {"name": "tfidf", "fit_texts": "private.csv"}},
    {"generator": {"name": "pool", "path": "pool.txt",
                   "embedder": {"name": "tfidf", "fit_texts": "held.csv"}}},
])
def test_files_read_as_public_are_neither_the_private_data_nor_the_held_out(tmp_path, public):
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": ["a"]},
           "budget": {"epsilon": 1},
           "recipe": {"name": "pe"}, "held_out": {"path": "held.csv"}, "backends": public}
    with pytest.raises(ConfigError, match="is or holds the private data"):
        parse_config(raw, "run.yaml", base_dir=tmp_path)


def test_null_sampling_settings_are_each_backends_own_defaults():
    """`temperature: null` meant the backend's default before per-backend configs, and still
    does: 1.0 / 1.0 for smollm and the offline LM alike (smollm's measured in backends.md)."""
    for name, expected in (("smollm", (1.0, 1.0)), ("offline", (1.0, 1.0))):
        raw = {**BASE, "backends": {"generator": {"name": name, "temperature": None,
                                                  "top_p": None}}}
        generator = parse_config(raw).backends.generator
        assert (generator.temperature, generator.top_p) == expected
    raw = {**BASE, "backends": {"generator": {"name": "smollm", "temperature": -1}}}
    with pytest.raises(ConfigError, match="temperature"):
        parse_config(raw)


def test_a_key_of_another_backend_names_the_key_and_both_backends():
    """Each backend section takes its own keys (a discriminated union on `name`)."""
    raw = {**BASE, "backends": {"generator": {"name": "offline", "engine": "ct2-float32"}}}
    with pytest.raises(ConfigError, match=r"run\.yaml: backends\.generator: engine is a key of "
                                          r"the smollm generator, not of offline$"):
        parse_config(raw, "run.yaml")
    raw = {**BASE, "backends": {"embedder": {"name": "tfidf", "concurrency": 2}}}
    with pytest.raises(ConfigError, match=r"backends\.embedder: concurrency is a key of the "
                                          r"openai embedder, not of tfidf"):
        parse_config(raw)
    raw = {**BASE, "backends": {"generator": {"name": "pool", "edit": {"name": "hf",
                                                                       "int8": True}}}}
    with pytest.raises(ConfigError, match=r"backends\.generator\.edit: int8 is a key of the "
                                          r"offline generator, not of hf"):
        parse_config(raw)
    with pytest.raises(ConfigError, match=r"backends\.generator\.name: 'gpt' is not one of "
                                          r"'smollm', 'offline', 'openai', 'hf', 'pool'"):
        parse_config({**BASE, "backends": {"generator": {"name": "gpt"}}})
    with pytest.raises(ConfigError, match=r"backends\.generator\.temperature: Input should be "
                                          r"greater than or equal to 0"):  # no backend name
        parse_config({**BASE, "backends": {"generator": {"temperature": -1}}})


def test_a_section_without_a_name_is_the_default_backends():
    backends = parse_config({**BASE, "backends": {"generator": {"seed": 3},
                                                  "embedder": {"batch_size": 8}}}).backends
    generator = backends.generator
    assert (generator.name, generator.seed, generator.prompt_set()) == ("smollm", 3, "small")
    assert (backends.embedder.name, backends.embedder.batch_size) == ("minilm", 8)
    edit = parse_config({**BASE, "backends": {"generator": {"name": "pool", "edit": "hf"}}}
                        ).backends.generator.edit
    assert (edit.name, edit.temperature, edit.prompt_set()) == ("hf", 1.0, "generic")


def test_a_prompt_set_name_that_is_not_built_in_is_a_config_error():
    """Found by `dpsynth plan`, not when an openai generator is built (or never, offline)."""
    raw = {**BASE, "backends": {"generator": {"prompts": "classification"}}}
    with pytest.raises(ConfigError, match=r"backends\.generator\.prompts: 'classification' "
                                          r"is no built-in prompt set \(generic, mtsamples"):
        parse_config(raw, "run.yaml")
    for ok in ("mtsamples", "my_prompts.yaml", "prompts/mine.yml"):
        parse_config({**BASE, "backends": {"generator": {"prompts": ok}}})


def test_numeric_labels_may_key_dpga_keywords_as_they_key_label_names():
    """YAML reads `0:` as a number; the data's labels are text: both mean the label '0'."""
    from dpsynth.methods.registry import build_recipe

    raw = {**BASE, "data": {"path": "d.csv", "label_column": "label", "labels": [0, 1],
                            "label_names": {0: "calm post", 1: "disaster report"}},
           "recipe": {"name": "dpga", "params": {"keywords": {0: ["calm"], 1: ["fire"]}}}}
    config = parse_config(raw, "run.yaml")
    assert config.data.labels == ["0", "1"]
    assert config.data.label_names == {"0": "calm post", "1": "disaster report"}
    assert build_recipe(config.recipe).params.keywords == {"0": ["calm"], "1": ["fire"]}


def test_privacy_report_states_the_remote_embedding_assumption():
    """A remote embedder batches private texts on a server we cannot see: the one-record,
    one-vote argument then rests on that server, and privacy.json says so."""
    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.run.outputs import _privacy_report

    ledger = PrivacyLedger(1.0, 1e-5)
    local = parse_config(BASE)
    remote = parse_config(with_("backends", embedder={
        "name": "openai", "base_url": "http://127.0.0.1:9", "allow_remote_on_private": True}))
    refused = parse_config(with_("backends", embedder={"name": "openai",
                                                       "base_url": "http://127.0.0.1:9"}))
    assert "assumes" not in _privacy_report(ledger, local)
    assert "assumes" not in _privacy_report(ledger, refused)  # refused before any release
    assert "independently" in _privacy_report(ledger, remote)["assumes"]
