"""How the private side of a run scales with the number of records: time and peak memory of
loading, embedding and voting, and their growth exponents (goal: time linear, memory flat).

    python benchmarks/scaling.py [--records 10000,100000,1000000] [--candidates 2000]
        [--labels 4] [--fit-texts 3000] [--keep DIR]

Private sets are perturbed public paragraphs of ../shared/data/public/wikinews_en (each the
first half of one paragraph spliced to the second half of another, a window of its words
shuffled) with random labels, written to a CSV. Each size then runs in a fresh process:

- load: `load_private` reads, validates and wraps the CSV (texts stay in RAM, by design);
- embed: `PrivateDataset.embed` with the TF-IDF/LSA embedder (256 dimensions, fit on
  wikipedia_en paragraphs; fitting is set-up, not timed), block by block into scratch space
  (out of core above `dpsynth.data.scratch.IN_MEMORY_BYTES`);
- vote: `dp_nearest_votes`, every record (sampling rate 1) voting for its nearest of
  `--candidates` wikinews paragraphs of its own label, Gaussian noise from the CSPRNG.

Memory is sampled from /proc/self/status every 10 ms: peak RSS, peak anonymous RSS (heap: what
the process cannot give back) and the stage's own increase of it over the stage's start. The
memory map's pages count in RSS as file-backed pages while resident (the page cache of the
unlinked file, which the kernel may evict), so they are shown apart. The exponents are
log-log slopes over the sizes. Wall-clock on a shared machine: CPU seconds and the load
average are printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "data" / "public"
STAGES = ("load", "embed", "vote")
LABELS = ("a", "b", "c", "d", "e", "f", "g", "h")


def paragraphs(folder: str, parts: range, limit: int | None = None) -> list[str]:
    out = []
    for part in parts:
        path = PUBLIC / folder / f"part-{part:03d}.txt"
        out += [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
                if len(line.split()) >= 8]
    return out[:limit]


def make_private(path: Path, n: int, n_labels: int, seed: int = 0) -> None:
    """n perturbed wikinews paragraphs with random labels, as a CSV."""
    import pandas as pd

    words = [p.split() for p in paragraphs("wikinews_en", range(8))]
    rng, shuffle = np.random.default_rng(seed), random.Random(seed)
    heads, tails = rng.integers(0, len(words), n).tolist(), rng.integers(0, len(words), n)
    texts = []
    for i, j in zip(heads, tails.tolist(), strict=True):
        text = words[i][: len(words[i]) // 2] + words[j][len(words[j]) // 2 :]
        start = shuffle.randrange(max(1, len(text) - 6))
        window = text[start : start + 6]
        shuffle.shuffle(window)
        text[start : start + 6] = window
        texts.append(" ".join(text))
    labels = np.asarray(LABELS[:n_labels])[rng.integers(0, n_labels, n)]
    pd.DataFrame({"text": texts, "label": labels}).to_csv(path, index=False)


class Memory:
    """Peak RSS and anonymous RSS since the last `reset`, sampled in a thread."""

    def __init__(self) -> None:
        self.peak_rss = self.peak_anon = self.start_anon = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._sample, daemon=True).start()

    @staticmethod
    def now() -> dict[str, int]:
        status = Path("/proc/self/status").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in status if ":" in line)
        return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "RssAnon", "RssFile")}

    def reset(self) -> None:
        with self._lock:
            now = self.now()
            self.peak_rss, self.peak_anon = now["VmRSS"], now["RssAnon"]
            self.start_anon = now["RssAnon"]

    def _sample(self) -> None:
        while True:
            now = self.now()
            with self._lock:
                self.peak_rss = max(self.peak_rss, now["VmRSS"])
                self.peak_anon = max(self.peak_anon, now["RssAnon"])
            time.sleep(0.01)


def measure(csv: Path, n_candidates: int, n_labels: int, n_fit: int) -> list[dict]:
    """Time and memory of each stage on one private set (run in a fresh process)."""
    from dpsynth.backends.embedders.tfidf import TfidfEmbedder
    from dpsynth.data import DataConfig, load_private
    from dpsynth.data.scratch import IN_MEMORY_BYTES
    from dpsynth.privacy import PrivacyLedger, SubsampledGaussianHistogram
    from dpsynth.privacy.noise import NoiseSource
    from dpsynth.privacy.stages import VOTING
    from dpsynth.private.engine.nearest import private_voters
    from dpsynth.private.releases.voting import dp_nearest_votes

    embedder = TfidfEmbedder(paragraphs("wikipedia_en", range(1), n_fit))
    candidates = embedder.encode(paragraphs("wikinews_en", range(8, 9), n_candidates))
    candidate_labels = np.arange(len(candidates)) % n_labels
    spec = DataConfig(path=csv, label_column="label", labels=list(LABELS[:n_labels]))
    memory, rows, held = Memory(), [], {}

    def stage(name, fn):
        memory.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        held[name] = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        with memory._lock:
            rows.append({"stage": name, "wall_s": wall, "cpu_s": cpu,
                         "peak_rss": memory.peak_rss, "peak_anon": memory.peak_anon,
                         "anon_increase": memory.peak_anon - memory.start_anon,
                         "file_after": Memory.now()["RssFile"]})

    stage("load", lambda: load_private(spec))
    private = held["load"]
    stage("embed", lambda: private.embed(embedder))
    out_of_core = isinstance(held["embed"], np.memmap)
    stage("vote", lambda: dp_nearest_votes(
        private_voters(private, held["embed"]), candidates, candidate_labels,
        SubsampledGaussianHistogram(sigma=10.0, sampling_rate=1.0),
        PrivacyLedger(1e6, 1e-5), NoiseSource(), VOTING))
    for row in rows:
        row.update(records=private.n_records, out_of_core=out_of_core,
                   in_memory_bytes=IN_MEMORY_BYTES, dim=embedder.dim)
    return rows


def slope(x: list[float], y: list[float]) -> float:
    return float(np.polyfit(np.log(x), np.log(np.maximum(y, 1e-9)), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="10000,100000,1000000")
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--labels", type=int, default=4, choices=range(1, len(LABELS) + 1))
    parser.add_argument("--fit-texts", type=int, default=3000)
    parser.add_argument("--keep", type=Path, help="keep the generated CSVs in this folder")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.candidates, args.labels, args.fit_texts)))
        return
    folder = args.keep or Path(tempfile.mkdtemp(prefix="dpsynth-scaling-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; "
          f"{args.candidates} candidates, {args.labels} labels; MiB = 2^20 bytes", flush=True)
    print(f"{'records':>9} {'stage':<6} {'wall s':>8} {'CPU s':>8} {'peak RSS':>9} "
          f"{'peak anon':>9} {'+anon':>7} {'file-backed':>11}  load", flush=True)
    results = []
    for n in (int(x) for x in args.records.split(",")):
        csv = folder / f"private-{n}.csv"
        if not csv.exists():
            make_private(csv, n, args.labels)
        out = subprocess.run([sys.executable, __file__, "--measure", str(csv), "--candidates",
                              str(args.candidates), "--labels", str(args.labels),
                              "--fit-texts", str(args.fit_texts)],
                             check=True, capture_output=True, text=True).stdout
        rows = json.loads(out.strip().splitlines()[-1])
        results += rows
        mib = 1 << 20
        for row in rows:
            print(f"{n:>9} {row['stage']:<6} {row['wall_s']:8.1f} {row['cpu_s']:8.1f} "
                  f"{row['peak_rss'] / mib:9.0f} {row['peak_anon'] / mib:9.0f} "
                  f"{row['anon_increase'] / mib:7.0f} {row['file_after'] / mib:11.0f}  "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        print(f"{'':>9} embeddings {'out of core' if rows[0]['out_of_core'] else 'in memory'} "
              f"({n * rows[0]['dim'] * 4 / mib:.0f} MiB of float32)", flush=True)
    sizes = sorted({r["records"] for r in results})
    if len(sizes) > 1:
        print("\ngrowth exponents (log-log slope against records; 1 = linear, 0 = flat):")
        for name in STAGES:
            of = [r for r in results if r["stage"] == name]
            print(f"  {name:<6} wall {slope(sizes, [r['wall_s'] for r in of]):5.2f}  "
                  f"CPU {slope(sizes, [r['cpu_s'] for r in of]):5.2f}  "
                  f"+anon memory {slope(sizes, [r['anon_increase'] for r in of]):5.2f}")
    print(f"\nload average {os.getloadavg()[0]:.1f} at end; CSVs in {folder}")


if __name__ == "__main__":
    main()
