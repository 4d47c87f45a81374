"""The OpenAI backend against a real third-party OpenAI-compatible server: `transformers serve`
(the `server` extra) on 127.0.0.1, serving a tiny GPT-2 built here with random weights and a
word-level tokenizer, so that every output is words of the test vocabulary. Prompts sent and
templated, outputs parsed, usage counted, `pe` and `dpga` end to end through
`backends.generator: {name: openai, base_url: ...}`, and the server's 4xx and 5xx surfaced.

The server's quirks met here are in docs/backends.md ("Tested servers")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

pytest.importorskip("torch")

from dpsynth.backends import FAILED, BackendError, Condition, build_generator
from dpsynth.backends.config import HttpConfig, OpenAIChatConfig
from dpsynth.config import parse_config
from dpsynth.run import run
from tests.methods.fakes import FILLER, VOCAB, HashEmbedder, ticket_texts

WORDS = sorted({w for words in VOCAB.values() for w in words} | set(FILLER) | set(VOCAB))
MAX_TOKENS = 10
N_POSITIONS = 512
HTTP = HttpConfig(timeout_s=30, max_retries=1, backoff_s=0.01, max_backoff_s=0.05)
START_TIMEOUT_S = 240
# Small recipe sizes: every output is one request to a server sharing two cores.
PARAMS = {
    "pe": {"iterations": 2, "n_output": 8, "label_fraction": 0.1},
    "dpga": {"iterations": 2, "n_init": 16, "n_output": 8, "n_rewrite": 4, "n_fill": 4,
             "n_crossover": 4, "n_generate": 4, "length_bins": 10, "max_words": 30,
             "keyword_probe_samples": 4},
}


def _serve_available() -> bool:
    try:
        from transformers.utils.import_utils import is_serve_available
    except ImportError:
        return False
    return is_serve_available()


if not _serve_available():
    if os.environ.get("CI"):  # CI installs ".[all]", which has the server: never skip there
        raise RuntimeError("transformers serve is unavailable: install the 'server' extra")
    pytest.skip("transformers serve needs the 'server' extra", allow_module_level=True)


def build_word_gpt2(folder: Path) -> Path:
    """A random 1-layer GPT-2 over a word-level vocabulary, with a chat template (the server
    refuses a tokenizer without one) and `do_sample` on (the server samples only when the
    model's generation config says so, whatever temperature a request sends)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    specials = ["[UNK]", "<pad>", "</s>"]
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]",
                                  pad_token="<pad>", eos_token="</s>")
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} </s> "
                         "{% endfor %}{% if add_generation_prompt %}assistant{% endif %}")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_positions=N_POSITIONS, n_embd=16, n_layer=1,
                        n_head=2, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)
    model = GPT2LMHeadModel(config)
    model.generation_config.do_sample = True
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served_model(tmp_path_factory) -> Path:
    from tests.tiny_lm import one_torch_thread

    with one_torch_thread():
        return build_word_gpt2(tmp_path_factory.mktemp("word-gpt2"))


@pytest.fixture(scope="module")
def real_server(served_model, tmp_path_factory):
    """`transformers serve MODEL` pinned to the tiny model; yields its base URL."""
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "transformers.cli.transformers", "serve", str(served_model),
             "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited ({proc.returncode}):\n"
                            + log_path.read_text(errors="replace")[-3000:])
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve not up after {START_TIMEOUT_S} s:\n"
                            + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.3)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def chat(url: str, model: Path | str, **overrides) -> OpenAIChatConfig:
    fields = {"name": "openai", "base_url": url, "model": str(model), "concurrency": 2,
              "max_tokens": MAX_TOKENS, "http": HTTP}
    return OpenAIChatConfig(**{**fields, **overrides})


def in_vocabulary(text: str) -> bool:
    return bool(text.split()) and set(text.split()) <= set(WORDS)


def test_prompts_are_templated_outputs_parsed_and_usage_counted(real_server, served_model):
    from transformers import AutoTokenizer

    # seeded: an unseeded sample of the random model may be an empty completion
    gen = build_generator(chat(real_server, served_model, seed=1, concurrency=1))
    cond = Condition(label="billing", keywords=("refund",), length=6)
    [text] = gen.generate([cond])
    assert text != FAILED and in_vocabulary(text)
    usage = gen.usage()
    assert usage["calls"] == usage["attempts"] == 1 and usage["failed"] == 0
    # the server counted exactly the tokens of our system and user messages in its template
    messages = gen.prompts.generate(cond).messages()
    assert [m["role"] for m in messages] == ["system", "user"]
    expected = AutoTokenizer.from_pretrained(served_model).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    assert usage["prompt_tokens"] == len(expected)
    assert 0 < usage["completion_tokens"] <= MAX_TOKENS  # max_tokens was honoured


def test_seeded_samples_of_one_prompt_differ_and_reproduce(real_server, served_model):
    """The server reseeds on every request's `seed`: one seed for all would make five samples
    of one prompt one text five times."""
    def five_samples() -> list[str]:
        gen = build_generator(chat(real_server, served_model, seed=5, concurrency=1))
        return gen.generate([Condition(label="shipping")] * 5)

    first = five_samples()
    assert FAILED not in first and len(set(first)) >= 4
    assert five_samples() == first  # same seed, same calls in the same order


@pytest.mark.parametrize("recipe", sorted(PARAMS))
def test_recipe_end_to_end_through_the_server(tmp_path, real_server, served_model, recipe):
    texts, labels = ticket_texts(80)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv", index=False)
    config = parse_config({
        "data": {"path": "private.csv", "label_column": "label", "labels": sorted(set(labels))},
        "budget": {"epsilon": 2.0},
        "recipe": {"name": recipe, "params": PARAMS[recipe]},
        "backends": {"generator": {
            "name": "openai", "base_url": real_server, "model": str(served_model),
            "concurrency": 2, "max_tokens": MAX_TOKENS, "http": HTTP.model_dump()}},
        "output": {"dir": str(tmp_path / "out")}, "seed": 3}, base_dir=tmp_path)
    outputs = run(config, embedder=HashEmbedder())
    synthetic = pd.read_csv(outputs.synthetic)
    assert len(synthetic) == PARAMS[recipe]["n_output"]
    assert all(in_vocabulary(t) for t in synthetic["text"])  # the model's words, parsed
    assert set(synthetic["label"]) <= set(VOCAB)
    assert synthetic["text"].nunique() > 1
    usage = json.loads((tmp_path / "out" / "usage.json").read_text())["generator"]
    assert usage["calls"] >= len(synthetic) and usage["failed"] == 0
    assert usage["prompt_tokens"] > usage["calls"]  # as the server reported them
    assert 0 < usage["completion_tokens"] <= usage["calls"] * MAX_TOKENS
    privacy = json.loads(outputs.privacy.read_text())
    assert 0 < privacy["spent"]["epsilon"] <= 2.0


def test_a_server_error_is_retried_then_fails_only_that_output(real_server, served_model):
    """A prompt longer than the model's context makes the server answer 500 (plain text)."""
    gen = build_generator(chat(real_server, served_model, concurrency=1))
    too_long = Condition(text=" ".join(["billing"] * (N_POSITIONS + 50)))
    texts = gen.generate([too_long, Condition(label="account")])
    assert texts[0] == FAILED and in_vocabulary(texts[1])
    usage = gen.usage()
    assert usage["failed"] == 1  # the 500 was retried once (max_retries=1), then given up
    # the good prompt may also need its one retry when a loaded machine outlasts timeout_s
    assert 1 <= usage["retries"] <= 2 and usage["attempts"] == 2 + usage["retries"]


def test_a_model_the_server_does_not_serve_is_one_line_and_exit_1(
        tmp_path, real_server, served_model, capsys):
    """The pinned server answers another model name with 400 (not 404): the run stops at its
    first generation with the server's reason, instead of failing every output."""
    from dpsynth.cli import main

    texts, labels = ticket_texts(40)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv", index=False)
    (tmp_path / "public.txt").write_text("\n".join(" ".join(WORDS[i:i + 6])
                                                   for i in range(0, len(WORDS), 3)))
    (tmp_path / "run.yaml").write_text(json.dumps({
        "data": {"path": "private.csv", "label_column": "label", "labels": sorted(set(labels))},
        "budget": {"epsilon": 2.0},
        "recipe": {"name": "pe", "params": PARAMS["pe"]},
        "backends": {"embedder": {"name": "tfidf", "fit_texts": "public.txt", "dim": 4},
                     "generator": {"name": "openai", "base_url": real_server,
                                   "model": "no-such-model", "http": HTTP.model_dump()}},
        "output": {"dir": str(tmp_path / "out")}, "seed": 3}))
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(tmp_path / "run.yaml")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "HTTP 400" in err and "requested 'no-such-model'" in err
    assert "Traceback" not in err
    journal = (tmp_path / "out" / "checkpoints" / "releases.jsonl").read_text()
    assert '"stage": "voting"' not in journal  # no vote on an empty population
    with pytest.raises(BackendError, match="HTTP 400"):  # and at once, from the Python API
        build_generator(chat(real_server, "no-such-model")).generate([Condition()] * 4)
