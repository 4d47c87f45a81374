"""A loopback OpenAI-compatible server for tests, benchmarks and trying a config offline.

It speaks `POST /v1/chat/completions` and `POST /v1/embeddings` on 127.0.0.1 (an ephemeral
port by default), answers with deterministic text and hashed bag-of-words embeddings (or with
your own `responder`, e.g. a local model), and can inject faults: the next requests can be
answered with 429, 500, 503, 400, 401 or 404, hang past the client's timeout, drop the
connection, answer slowly, or send malformed JSON. It records every request it receives (the
JSON body and start/end times), so tests can read the prompts and measure real overlap.

    python -m dpsynth.backends.http.loopback --port 8000 --latency 0.2
    # then: backends.generator: {name: openai, base_url: http://127.0.0.1:8000/v1, model: x}
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from dpsynth.backends.generators.prompt_sets import ChatPrompt
from dpsynth.backends.generators.prompted import PromptedGenerator
from dpsynth.backends.http.deterministic import filler_text, hashed_embedding, target_words

FAULTS = ("429", "500", "503", "400", "401", "404", "timeout", "drop", "slow", "malformed",
          "no_choices")
Responder = Callable[[list[dict[str, str]], dict[str, Any]], str]


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it; `fault` is the injected fault, if any."""

    path: str
    headers: dict[str, str]
    body: Any
    start: float
    end: float
    status: int
    fault: str | None

    @property
    def user_prompt(self) -> str | None:
        """The last user message of a chat request."""
        try:
            users = [m["content"] for m in self.body["messages"] if m["role"] == "user"]
        except (KeyError, TypeError):
            return None
        return users[-1] if users else None


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1; use as a context manager or `start()`/`stop()`."""

    def __init__(self, *, latency_s: float = 0.0, faults: Iterable[str] = (),
                 hang_s: float = 2.0, slow_s: float = 0.5, embedding_dim: int = 32,
                 responder: Responder | None = None, port: int = 0) -> None:
        self.latency_s = latency_s
        self.hang_s = hang_s
        self.slow_s = slow_s
        self.embedding_dim = embedding_dim
        self.responder = responder
        self.error_message: str | None = None  # the injected HTTP errors' message, if set
        self.records: list[RequestRecord] = []
        self._faults: deque[str] = deque()
        self._lock = threading.Lock()
        self.inject(*faults)
        self._server = _Server(("127.0.0.1", port), _handler_for(self))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to put in a backend config."""
        return f"http://127.0.0.1:{self.port}/v1"

    def inject(self, *faults: str) -> None:
        """Answer the next requests with these faults, one each, in order."""
        for fault in faults:
            if fault not in FAULTS:
                raise ValueError(f"fault '{fault}': choose from {', '.join(FAULTS)}")
        with self._lock:
            self._faults.extend(faults)

    def start(self) -> LoopbackServer:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serve loop that must exist
            self._server.shutdown()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def user_prompts(self) -> list[str]:
        """The user messages of every chat request received, in arrival order."""
        return [p for r in self.records if (p := r.user_prompt) is not None]

    def max_overlap(self) -> int:
        """The most requests that were being served at the same moment."""
        events = sorted([(r.start, 1) for r in self.records] + [(r.end, -1) for r in self.records])
        level = peak = 0
        for _, step in events:
            level += step
            peak = max(peak, level)
        return peak

    def _next_fault(self) -> str | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.records.append(record)

    def answer(self, path: str, body: Any) -> dict[str, Any]:
        """The successful response body for a request (chat or embeddings)."""
        if path.endswith("/embeddings"):
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            dim = int(body.get("dimensions") or self.embedding_dim)
            data = [{"object": "embedding", "index": i,
                     "embedding": hashed_embedding(str(t), dim).tolist()}
                    for i, t in enumerate(inputs)]
            tokens = sum(len(str(t).split()) for t in inputs)
            return {"object": "list", "data": data, "model": body.get("model"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        messages = body["messages"]
        if self.responder is not None:
            text = self.responder(messages, body)
        else:
            user = messages[-1]["content"]
            words = min(target_words(user), int(body.get("max_tokens") or 10_000))
            text = filler_text(json.dumps(messages, sort_keys=True), words)
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        completion_tokens = len(text.split())
        return {"id": "loopback", "object": "chat.completion", "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a burst of concurrent connects must not hit the backlog
    daemon_threads = True
    block_on_close = False


def _handler_for(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            start = time.perf_counter()
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            fault = server._next_fault()
            time.sleep(server.latency_s + (server.slow_s if fault == "slow" else 0.0)
                       + (server.hang_s if fault == "timeout" else 0.0))
            status, payload = self._respond(body, fault)
            server._record(RequestRecord(self.path, dict(self.headers), body, start,
                                         time.perf_counter(), status, fault))
            if payload is None:
                self.close_connection = True
                return
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(payload)

        def _respond(self, body: Any, fault: str | None) -> tuple[int, bytes | None]:
            if fault == "drop":
                return 0, None
            if fault is not None and fault.isdigit():
                message = server.error_message or f"injected {fault}"
                return int(fault), json.dumps({"error": {"message": message}}).encode()
            if fault == "malformed":
                return 200, b'{"choices": [{"message": '
            if fault == "no_choices":
                return 200, json.dumps({"id": "loopback", "choices": []}).encode()
            path = urlsplit(self.path).path
            if not path.endswith(("/chat/completions", "/embeddings")):
                return 404, json.dumps({"error": {"message": "unknown path"}}).encode()
            try:
                return 200, json.dumps(server.answer(path, body)).encode()
            except (KeyError, TypeError, IndexError, AttributeError):
                return 400, json.dumps({"error": {"message": "bad request body"}}).encode()

    return Handler


def model_responder(generator: PromptedGenerator) -> Responder:
    """Answer chat requests with a local prompted generator (e.g. `HFGenerator`), so a
    config can be tried against a real, small model behind the OpenAI API."""
    lock = threading.Lock()  # one model, one request at a time

    def respond(messages: list[dict[str, str]], body: dict[str, Any]) -> str:
        system = next((m["content"] for m in messages if m["role"] == "system"), None)
        user = [m["content"] for m in messages if m["role"] == "user"][-1]
        with lock:
            return generator.complete([ChatPrompt(user=user, system=system)])[0]

    return respond


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the OpenAI API on 127.0.0.1 with "
                                     "deterministic answers, to try a dpsynth config offline.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--dim", type=int, default=32, help="embedding dimension")
    parser.add_argument("--model", help="a local Hugging Face model folder to answer chats "
                        "with (default: deterministic filler text)")
    args = parser.parse_args(argv)
    responder = None
    if args.model:
        from dpsynth.backends.config import HFConfig
        from dpsynth.backends.generators.hf import HFGenerator
        from dpsynth.backends.generators.prompt_sets import load_prompt_set

        cfg = HFConfig(model=args.model)
        responder = model_responder(HFGenerator(args.model, load_prompt_set("generic"), cfg))
    server = LoopbackServer(latency_s=args.latency, embedding_dim=args.dim, port=args.port,
                            responder=responder)
    print(f"serving {server.url} (Ctrl-C stops)", flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._server.server_close()


if __name__ == "__main__":
    main()
