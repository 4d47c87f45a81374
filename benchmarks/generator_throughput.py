"""Throughput of the OpenAI-compatible generator against the loopback server.

The server (a separate process, as a real server would be) answers every request after a
fixed latency. With `c` requests in flight the best possible rate is c / latency; the client
must come within 10% of that at c = 32, or this script exits non-zero.

    python benchmarks/generator_throughput.py [--latency 0.2] [--rounds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from dpsynth.backends import Condition, build_generator
from dpsynth.backends.config import OpenAIChatConfig

CONCURRENCIES = (1, 8, 32)
REQUIRED_RATIO_AT_32 = 0.90


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpsynth.backends.http.loopback", "--port", "0",
         "--latency", str(latency)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("serving "):
        proc.kill()
        raise SystemExit(f"the loopback server did not start: {line!r}")
    return proc, line.split()[1]


def measure(url: str, concurrency: int, rounds: int) -> tuple[int, float, int]:
    """Completed requests, wall seconds and failures for rounds x concurrency requests."""
    gen = build_generator(OpenAIChatConfig(base_url=url, model="loopback",
                                           concurrency=concurrency, max_tokens=64))
    gen.generate([Condition(label="warm-up")] * concurrency)  # open the connections
    conditions = [Condition(label=f"label {i}", length=20) for i in range(rounds * concurrency)]
    start = time.perf_counter()
    texts = gen.generate(conditions)
    seconds = time.perf_counter() - start
    failed = sum(not t for t in texts)
    return len(texts) - failed, seconds, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2, help="server seconds per request")
    parser.add_argument("--rounds", type=int, default=10, help="batches of `concurrency`")
    args = parser.parse_args()
    proc, url = start_server(args.latency)
    try:
        print(f"loopback server {url}, {args.latency * 1000:.0f} ms per request, "
              f"{args.rounds} x concurrency requests per row")
        print(f"{'concurrency':>11} {'requests':>8} {'seconds':>8} {'req/s':>8} "
              f"{'ideal':>8} {'ratio':>6}")
        ratios = {}
        for c in CONCURRENCIES:
            done, seconds, failed = measure(url, c, args.rounds)
            rate, ideal = done / seconds, c / args.latency
            ratios[c] = rate / ideal
            print(f"{c:>11} {done:>8} {seconds:>8.2f} {rate:>8.1f} {ideal:>8.1f} "
                  f"{ratios[c]:>6.2f}" + (f"  ({failed} failed)" if failed else ""))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    verdict = "PASS" if ratios[32] >= REQUIRED_RATIO_AT_32 else "FAIL"
    print(f"{verdict}: {ratios[32]:.0%} of ideal at concurrency 32 "
          f"(required {REQUIRED_RATIO_AT_32:.0%})")
    if verdict == "FAIL":
        raise SystemExit(1)


if __name__ == "__main__":
    main()
