"""Can the backends answer? The one place that decides, so a dead server stops a run before it
spends anything, in one line that names the backend and the error.

- `check_backends`: before any private release, each remote backend (an OpenAI-compatible
  generator or embedder) gets one tiny public request with a short timeout and one retry. A
  backend that cannot answer (nothing listening, a timeout, 5xx, a refused key, URL or model)
  raises `BackendError`. Local backends are not probed: loading them is their check.
- `check_outputs`: a call to a remote generator whose every output failed raises
  `BackendError`, naming the last HTTP error, before the recipe can release anything computed
  from an empty population. Outputs that fail here and there are dropped as before.
"""

from __future__ import annotations

import logging
from typing import Any

from dpsynth.backends.base import FAILED, BackendError, Embedder, Generator
from dpsynth.backends.embedders.openai import OpenAIEmbedder
from dpsynth.backends.generators.prompt_sets import ChatPrompt
from dpsynth.backends.http.chat import OpenAIChatGenerator

log = logging.getLogger(__name__)

PROBE_TEXT = "Reply with the word OK."
"""What the probe sends: public, and the same for every run."""
PROBE_CONNECT_TIMEOUT_S = 5.0
"""Connecting must be quick; the answer may take `http.timeout_s` (a server such as Ollama
loads its model on the first request)."""
PROBE_TOKENS = 8


def check_backends(generator: Generator | None = None, embedder: Embedder | None = None) -> None:
    """Raise `BackendError` unless every remote backend given answers one tiny request."""
    if generator is not None:
        _probe(generator.served_by(), "generator")
    if embedder is not None:
        _probe(embedder.served_by(), "embedder")


def check_outputs(generator: Generator, op: str, results: list[str]) -> None:
    """Raise `BackendError` when a remote generator failed every output of one call."""
    inner = generator.served_by()
    if not results or not inner.is_remote or any(r != FAILED for r in results):
        return
    error = last_error(inner) or "the server answered with empty texts"
    raise BackendError(
        f"{describe(inner)}: all {len(results)} outputs of a {op} call failed (last error: "
        f"{error}); nothing was released from them. Check the server, then run again to "
        "resume")


def describe(backend: Generator | Embedder) -> str:
    """`backends.generator (openai, http://…/v1, model m)`; never a prompt or a key."""
    backend = backend.served_by()
    kind = "embedder" if isinstance(backend, Embedder) else "generator"
    if not isinstance(backend, OpenAIChatGenerator | OpenAIEmbedder):
        return f"backends.{kind} ({type(backend).__name__})"
    return f"backends.{kind} (openai, {backend.client.base_url}, model {backend.cfg.model})"


def last_error(backend: Generator | Embedder) -> str | None:
    backend = backend.served_by()
    if not isinstance(backend, OpenAIChatGenerator | OpenAIEmbedder):
        return None
    return backend.client.last_error


def _probe(backend: Any, kind: str) -> None:
    """Probe each of the backend's servers; with several, drop the dead ones with a warning
    and fail only when none answers."""
    if not isinstance(backend, OpenAIChatGenerator | OpenAIEmbedder):
        return
    if isinstance(backend, OpenAIChatGenerator) and backend.cfg.dry_run:
        return  # a dry run sends nothing
    urls = backend.client.base_urls
    live = []
    for url in urls:
        try:
            _probe_one(backend, url)
        except BackendError as exc:
            if len(urls) == 1 or (url == urls[-1] and not live):
                raise
            log.warning("%s; that server is left out of this run", exc)
        else:
            live.append(url)
    backend.client.keep(live)


def _probe_one(backend: Any, url: str) -> None:
    update: dict[str, Any] = {"concurrency": 1, "http": _probe_http(backend.cfg.http),
                              "base_url": url}
    if isinstance(backend, OpenAIChatGenerator):
        update["max_tokens"] = min(backend.cfg.max_tokens, PROBE_TOKENS)
        probe: Any = OpenAIChatGenerator(backend.cfg.model_copy(update=update),
                                         backend.prompts)
    else:
        probe = OpenAIEmbedder(backend.cfg.model_copy(update=update))
    log.info("checking %s with one tiny request", describe(probe))
    probe.client.connect_timeout_s = PROBE_CONNECT_TIMEOUT_S
    try:
        _send(probe)
    except BackendError as exc:  # 401/403/404: the client's own message says which
        said = str(exc).removeprefix(f"{probe.client.where}: ")
        raise BackendError(f"{describe(probe)} cannot answer: {said}") from None
    finally:
        probe.client.close()
    usage = probe.client.usage
    if usage.failed > usage.malformed:  # an odd 2xx body still means a server that answers
        raise BackendError(
            f"{describe(probe)} cannot answer: {probe.client.last_error} (a tiny "
            f"request, {usage.attempts} attempt(s)); "
            f"nothing was released. Check that the server is up at {probe.client.base_url}")


def _send(probe: Any) -> None:
    if isinstance(probe, OpenAIChatGenerator):
        probe.complete([ChatPrompt(user=PROBE_TEXT, length=1)])
    else:
        try:
            probe.encode([PROBE_TEXT])
        except BackendError:
            if not probe.client.usage.failed:  # refused outright: the client's message
                raise


def _probe_http(http: Any) -> Any:
    return http.model_copy(update={
        "max_retries": 1,
        "backoff_s": 0.5, "max_backoff_s": 1.0,
        "requests_per_minute": None, "tokens_per_minute": None})

