"""The local Hugging Face generator on tiny causal and seq2seq models built in the test."""

import pytest

from dpsynth.backends import FAILED, Condition, build_generator
from dpsynth.backends.config import HFConfig, OpenAIChatConfig
from dpsynth.backends.generators.hf import HFGenerator
from dpsynth.backends.generators.prompt_sets import ChatPrompt

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CORPUS = ["the parcel arrived late", "my invoice is wrong", "please reset my password",
          "the router drops the connection", "write one new text about billing"] * 4
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread; the test machine's cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1,
                            special_tokens=["<pad>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp_path_factory.mktemp("tiny-gpt2")
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)
    GPT2LMHeadModel(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def seq2seq_dir(tmp_path_factory):
    from transformers import T5Config, T5ForConditionalGeneration

    path = tmp_path_factory.mktemp("tiny-t5")
    tok = tiny_tokenizer()
    tok.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=2,
                      num_heads=2, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id)
    T5ForConditionalGeneration(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def hf_config(path, **overrides):
    fields = {"name": "hf", "model": str(path), "max_tokens": 6, "batch_size": 3, "seed": 11,
              "temperature": 0.9, "top_p": 0.95}
    return HFConfig(**{**fields, **overrides})


def run_all_operations(gen):
    cond = Condition(label="billing", length=5)
    return (gen.generate([cond] * 4)
            + gen.rewrite(["the parcel arrived late"], [cond], 0.9)
            + gen.fill(["my _ is wrong"], [cond])
            + gen.crossover([["my invoice is wrong", "the router drops"]], [cond]))


@pytest.mark.parametrize("which", ["causal_dir", "seq2seq_dir"])
def test_every_operation_end_to_end(which, request):
    path = request.getfixturevalue(which)
    gen = build_generator(hf_config(path))
    assert isinstance(gen, HFGenerator) and gen.seq2seq == (which == "seq2seq_dir")
    out = run_all_operations(gen)
    assert len(out) == 7 and all(isinstance(t, str) for t in out)
    assert sum(t != FAILED for t in out) >= 5  # a random tiny model may emit only eos
    usage = gen.usage()
    assert usage["calls"] == 7 and 0 < usage["completion_tokens"] <= 7 * 6


def test_same_seed_same_output_and_samples_differ(causal_dir):
    conds = [Condition(label="billing")] * 4
    first = build_generator(hf_config(causal_dir, batch_size=4)).generate(conds)
    assert build_generator(hf_config(causal_dir, batch_size=4)).generate(conds) == first
    assert len(set(first)) > 1  # four samples for one condition, not one repeated
    other = build_generator(hf_config(causal_dir, batch_size=4, seed=12)).generate(conds)
    assert other != first


def test_greedy_decoding_and_batching_agree(causal_dir):
    """Left padding must not change what a causal model generates for a prompt."""
    one = build_generator(hf_config(causal_dir, temperature=0.0, batch_size=1))
    many = build_generator(hf_config(causal_dir, temperature=0.0, batch_size=4))
    conds = [Condition(label="a"), Condition(label="billing", keywords=("refund", "invoice"))]
    assert one.generate(conds) == many.generate(conds)


def test_chat_template_is_used_when_the_tokenizer_has_one(causal_dir, seq2seq_dir):
    prompt = ChatPrompt(user="hello there", system="be brief")
    templated = build_generator(hf_config(seq2seq_dir)).render(prompt)
    assert templated == "<|system|>be brief\n<|user|>hello there\n<|assistant|>"
    plain = build_generator(hf_config(causal_dir)).render(prompt)
    assert plain == "be brief\n\nhello there\n\n"


def test_missing_model_folder_is_an_input_error(tmp_path):
    from dpsynth.errors import InputError

    with pytest.raises(InputError, match="no Hugging Face model folder"):
        build_generator(hf_config(tmp_path / "absent"))


def test_loopback_server_backed_by_a_local_model(causal_dir):
    """The OpenAI client, over HTTP, gets what the local model generates for that prompt."""
    from dpsynth.backends.http.loopback import LoopbackServer, model_responder

    local = build_generator(hf_config(causal_dir, temperature=0.0))
    with LoopbackServer(responder=model_responder(local)) as server:
        remote = build_generator(OpenAIChatConfig(base_url=server.url,
                                                  model="tiny", concurrency=2))
        conds = [Condition(label="billing"), Condition(label="shipping")]
        over_http = remote.generate(conds)
    assert over_http == local.generate(conds)
    assert "billing" in server.user_prompts()[0] + server.user_prompts()[1]


def test_scores_do_not_depend_on_batching_and_need_a_causal_lm(causal_dir, seq2seq_dir):
    from dpsynth.backends.base import BackendError

    prompts = ["my invoice is", "the router drops the connection and", "please"]
    conts = ["wrong", "the parcel arrived late", "reset my password"]
    one = build_generator(hf_config(causal_dir, batch_size=1)).score(prompts, conts)
    many = build_generator(hf_config(causal_dir, batch_size=3)).score(prompts, conts)
    assert one == pytest.approx(many, abs=1e-4) and (one < 0).all()
    with pytest.raises(BackendError, match="seq2seq"):
        build_generator(hf_config(seq2seq_dir)).score(prompts, conts)
