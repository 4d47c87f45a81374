"""The HTTP side of OpenAI-compatible backends: concurrency, rate limits, retries, usage.

A batch of requests runs on a pool of `concurrency` threads sharing one httpx connection pool
(measured here at a third of the CPU per request of httpx's asyncio client, which decides
throughput when the client shares a small machine). Token buckets pace requests and tokens
per minute. A request is retried with exponential backoff and jitter when retrying can help
(429, 408, 409, 5xx, timeouts, dropped connections). Given several base URLs (servers of the
same model), the client spreads a batch's requests over them, `concurrency` in flight on each,
and moves a request's next attempt to the next server: a request that fails on one is retried
on another, and `endpoint_usage` counts each server's attempts, answers and errors. A
401/403/404 raises at once and stops
the batch: no retry fixes a wrong key, URL or model; so does any other 4xx whose error
message names the requested model (`transformers serve` pinned to one model answers a wrong
name with 400, not 404). Any other 4xx, and a 2xx whose body is not the expected JSON, fail
that one request: its result is None, it is counted, and the log names the status but never
the prompt. A client built with `quote_errors` (one whose requests carry only public text)
also quotes the server's error message, shortened, in the log and in the error.
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import httpx

from dpsynth.backends.base import BackendError
from dpsynth.backends.config import HttpConfig, Price
from dpsynth.backends.http.prices import cost_usd
from dpsynth.errors import ConfigError
from dpsynth.progress import track

log = logging.getLogger(__name__)
T = TypeVar("T")

OPENAI_BASE_URL = "https://api.openai.com/v1"
FATAL_STATUS = frozenset({401, 403, 404})
RETRY_STATUS = frozenset({408, 409, 429})
ERROR_QUOTE_CHARS = 200


@dataclass
class Usage:
    """What a backend has spent; `calls` are logical requests, `attempts` HTTP requests sent."""

    calls: int = 0
    attempts: int = 0
    retries: int = 0
    failed: int = 0
    malformed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dry_run_calls: int = 0

    def report(self, price: Price | None) -> dict[str, float]:
        out: dict[str, float] = {k: float(v) for k, v in asdict(self).items()}
        cost = cost_usd(price, self.prompt_tokens, self.completion_tokens)
        if cost is not None:
            out["cost_usd"] = cost
        return out


def estimate_tokens(text: str) -> int:
    """About four characters per token for English under OpenAI's tokenisers; used for dry-run
    counts and rate pacing, never for billing."""
    return math.ceil(len(text) / 4)


def read_api_key(env_name: str | None, where: str) -> str | None:
    """The key from the environment variable named in the config (the config never holds it)."""
    if env_name is None:
        return None
    value = os.environ.get(env_name)
    if not value:
        raise ConfigError(f"{where}.api_key_env: the environment variable {env_name} is not set")
    return value


class RateLimiter:
    """A token bucket holding one second's worth of a per-minute allowance, shared by threads.

    A caller takes its amount at once under the lock (the level may go negative) and then
    sleeps, outside the lock, until the bucket would have refilled to zero; callers are thus
    paced in the order they arrived.
    """

    def __init__(self, per_minute: float | None, clock: Callable[[], float] = time.monotonic):
        self.rate = per_minute / 60.0 if per_minute else None
        self.capacity = max(1.0, self.rate or 0.0)
        self.level = self.capacity
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self, amount: float) -> float:
        """Take `amount` and return the seconds to wait before using it."""
        if self.rate is None:
            return 0.0
        with self._lock:
            now = self._clock()
            self.level = min(self.capacity, self.level + (now - self._last) * self.rate)
            self._last = now
            self.level -= amount
            return max(0.0, -self.level / self.rate)

    def acquire(self, amount: float) -> None:
        delay = self.reserve(amount)
        if delay:
            time.sleep(delay)


@dataclass
class EndpointUsage:
    """One server's share: attempts sent to it, answers (2xx) and errors (5xx, 429, timeouts,
    dropped connections) it gave."""

    attempts: int = 0
    answers: int = 0
    errors: int = 0


class OpenAIHttpClient:
    """Posts batches of JSON requests to OpenAI-compatible servers with real overlap."""

    def __init__(self, base_url: str | Sequence[str] | None, *, api_key_env: str | None,
                 http: HttpConfig, concurrency: int, where: str,
                 quote_errors: bool = False) -> None:
        urls = [base_url] if base_url is None or isinstance(base_url, str) else base_url
        self.base_urls = [(url or OPENAI_BASE_URL).rstrip("/") for url in urls]
        self.endpoint_usage = {url: EndpointUsage() for url in self.base_urls}
        self.http = http
        self.concurrency = concurrency
        self.where = where
        self.quote_errors = quote_errors  # only where requests carry no private text
        self.usage = Usage()
        self.connect_timeout_s: float | None = None
        """A shorter limit on connecting (the health check's); None: `http.timeout_s`."""
        self.last_error: str | None = None
        """Why the latest failed request failed ("HTTP 503", "timeout", ...); never a prompt."""
        key = read_api_key(api_key_env, where)
        self._headers: dict[str, str] = {}
        if key is not None:
            self._headers = ({"api-key": key} if http.api_version
                             else {"Authorization": f"Bearer {key}"})
        self._params = {"api-version": http.api_version} if http.api_version else {}
        self._requests = RateLimiter(http.requests_per_minute)
        self._tokens = RateLimiter(http.tokens_per_minute)
        self._rng = random.Random()
        self._usage_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._clients: dict[str, httpx.Client] = {}

    def __repr__(self) -> str:
        return (f"OpenAIHttpClient(base_url={self.base_url!r}, "
                f"concurrency={self.concurrency})")

    @property
    def base_url(self) -> str:
        """The server, or the servers comma-separated."""
        return ", ".join(self.base_urls)

    def keep(self, urls: Sequence[str]) -> None:
        """Send to these of the servers only (the health check drops the dead ones)."""
        self.close()
        self.base_urls = [url for url in self.base_urls if url in urls]

    def endpoint_report(self) -> dict[str, float]:
        """Per server, with more than one: its attempts, answers and errors."""
        if len(self.endpoint_usage) < 2:
            return {}
        return {f"{url} {key}": float(value) for url, used in self.endpoint_usage.items()
                for key, value in asdict(used).items()}

    def post_many(self, endpoint: str, payloads: Sequence[dict[str, Any]],
                  token_estimates: Sequence[int],
                  parse: Callable[[dict[str, Any]], T]) -> list[T | None]:
        """POST each payload to `endpoint`, `concurrency` at a time; `parse` turns a response
        body into a result and raises KeyError/TypeError/ValueError/IndexError when it is
        malformed. Results keep the order of `payloads`."""
        if not payloads:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency * len(self.base_urls),
                                            thread_name_prefix="dpsynth-http")
            self._clients = {url: httpx.Client(
                base_url=url + "/", headers=self._headers, params=self._params,
                timeout=httpx.Timeout(self.http.timeout_s, connect=self.connect_timeout_s),
                limits=httpx.Limits(max_connections=self.concurrency,
                                    max_keepalive_connections=self.concurrency))
                for url in self.base_urls}
        abort = threading.Event()
        futures = [self._pool.submit(self._post_one, endpoint, payload, estimate, parse, abort,
                                     index)
                   for index, (payload, estimate) in enumerate(zip(payloads, token_estimates,
                                                                   strict=True))]
        try:
            for future in track(as_completed(futures), "requests", total=len(futures),
                                log_progress=True):
                future.result()  # re-raises a BackendError from any request at once
        except BaseException:  # that, or Ctrl-C: send nothing more from this batch
            abort.set()
            for future in futures:
                future.cancel()
            raise
        return [f.result() for f in futures]

    def close(self) -> None:
        """Close the connections and the thread pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            for client in self._clients.values():
                client.close()
            self._pool, self._clients = None, {}

    def _post_one(self, endpoint: str, payload: dict[str, Any], estimate: int,
                  parse: Callable[[dict[str, Any]], T], abort: threading.Event,
                  index: int = 0) -> T | None:
        """Attempt `attempt` of request `index` goes to server index + attempt: round robin
        for the batch, and a failed attempt's retry on the next server."""
        self._count("calls")
        reason = "no attempt made"
        for attempt in range(self.http.max_retries + 1):
            if abort.is_set():
                return None
            self._requests.acquire(1)
            self._tokens.acquire(estimate)
            self._count("attempts")
            url = self.base_urls[(index + attempt) % len(self.base_urls)]
            server = self.endpoint_usage[url]
            self._count("attempts", used=server)
            retry_after: float | None = None
            try:
                response = self._clients[url].post(endpoint, json=payload)
            except httpx.TimeoutException:
                reason = "timeout"
            except httpx.TransportError as exc:
                reason = f"connection error ({type(exc).__name__})"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    self._count("answers", used=server)
                    return self._parse(response, parse)
                message = _error_message(response)
                quoted = f" ({message})" if message and self.quote_errors else ""
                if status in FATAL_STATUS or _names_model(status, message, payload):
                    abort.set()  # the other requests of the batch stop at once
                    raise BackendError(
                        f"{self.where}: {url}/{endpoint} answered HTTP {status}"
                        f"{quoted}; check base_url, model and the API key's environment "
                        "variable")
                if status not in RETRY_STATUS and status < 500:
                    self._count("failed")
                    self.last_error = f"HTTP {status}{quoted}"
                    log.warning("%s: HTTP %d%s, not retried; that output is marked failed",
                                self.where, status, quoted)
                    return None
                reason = f"HTTP {status}{quoted}"
                retry_after = _retry_after(response)
            self._count("errors", used=server)
            if attempt == self.http.max_retries:
                break
            self._count("retries")
            if (attempt + 1) % len(self.base_urls):
                continue  # the next server has not failed this request yet: no wait
            time.sleep(self._backoff(attempt, retry_after))
        self._count("failed")
        self.last_error = reason
        log.warning("%s: request failed (%s) after %d attempt(s); that output is marked failed",
                    self.where, reason, self.http.max_retries + 1)
        return None

    def _count(self, name: str, amount: int = 1, used: Any = None) -> None:
        """Add to a `Usage` counter (or, with `used`, to that server's `EndpointUsage`)."""
        used = self.usage if used is None else used
        with self._usage_lock:
            setattr(used, name, getattr(used, name) + amount)

    def _parse(self, response: httpx.Response, parse: Callable[[dict[str, Any]], T]) -> T | None:
        try:
            body = response.json()
            result = parse(body)
            usage = body.get("usage") or {}
            prompt = int(usage.get("prompt_tokens") or 0)
            completion = int(usage.get("completion_tokens") or 0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            self._count("malformed")
            self._count("failed")
            self.last_error = f"malformed response body (HTTP {response.status_code})"
            log.warning("%s: malformed response body (HTTP %d, %d bytes); that output is "
                        "marked failed", self.where, response.status_code, len(response.content))
            return None
        self._count("prompt_tokens", prompt)
        self._count("completion_tokens", completion)
        return result

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter, at least the server's Retry-After."""
        ceiling = min(self.http.max_backoff_s, self.http.backoff_s * 2 ** attempt)
        with self._usage_lock:
            delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.http.max_backoff_s))
        return delay


def _error_message(response: httpx.Response) -> str:
    """The server's error message, whitespace collapsed and cut short, from the shapes
    OpenAI-compatible servers use: `{"error": {"message": ...}}` (OpenAI, vLLM, llama.cpp),
    `{"error": "..."}` (Ollama), `{"detail": "..."}` (FastAPI servers such as `transformers
    serve`), `{"message": ...}`, or a short plain-text body. Structured validation details
    (which may echo the request) are not read."""
    try:
        body = response.json()
    except ValueError:
        text = response.text if len(response.content) <= ERROR_QUOTE_CHARS else ""
    else:
        text = ""
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                error = error.get("message")
            for candidate in (error, body.get("detail"), body.get("message")):
                if isinstance(candidate, str) and candidate.strip():
                    text = candidate
                    break
    text = " ".join(text.split())
    if len(text) > ERROR_QUOTE_CHARS:
        text = text[: ERROR_QUOTE_CHARS - 1] + "…"
    return text


def _names_model(status: int, message: str, payload: dict[str, Any]) -> bool:
    """A client error whose message names the model asked for: a wrong model name, which
    every later request would meet too."""
    model = payload.get("model")
    if not (400 <= status < 500 and status not in RETRY_STATUS and isinstance(model, str)
            and model):
        return False
    return re.search(rf"(?<![\w.-]){re.escape(model)}(?![\w-])", message) is not None


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None
