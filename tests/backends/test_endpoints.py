"""A generator over several OpenAI-compatible servers: requests spread over them, a request
that fails on one is retried on another, the health check leaves dead ones out with a
warning (all dead: the one-line error), and usage is counted per server."""

from __future__ import annotations

import logging
import threading

import pytest
from pydantic import ValidationError

from dpsynth.backends.base import BackendError
from dpsynth.backends.config import OpenAIChatConfig
from dpsynth.backends.factory import build_generator
from dpsynth.backends.generators.prompt_sets import ChatPrompt
from dpsynth.backends.http.loopback import LoopbackServer
from dpsynth.run import run
from tests.methods.fakes import HashEmbedder, ticket_texts
from tests.methods.test_recipes import make_config
from tests.test_stops import free_port

PE = {"iterations": 3, "n_output": 12, "label_fraction": 0.0}


def openai(urls, **http):
    return build_generator(OpenAIChatConfig(
        base_url=urls, model="loopback", concurrency=2,
        http={"max_retries": 5, "backoff_s": 0.01, "max_backoff_s": 0.02, **http}))


def kill_after(server: LoopbackServer, answers: int) -> None:
    """The server dies after `answers` answers: open connections drop, new ones are refused."""
    served = []

    def respond(messages, body):
        served.append(1)
        if len(served) == answers:
            server.inject(*["drop"] * 10_000)
            threading.Thread(target=server.stop).start()
        return "a public answer about parcels"

    server.responder = respond


def test_requests_are_spread_over_the_servers_and_counted_per_server():
    with LoopbackServer() as a, LoopbackServer() as b:
        generator = openai([a.url, b.url])
        texts = generator.complete([ChatPrompt(user=f"say {i}") for i in range(8)])
    assert all(texts) and len(a.records) == len(b.records) == 4
    usage = generator.usage()
    assert usage[f"{a.url} answers"] == usage[f"{b.url} answers"] == 4
    assert usage["calls"] == 8 and usage["failed"] == 0


def test_a_server_killed_mid_run_leaves_the_run_to_the_other(tmp_path):
    tickets = ticket_texts(160)
    with LoopbackServer() as a, LoopbackServer() as b:
        kill_after(b, answers=6)
        generator = openai([a.url, b.url])
        outputs = run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
                      generator=generator)
    texts = outputs.result.texts  # the loopback writes one text per prompt: repeats are dropped
    assert 0 < len(texts) <= PE["n_output"] and len(set(texts)) == len(texts)
    usage = generator.usage()
    assert usage["failed"] == 0 and usage[f"{b.url} errors"] > 0
    assert usage[f"{b.url} answers"] >= 5  # six answers, the health check's probe first
    assert usage[f"{a.url} answers"] > usage["calls"] / 2
    assert usage[f"{a.url} answers"] + usage[f"{b.url} answers"] == usage["calls"]


def test_the_health_check_leaves_a_dead_server_out_with_a_warning(tmp_path, caplog):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with LoopbackServer() as live, caplog.at_level(logging.WARNING, logger="dpsynth"):
        generator = openai([dead, live.url])
        run(make_config(tmp_path, ticket_texts(160), "pe", **PE), embedder=HashEmbedder(),
            generator=generator)
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(warned) == 1 and dead in warned[0] and "cannot answer" in warned[0]
    assert generator.client.base_urls == [live.url]
    assert generator.usage()["failed"] == 0


def test_all_servers_dead_is_the_one_line_error(tmp_path):
    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    with pytest.raises(BackendError, match=r"cannot answer: connection error") as info:
        run(make_config(tmp_path, ticket_texts(160), "pe", **PE), embedder=HashEmbedder(),
            generator=openai(urls))
    assert "\n" not in str(info.value) and urls[1] in str(info.value)


@pytest.mark.parametrize("urls", [[], ["http://a/v1", "http://a/v1"]])
def test_a_list_of_servers_needs_distinct_ones(urls):
    with pytest.raises(ValidationError, match="each once"):
        OpenAIChatConfig(model="m", base_url=urls)
