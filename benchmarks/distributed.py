"""The vote stage (embedding the private records once, then T nearest-neighbour vote counts),
ctcl's topic assignment (each record's nearest topic, sent back to the driver) and kd_tutor's
PATE teachers (fit, then asked query batches) on the local engine and on Ray with 1 and 2
workers, side by side in one run.

    OMP_NUM_THREADS=1 python benchmarks/distributed.py [--records 20000] [--candidates 2000]
        [--iterations 5] [--topics 100] [--teachers 60] [--negatives 1500] [--queries 500]
        [--query-batch 100]

Private texts are ag_news training texts (../shared/data/ag_news; generated tickets where it is
absent), cycled to `--records` with a record number appended; candidates are other ag_news
texts; TF-IDF/LSA embedder (256 dimensions, fit on the candidates: set-up, not timed). Ray
runs on a cluster of this process's own on 127.0.0.1 (`backends.executor: {name: ray}`);
starting it is shown apart. Every engine must give the same histograms; the script checks it.
Ray gives each worker OMP_NUM_THREADS = its CPUs (1), and TF-IDF's randomized SVD fits
slightly different components on different BLAS thread counts (1e-4 apart here), which moves
near-tied votes: so the driver runs with OMP_NUM_THREADS=1 too, the same embeddings
everywhere, and the same single thread per worker.

Topics: `--topics` centroids (the embeddings of the first public texts; ctcl's shipped model has
100) after the vote stage, on the same voters: `ShardedVoters.nearest`, as ctcl's
`condition_distribution` does, the records' embedding being the vote stage's. Teachers:
`--teachers` binary teachers (kd_tutor's default 60) over the private records, partitioned
by a keyed hash, fit on the first `--negatives` candidates as public negatives, then asked
`--queries` other candidates in batches of `--query-batch` (kd_tutor's 100); Ray's fit
includes starting the voters' actors, embedding their blocks and relaying each teacher's rows
to the actor that fits it (as a run does), the local fit embeds too.
Every engine must give the same topics and the same teacher votes; the script checks it.

What a real cluster gives: embedding is embarrassingly parallel (each worker embeds N/W
records, holds them for the run, and answers a vote from its own block), so with W machines
the embedding and each vote's nearest-neighbour search take about 1/W of the local time; the
driver's share of a vote is one `ray.put` of the candidates (public) and summing W integer
histograms of C bins, O(W·C), independent of N. The constant costs are starting the actors
(each loads its embedder: seconds for MiniLM) and a round trip per vote, a few milliseconds.
On this 2-core machine shared with other jobs, two workers compete with the driver and with
each other for the same cores, so the ratios below show Ray's overhead rather than its gain.
The same holds for topics (one nearest search per record plus N small integers back to the
driver: ~1/W of the local search on W machines) and for teachers, which a real cluster fits
W at a time (teacher fitting is ~1/W of the local time; each query batch costs one round trip
and the sum of W count tables).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from dpsynth.backends import build_embedder  # noqa: E402
from dpsynth.backends.config import ExecutorConfig, TfidfConfig  # noqa: E402
from dpsynth.backends.ray_cluster import ray_session  # noqa: E402
from dpsynth.data import PrivateDataset  # noqa: E402
from dpsynth.private.engine.nearest import private_voters  # noqa: E402
from dpsynth.private.engine.ray import RayEngine  # noqa: E402
from dpsynth.private.engine.teachers import Teachers, train_teachers  # noqa: E402

KEY = b"benchmark-key-16"

AG_NEWS = ROOT.parent / "shared" / "data" / "ag_news" / "train.csv"


def texts(records: int, candidates: int) -> tuple[list[str], list[str]]:
    if AG_NEWS.exists():
        import pandas as pd

        pool = pd.read_csv(AG_NEWS)["text"].astype(str).tolist()
    else:
        from tests.methods.fakes import ticket_texts

        pool = ticket_texts(records + candidates, seed=1)[0]
    public, private = pool[:candidates], pool[candidates:]
    return [f"{private[i % len(private)]} #{i}" for i in range(records)], public


def vote_stage(make_voters, candidates: np.ndarray, iterations: int, centroids: np.ndarray):
    """(embed s, vote s per vote, last histogram, assign s, topics): the votes, then ctcl's
    topic of each record on the same voters."""
    start = time.perf_counter()
    voters = make_voters()
    embedded = time.perf_counter()
    counts = [voters.counts(candidates) for _ in range(iterations)]
    voted = time.perf_counter()
    topics = voters.nearest(centroids)
    assigned = time.perf_counter()
    voters.close()
    return (embedded - start, (voted - embedded) / iterations, counts[-1],
            assigned - voted, topics)


def teacher_stage(make_teachers, queries: np.ndarray, batch: int):
    """(fit s, vote s per batch, all votes): kd_tutor's teachers, fit, then asked in batches."""
    start = time.perf_counter()
    teachers = make_teachers()
    fitted = time.perf_counter()
    votes = np.vstack([teachers.votes(queries[i : i + batch], 2)
                       for i in range(0, len(queries), batch)])
    asked = time.perf_counter()
    teachers.close()
    return fitted - start, (asked - fitted) / -(-len(queries) // batch), votes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--teachers", type=int, default=60)
    parser.add_argument("--negatives", type=int, default=1500)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--query-batch", type=int, default=100)
    args = parser.parse_args()
    if args.negatives + args.queries > args.candidates or args.topics > args.candidates:
        parser.error("--negatives + --queries and --topics must not exceed --candidates")
    private_texts, public = texts(args.records, args.candidates)
    private = PrivateDataset(private_texts)
    with tempfile.TemporaryDirectory() as folder:
        fit = Path(folder) / "public.txt"
        fit.write_text("\n".join(t.replace("\n", " ") for t in public), encoding="utf-8")
        cfg = TfidfConfig(fit_texts=fit, dim=256)
        embedder = build_embedder(cfg)
        candidates = embedder.encode(public)
        centroids = candidates[: args.topics]
        negatives = candidates[: args.negatives]
        queries = candidates[args.negatives : args.negatives + args.queries]
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        print(f"# OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} "
              f"python benchmarks/distributed.py --records {args.records} --candidates "
              f"{args.candidates} --iterations {args.iterations} --topics {args.topics} --teachers "
              f"{args.teachers} --negatives {args.negatives} --queries {args.queries} "
              f"--query-batch {args.query_batch} (commit {commit}); "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
        rows = [("local", 0.0, *vote_stage(
            lambda: private_voters(private, private.embed(embedder)), candidates,
            args.iterations, centroids), *teacher_stage(
            lambda: Teachers(train_teachers(private, lambda d: d.embed(embedder), negatives,
                                            args.teachers, KEY, 0)),
            queries, args.query_batch))]
        for workers in (1, 2):
            executor = ExecutorConfig(name="ray", workers=workers)
            start = time.perf_counter()
            with ray_session(executor):
                started = time.perf_counter() - start
                cluster = RayEngine(cfg, None, executor, False)
                rows.append((f"ray, {workers} worker(s)", started, *vote_stage(
                    lambda cluster=cluster: cluster.voters(private), candidates,
                    args.iterations, centroids), *teacher_stage(
                    lambda cluster=cluster: cluster.teachers(
                        private, cluster.voters(private), negatives, args.teachers, KEY, 0),
                    queries, args.query_batch)))
    base = rows[0]
    print(f"{'engine':<20}{'start s':>9}{'embed s':>9}{'vote s':>9}"
          f"{'embed x':>9}{'vote x':>9}  same histogram")
    for name, started, embed, vote, counts, *_ in rows:
        print(f"{name:<20}{started:>9.2f}{embed:>9.2f}{vote:>9.3f}"
              f"{base[2] / embed:>9.2f}{base[3] / vote:>9.2f}  "
              f"{np.array_equal(counts, base[4])}")
    print(f"x: the local time over this engine's (above 1: faster). vote s: per vote, mean of "
          f"{args.iterations}. Ray's embed s includes each actor building its own embedder "
          f"(the TF-IDF fit the local row does untimed, before).")
    print(f"\nctcl's topic assignment: {args.records} records to their nearest of "
          f"{args.topics} topics, on the vote stage's voters (embedding as above)")
    print(f"{'engine':<20}{'assign s':>9}{'total s':>9}{'assign x':>9}{'total x':>9}"
          f"  same topics")
    for name, _, embed, _, _, assign, topics, *_ in rows:
        print(f"{name:<20}{assign:>9.3f}{embed + assign:>9.2f}{base[5] / assign:>9.2f}"
              f"{(base[2] + base[5]) / (embed + assign):>9.2f}  "
              f"{np.array_equal(topics, base[6])}")
    print("total s: embed s + assign s, what ctcl spends on topics.")
    print(f"\nkd_tutor's PATE teachers: {args.teachers} binary teachers over {args.records} "
          f"records against {args.negatives} public negatives, asked {args.queries} queries "
          f"in batches of {args.query_batch}")
    print(f"{'engine':<20}{'fit s':>9}{'batch s':>9}{'fit x':>9}{'batch x':>9}  same votes")
    for name, *_, fit, batch, votes in rows:
        print(f"{name:<20}{fit:>9.2f}{batch:>9.3f}{base[7] / fit:>9.2f}{base[8] / batch:>9.2f}"
              f"  {np.array_equal(votes, base[9])}")
    print(f"fit s: embedding the records and fitting every teacher (on Ray: starting the "
          f"actors, each building its embedder and embedding its block, relaying each "
          f"teacher's rows to its actor, fitting); batch s: "
          f"per batch, mean of {-(-args.queries // args.query_batch)}. load average "
          f"{os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
