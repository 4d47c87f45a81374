"""`data.label_names`: labels that are codes are asked for by their public names, in every
prompt and condition, while the synthetic set keeps the codes; `data.document`: every
generator and every model a recipe prompts itself is asked for that kind of document."""

import pandas as pd
import pytest

from dpsynth.backends.base import Condition
from dpsynth.backends.generators.label_names import NamedGenerator, with_public_names
from dpsynth.backends.generators.prompt_sets import load_prompt_set
from dpsynth.config import parse_config
from dpsynth.errors import ConfigError
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder, RecordingGenerator
from tests.methods.test_recipes import PARAMS

NAMES = {"billing": "0", "shipping": "1", "technical": "2", "account": "3"}
CODES = {code: name for name, code in NAMES.items()}


def coded_config(tmp_path, tickets, recipe, params=None, **data):
    texts, labels = tickets
    pd.DataFrame({"text": texts, "label": [int(NAMES[y]) for y in labels]}).to_csv(
        tmp_path / "private.csv", index=False)
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": [0, 1, 2, 3],
                    "label_names": {int(code): name for code, name in CODES.items()}, **data},
           "budget": {"epsilon": 2.0}, "recipe": {"name": recipe,
                                                  "params": params or PARAMS[recipe]},
           "output": {"dir": str(tmp_path / "out")}, "seed": 5}
    return parse_config(raw, "run.yaml", base_dir=tmp_path)


@pytest.mark.parametrize("recipe", sorted(set(PARAMS) - {"dp_decoding"}))  # asks no generator
def test_generators_are_asked_by_name_and_the_output_keeps_the_codes(tmp_path, tickets,
                                                                      recipe):
    generator = RecordingGenerator()
    outputs = run(coded_config(tmp_path, tickets, recipe, document="support ticket"),
                  embedder=HashEmbedder(), generator=generator)
    sent = "\n".join(generator.inputs)
    assert "label='billing'" in sent and "label='shipping'" in sent
    assert "text='support ticket'" in sent and "text=None" not in sent  # every condition
    for code in CODES:
        assert f"label='{code}'" not in sent
    synthetic = pd.read_csv(outputs.synthetic, dtype=str)
    assert set(synthetic["label"]) <= set(CODES)
    assert set(outputs.result.labels) <= set(CODES)


def test_dp_decoding_prompts_its_lm_by_name_and_the_output_keeps_the_codes(
        tmp_path, tickets, monkeypatch):
    """DP decoding asks the generator for nothing: the names go into its LM's prompts."""
    pytest.importorskip("torch")
    from dpsynth.private.releases import decoding
    from tests.tiny_lm import one_torch_thread

    prompts = []
    real = decoding.GroupScores.__init__

    def recording(self, lm, setup, requests, *rest):
        for request in requests:
            prompts.extend([request.public_instruction, request.private_instruction])
        real(self, lm, setup, requests, *rest)

    monkeypatch.setattr(decoding.GroupScores, "__init__", recording)
    with one_torch_thread():
        outputs = run(coded_config(tmp_path, tickets, "dp_decoding", document="support ticket"),
                      embedder=HashEmbedder(), generator=RecordingGenerator())
    sent = "\n".join(prompts)
    assert set(outputs.result.labels) <= set(CODES)
    # every label the noisy histogram gave texts to (not always all four of 12 texts)
    named = {CODES[code] for code in outputs.result.labels}
    assert named and all(f"short support ticket about {name}" in sent for name in named)
    assert "short text" not in sent
    for code in CODES:
        assert f"about {code}" not in sent


def test_the_wrapper_names_every_operation():
    generator = RecordingGenerator()
    named = NamedGenerator(generator, {"0": "billing"}, "support ticket")
    conditions = [Condition(label="0"), Condition(label="1"), Condition(text="an email")]
    named.generate(conditions)
    named.rewrite(["a b", "c d", "e f"], conditions)
    named.fill(["a _", "_ b", "c _"], conditions)
    named.crossover([["a", "b"]] * 3, conditions)
    sent = "\n".join(generator.inputs)
    assert "label='0'" not in sent
    assert sent.count("label='billing'") == 4 and sent.count("label='1'") == 4
    # the document kind fills a condition's text where it has none, never over one it has
    assert sent.count("text='support ticket'") == 8 and sent.count("text='an email'") == 4


def test_without_names_or_document_the_generator_is_not_wrapped():
    generator = RecordingGenerator()
    assert with_public_names(generator, None) is generator
    assert with_public_names(generator, {}, None) is generator
    assert isinstance(with_public_names(generator, None, "tweet"), NamedGenerator)


def test_the_small_prompts_ask_for_the_document_kind():
    small = load_prompt_set("small")
    asked = Condition(label="Sports", length=40, text="news article")
    assert small.generate(asked).user == (
        "Write a short news article about Sports in about 40 words.")
    assert small.rewrite("A b c.", asked, 0.5).user.startswith(
        "Rewrite the news article below about Sports in about 40 words.")
    assert small.crossover(["A b.", "C d."], asked).user.startswith(
        "Write one new news article about Sports in about 40 words that mixes")
    # unset, the prompt is the one every earlier run sent
    assert small.generate(Condition(label="Sports", length=40)).user == (
        "Write a short text about Sports in about 40 words.")
    generic = load_prompt_set("generic")
    assert "Kind of text: news article." in generic.generate(asked).user


def test_the_document_kind_is_checked(tmp_path, tickets):
    config = coded_config(tmp_path, tickets, "pe", document="  support\n ticket ")
    assert config.data.document == "support ticket"
    for bad, said in (("   ", "is empty"), ("x" * 81, "at most 80 characters")):
        with pytest.raises(ConfigError) as caught:
            coded_config(tmp_path, tickets, "pe", document=bad)
        assert "run.yaml: data.document" in str(caught.value) and said in str(caught.value)


def test_label_names_are_checked_against_the_declared_labels(tmp_path, tickets):
    def bad(names, **data):
        with pytest.raises(ConfigError) as caught:
            coded_config(tmp_path, tickets, "pe", label_names=names, **data)
        return str(caught.value)

    assert "run.yaml: data.label_names: '7' is not a label of data.labels" in bad({7: "x"})
    assert "data.label_names: needs data.labels" in bad({0: "x"}, labels=None)
    assert "the name of label '1' is empty" in bad({0: "billing", 1: "  "})
    assert "would both be asked for as 'same'" in bad({0: "same", 1: "same"})
    assert "would both be asked for as '2'" in bad({0: "2"})  # a name that is another label


def test_a_label_without_a_name_is_asked_for_as_itself(tmp_path, tickets):
    config = coded_config(tmp_path, tickets, "pe", label_names={0: "billing"})
    assert config.data.label_names == {"0": "billing"}
    assert config.data.label_name("0") == "billing" and config.data.label_name("3") == "3"


def test_dp_lm_recipes_train_and_sample_on_the_names(tmp_path, tickets, tiny_lm, monkeypatch):
    pytest.importorskip("opacus")
    import dpsynth.methods.ctcl as ctcl

    documents, kinds, conditions = [], [], []
    real = ctcl.build_trainable_lm

    def recording_lm(model, lora_rank):
        lm = real(model, lora_rank)
        document, generator = lm.document, lm.generator

        def record_document(label, keywords, text, kind=None):
            documents.append(label)
            kinds.append(kind)
            return document(label, keywords, text, kind)

        def record_generator(*args):
            inner = generator(*args)
            sample = inner.generate

            def generate(batch):
                conditions.extend((c.label, c.text) for c in batch)
                return sample(batch)

            monkeypatch.setattr(inner, "generate", generate)
            return inner

        monkeypatch.setattr(lm, "document", record_document)
        monkeypatch.setattr(lm, "generator", record_generator)
        return lm

    monkeypatch.setattr(ctcl, "build_trainable_lm", recording_lm)
    params = {"n_output": 12, "model": str(tiny_lm), "steps": 2, "batch_size": 32,
              "max_length": 32}
    outputs = run(coded_config(tmp_path, tickets, "dpft", params, document="support ticket"),
                  embedder=HashEmbedder(), generator=RecordingGenerator())
    assert documents and set(documents) <= set(NAMES)
    assert set(kinds) == {"support ticket"}  # trained on the kind it is then asked for
    assert conditions and {label for label, _ in conditions} <= set(NAMES)
    assert {kind for _, kind in conditions} == {"support ticket"}
    assert set(outputs.result.labels) <= set(CODES)
