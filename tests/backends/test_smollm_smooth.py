"""SmoothQuant folded into SmolLM2 before the int8 conversion (backends/smollm/smooth.py): the
folded float32 model is the same function, its scales are the same on every run, and the
calibration reads only public text that ships with dpsynth."""

import builtins
import pathlib

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dpsynth.backends.config import SmolLMConfig  # noqa: E402
from dpsynth.backends.smollm import engines, smooth, weights  # noqa: E402
from tests.smollm import require_smollm  # noqa: E402


def tiny_llama():
    """A random Llama with SmolLM2's shape of attention (3 query heads per value head), tied
    embeddings and a few outlier channels, so the scales are far from 1."""
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=6,
                                      num_key_value_heads=2, head_dim=8, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.input_layernorm.weight[:3] = 30.0
            layer.mlp.up_proj.weight[5] *= 40
            layer.self_attn.v_proj.weight[2] *= 25
    return model


class WordIds:
    """A tokenizer stand-in: one id per word, from the word's letters."""

    def __call__(self, text):
        return {"input_ids": [sum(map(ord, w)) % 97 for w in text.split()]}


def rows(n=6, length=20):
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 97, (length,), generator=generator).tolist() for _ in range(n)]


def test_the_folded_float32_model_gives_the_same_logits_saved_and_reloaded(tmp_path):
    model = tiny_llama()
    ids = torch.tensor(rows(2, 30))
    with torch.no_grad():
        before = model(ids).logits
    smooth.smooth(model, smooth.activation_maxima(model, rows()))
    model.save_pretrained(tmp_path)  # what CTranslate2 converts: the untied head must survive
    reloaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert not torch.equal(reloaded.lm_head.weight, reloaded.model.embed_tokens.weight)
    with torch.no_grad():
        for folded in (model, reloaded):
            assert (folded(ids).logits - before).abs().max() < 1e-4 * before.abs().max()


def test_the_scales_move_the_outlier_channels():
    model = tiny_llama()
    maxima = smooth.activation_maxima(model, rows())
    layer = model.model.layers[0]
    s = smooth.scales(maxima[0]["attn"], [layer.self_attn.q_proj, layer.self_attn.k_proj,
                                          layer.self_attn.v_proj])
    assert s[:3].min() > 3 * s[3:].median()


def test_calibration_and_scales_are_the_same_on_every_run():
    first, second = (smooth.calibration_rows(WordIds()) for _ in range(2))
    assert first == second and len(first) == smooth.CALIBRATION_TEXTS
    assert all(0 < len(r) <= smooth.CALIBRATION_TOKENS for r in first)
    a, b = tiny_llama(), tiny_llama()
    smooth.smooth(a, smooth.activation_maxima(a, first[:8]))
    smooth.smooth(b, smooth.activation_maxima(b, second[:8]))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                  b.state_dict().values(), strict=True))


def test_calibration_reads_only_the_shipped_public_pool(monkeypatch):
    package = pathlib.Path(smooth.__file__).resolve().parents[2]
    assert smooth.CALIBRATION_POOL.is_relative_to(package / "assets")
    read = []
    real_open, real_read_text = builtins.open, pathlib.Path.read_text
    monkeypatch.setattr(builtins, "open", lambda file, *a, **k: (read.append(file),
                                                                 real_open(file, *a, **k))[1])
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, *a, **k: (
        read.append(self), real_read_text(self, *a, **k))[1])
    smooth.calibration_rows(WordIds())
    assert {pathlib.Path(p).resolve() for p in read} == {smooth.CALIBRATION_POOL}


def test_calibration_holds_none_of_the_reviews_the_benchmark_scores(shared_data):
    import pandas as pd

    scored = set(pd.read_csv(shared_data / "imdb" / "test.csv")["text"].str.strip())
    from dpsynth.backends.pool.texts import read_pool_texts

    texts = read_pool_texts(smooth.CALIBRATION_POOL, max_texts=smooth.CALIBRATION_TEXTS)
    assert not scored & set(texts)


def test_the_default_engine_is_the_smoothed_conversion_in_its_own_folder(tmp_path, monkeypatch):
    built = []
    monkeypatch.setenv("DPSYNTH_MODEL_CACHE", str(tmp_path))
    monkeypatch.setattr(weights, "gguf_digest", lambda: "digest")
    monkeypatch.setattr(weights, "hf_folder", lambda: tmp_path / "hf")
    monkeypatch.setattr(weights, "_build", lambda folder, make: built.append(folder))
    monkeypatch.setattr(engines, "CT2Engine", lambda folder, *args: (folder, *args))
    assert SmolLMConfig().engine == engines.DEFAULT_ENGINE == "ct2-int8-smooth"
    assert engines.load_engine("ct2-int8-smooth", 1) == (
        tmp_path / "digest" / "ct2-int8-smooth", "int8", 1, "ct2-int8-smooth")
    assert engines.load_engine("ct2-int8", 1)[0] == tmp_path / "digest" / "ct2-int8"
    assert built == [tmp_path / "digest" / "ct2-int8-smooth", tmp_path / "digest" / "ct2-int8"]


@pytest.mark.slow  # loads SmolLM2 and runs it on the calibration texts
def test_smollm2_folded_gives_the_same_logits():
    require_smollm()
    model = transformers.AutoModelForCausalLM.from_pretrained(weights.hf_folder()).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(weights.hf_folder())
    ids = torch.tensor([tokenizer("The home team won the cup final on Sunday.")["input_ids"]])
    with torch.no_grad():
        before = model(ids).logits
    smooth.smooth(model, smooth.activation_maxima(model, smooth.calibration_rows(tokenizer)[:16]))
    with torch.no_grad():
        after = model(ids).logits
    assert (after - before).abs().max() < 1e-4 * before.abs().max()
