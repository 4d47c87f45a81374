"""Fixtures for backend tests: a loopback OpenAI server and configs that point at it."""

from __future__ import annotations

import pytest

from dpsynth.backends.config import HttpConfig, OpenAIChatConfig
from dpsynth.backends.http.loopback import LoopbackServer

FAST_HTTP = HttpConfig(timeout_s=0.5, max_retries=3, backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture
def server():
    with LoopbackServer(hang_s=0.7, slow_s=0.1) as srv:
        yield srv


def chat_config(server: LoopbackServer, **overrides) -> OpenAIChatConfig:
    fields = {"name": "openai", "base_url": server.url, "model": "loopback-model",
              "concurrency": 4, "http": FAST_HTTP, "max_tokens": 200}
    return OpenAIChatConfig(**{**fields, **overrides})
