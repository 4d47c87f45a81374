"""The OpenAI-compatible generator driven over real HTTP against the loopback server."""

import logging
import time

import pytest

from dpsynth.backends import BLANK, FAILED, BackendError, Condition, build_generator
from dpsynth.backends.config import HttpConfig, parse_generator
from dpsynth.backends.generators.prompt_sets import load_prompt_set
from dpsynth.backends.http.chat import request_seed
from dpsynth.backends.http.client import RateLimiter, _error_message
from dpsynth.backends.http.loopback import LoopbackServer
from dpsynth.errors import ConfigError

from .conftest import FAST_HTTP, chat_config


def test_the_identity_of_a_default_section_is_as_it_was():
    """The identity keys the cache and resume: how the config is modelled must not move it
    (these are the values of the single generator model the per-backend ones replaced)."""
    cfg = parse_generator({"name": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert build_generator(cfg).identity() == {
        "backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m",
        "temperature": 1.0, "top_p": 1.0, "max_tokens": 512, "seed": None,
        "prompts": load_prompt_set("generic").digest}


def test_every_operation_end_to_end(server):
    gen = build_generator(chat_config(server, seed=7, temperature=0.7, top_p=0.9))
    cond = Condition(label="billing", length=12)
    outputs = {
        "generate": gen.generate([cond, Condition(label="shipping")]),
        "rewrite": gen.rewrite(["my parcel is late again"], [cond], strength=0.3),
        "fill": gen.fill([f"my {BLANK} is late"], [cond]),
        "crossover": gen.crossover([["parent one text", "parent two words"]], [cond]),
    }
    for op, texts in outputs.items():
        assert all(isinstance(t, str) and t != FAILED for t in texts), op
    assert len(outputs["generate"]) == 2
    assert len(outputs["generate"][0].split()) == 12  # the server honours "12 words"
    prompts = server.user_prompts()
    assert any("billing" in p for p in prompts[:2]) and any("shipping" in p for p in prompts[:2])
    assert any("my parcel is late again" in p for p in prompts)
    assert any(f"my {BLANK} is late" in p for p in prompts)
    assert any("parent one text" in p and "parent two words" in p for p in prompts)
    body = server.records[0].body
    assert body["model"] == "loopback-model"
    # each request its own seed, numbered from the config's: none repeats a prompt's sample
    assert {r.body["seed"] for r in server.records} == {request_seed(7, i) for i in range(5)}
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9 and body["max_tokens"] == 200
    assert body["messages"][0]["role"] == "system"
    usage = gen.usage()
    assert usage["calls"] == 5 and usage["attempts"] == 5 and usage["retries"] == 0
    assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] > 0
    # the same prompt gets the same deterministic answer from the loopback server
    assert gen.generate([cond])[0] == outputs["generate"][0]


@pytest.mark.parametrize("fault", ["429", "500", "503", "timeout", "drop"])
def test_transient_faults_are_retried(server, fault):
    gen = build_generator(chat_config(server))
    server.inject(fault)
    [text] = gen.generate([Condition(label="x")])
    assert text != FAILED
    if fault == "timeout":  # the hung request is logged when the server gives up on it
        time.sleep(server.hang_s)
    assert [r.fault for r in sorted(server.records, key=lambda r: r.start)] == [fault, None]
    assert gen.usage()["retries"] == 1 and gen.usage()["failed"] == 0


def test_slow_response_within_timeout_is_not_retried(server):
    gen = build_generator(chat_config(server))
    server.inject("slow")
    assert gen.generate([Condition()])[0] != FAILED
    assert len(server.records) == 1 and gen.usage()["retries"] == 0


def test_retries_give_up_and_mark_only_that_output_failed(server, caplog):
    gen = build_generator(chat_config(server, concurrency=1))
    server.inject("500", "500", "500", "500")  # max_retries=3: four attempts, all fail
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        texts = gen.generate([Condition(text="SECRET-ISH INSTRUCTION"), Condition(label="ok")])
    assert texts[0] == FAILED and texts[1] != FAILED
    assert gen.usage()["failed"] == 1 and gen.usage()["retries"] == 3
    assert len(server.records) == 5
    assert "HTTP 500" in caplog.text and "SECRET-ISH" not in caplog.text


def test_bad_request_is_not_retried(server):
    gen = build_generator(chat_config(server))
    server.inject("400")
    assert gen.generate([Condition()]) == [FAILED]
    assert len(server.records) == 1 and gen.usage()["retries"] == 0


@pytest.mark.parametrize("status", ["401", "404"])
def test_auth_and_not_found_stop_the_run_without_retry(server, status):
    gen = build_generator(chat_config(server, concurrency=1))
    server.inject(status)
    with pytest.raises(BackendError, match=f"HTTP {status}"):
        gen.generate([Condition(label=str(i)) for i in range(6)])
    assert server.records[0].status == int(status)
    assert len(server.records) == 1  # the rest of the batch is abandoned, not sent


def test_request_seeds_are_distinct_reproducible_and_carried_by_checkpoints(server):
    first = build_generator(chat_config(server, seed=3, concurrency=1))
    first.generate([Condition(label="same")] * 4)
    state = first.state_dict()
    first.generate([Condition(label="same")] * 2)
    seeds = [r.body["seed"] for r in server.records]
    assert len(set(seeds)) == 6 and all(0 <= s < 2**31 for s in seeds)
    assert state == {"requests": 4}
    resumed = build_generator(chat_config(server, seed=3, concurrency=1))
    resumed.load_state_dict(state)  # a resumed run goes on numbering where it stopped
    resumed.generate([Condition(label="same")] * 2)
    assert [r.body["seed"] for r in server.records[6:]] == seeds[4:]
    assert request_seed(3, 0) != request_seed(4, 0)
    unseeded = build_generator(chat_config(server, seed=None))
    unseeded.generate([Condition()])
    assert "seed" not in server.records[-1].body


def test_a_client_error_naming_the_model_stops_the_batch(server):
    """`transformers serve` pinned to one model answers another name with 400, not 404."""
    gen = build_generator(chat_config(server, concurrency=1))
    server.inject("400")
    server.error_message = "Server is pinned to 'other'; requested 'loopback-model'."
    with pytest.raises(BackendError, match=r"HTTP 400 \(Server is pinned to 'other'; "
                                           r"requested 'loopback-model'\.\)"):
        gen.generate([Condition(label=str(i)) for i in range(4)])
    assert len(server.records) == 1


def test_other_client_errors_are_quoted_in_the_log_and_fail_one_output(server, caplog):
    gen = build_generator(chat_config(server, concurrency=1, model="gpt"))
    server.inject("400")
    server.error_message = "Unsupported parameter: 'max_tokens'; use 'max_completion_tokens'"
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        texts = gen.generate([Condition(label="a"), Condition(label="b")])
    assert texts[0] == FAILED and texts[1] != FAILED  # "gpt" is not named as a word
    assert "HTTP 400 (Unsupported parameter: 'max_tokens'; use 'max_completion_tokens')" \
        in caplog.text


@pytest.mark.parametrize(("body", "message"), [
    ({"error": {"message": "The model `x` does not exist."}}, "The model `x` does not exist."),
    ({"error": "model 'x' not found"}, "model 'x' not found"),
    ({"detail": "Server is pinned to 'a'; requested 'x'."},
     "Server is pinned to 'a'; requested 'x'."),
    ({"detail": [{"loc": ["body"], "input": "ECHOED REQUEST"}]}, ""),  # not read: may echo
    ({"message": "  spread\n over   lines "}, "spread over lines"),
    ({"error": {"message": "x" * 500}}, "x" * 199 + "…"),
])
def test_error_messages_are_read_from_each_servers_shape(body, message):
    import httpx

    assert _error_message(httpx.Response(400, json=body)) == message


def test_plain_text_error_bodies_are_read_when_short():
    import httpx

    assert _error_message(httpx.Response(500, text="Internal Server Error")) == \
        "Internal Server Error"
    assert _error_message(httpx.Response(500, text="trace " * 100)) == ""


@pytest.mark.parametrize("fault", ["malformed", "no_choices"])
def test_malformed_responses_fail_one_output_without_crashing(server, fault, caplog):
    gen = build_generator(chat_config(server, concurrency=1))
    server.inject(fault)
    with caplog.at_level(logging.WARNING, logger="dpsynth"):
        texts = gen.generate([Condition(label="first"), Condition(label="second")])
    assert texts[0] == FAILED and texts[1] != FAILED
    assert gen.usage()["malformed"] == 1 and gen.usage()["retries"] == 0
    assert "malformed" in caplog.text and "first" not in caplog.text


@pytest.mark.parametrize("concurrency", [1, 6])
def test_requests_really_overlap_up_to_the_limit(concurrency):
    with LoopbackServer(latency_s=0.08) as srv:
        gen = build_generator(chat_config(srv, concurrency=concurrency))
        texts = gen.generate([Condition(label=str(i)) for i in range(max(4, 2 * concurrency))])
        assert FAILED not in texts
        assert srv.max_overlap() == concurrency


def test_requests_per_minute_are_paced(server):
    gen = build_generator(chat_config(server, concurrency=8,
                                      http=FAST_HTTP.model_copy(
                                          update={"requests_per_minute": 1200})))
    gen.generate([Condition(label=str(i)) for i in range(30)])
    starts = sorted(r.start for r in server.records)
    # a bucket of 20 (one second's worth) drains at once, then 20 per second
    assert starts[-1] - starts[0] >= 0.4


def test_rate_limiter_bucket_arithmetic():
    now = [0.0]
    limiter = RateLimiter(per_minute=60, clock=lambda: now[0])  # one per second, burst one
    assert limiter.reserve(1) == 0.0
    assert limiter.reserve(1) == pytest.approx(1.0)
    assert limiter.reserve(1) == pytest.approx(2.0)
    now[0] = 10.0  # the bucket refills to its capacity, no more
    assert limiter.reserve(1) == 0.0 and limiter.reserve(1) == pytest.approx(1.0)
    tokens = RateLimiter(per_minute=6000, clock=lambda: now[0])  # 100/s
    assert tokens.reserve(250) == pytest.approx(1.5)
    assert RateLimiter(None).reserve(10**9) == 0.0


def test_dry_run_sends_nothing_and_counts(server):
    gen = build_generator(chat_config(server, dry_run=True, model="gpt-4o-mini"))
    texts = gen.generate([Condition(label="a", length=20)] * 3)
    texts += gen.rewrite(["an old text"], [Condition()])
    assert server.records == []
    assert len(texts[0].split()) == 20 and all(texts)
    usage = gen.usage()
    assert usage["dry_run_calls"] == 4 and usage["calls"] == 0
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    expected = (usage["prompt_tokens"] * 0.15 + usage["completion_tokens"] * 0.60) / 1e6
    assert usage["cost_usd"] == pytest.approx(expected)


def test_api_key_is_sent_but_never_shown(server, monkeypatch, caplog):
    monkeypatch.setenv("LOOPBACK_KEY", "sk-test-0123456789")
    gen = build_generator(chat_config(server, api_key_env="LOOPBACK_KEY"))
    with caplog.at_level(logging.DEBUG):
        server.inject("500")
        gen.generate([Condition()])
    assert server.records[0].headers["Authorization"] == "Bearer sk-test-0123456789"
    for shown in (repr(gen), str(gen.usage()), caplog.text, repr(chat_config(server))):
        assert "sk-test" not in shown


def test_azure_style_endpoint(server, monkeypatch):
    monkeypatch.setenv("AZURE_KEY", "azure-secret")
    http = HttpConfig(api_version="2024-06-01", backoff_s=0.01)
    gen = build_generator(chat_config(server, api_key_env="AZURE_KEY", http=http))
    gen.generate([Condition()])
    record = server.records[0]
    assert record.headers["api-key"] == "azure-secret"
    assert "Authorization" not in record.headers
    assert record.path.endswith("/chat/completions?api-version=2024-06-01")


def test_missing_key_and_model_are_config_errors(server):
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE is not set"):
        build_generator(chat_config(server, api_key_env="NOT_SET_ANYWHERE"))
    with pytest.raises(ConfigError, match=r"generator\.model"):
        build_generator(chat_config(server, model=None))
