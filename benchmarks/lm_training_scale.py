"""ctcl and dpft at a training scale the CPU cannot reach, on a GPU machine that has no MiniLM.

    # here: each private record's nearest public topic, found with MiniLM
    python benchmarks/lm_training_scale.py prepare ag_news trec --data-root ../shared/data \
        --out .gpu
    # on the GPU machine: the recipes' own runs, in the layout utility.py --keep-runs reads
    python benchmarks/lm_training_scale.py train .gpu --runs runs.json --out RUNS
    # here again: score them as every other grid cell is scored
    python benchmarks/utility.py ag_news --recipes ctcl --epsilons 4 --keep-runs RUNS/NAME ...

ctcl reads a private record's embedding only to find its nearest topic, so `train` gives each
run an embedder that answers a record with its topic's centroid (found here with MiniLM):
the run is the one MiniLM would make, on a machine without it (dpft embeds nothing
private). Its DP noise comes from the seed (the same distributions; the GPU machine has
no opendp for the exact samplers), so these runs measure utility, not privacy. runs.json is
a list of {"name", "dataset", "recipe", "epsilon", "seeds", "params"}; each finished run is
appended at once to OUT/STEM.tar (STEM: the runs file's), so a run cut off by a time limit
keeps what finished.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from dpsynth.backends.base import Embedder
from dpsynth.evaluate import read_text_table


def prepare(datasets: list[str], data_root: Path, out: Path, embedder_name: str) -> None:
    from dpsynth.backends import build_embedder
    from dpsynth.backends.config import parse_embedder
    from dpsynth.methods.parts.topics import TopicModel
    from dpsynth.private.engine.nearest import nearest_indices

    embedder = build_embedder(parse_embedder({"name": embedder_name}))
    topics = TopicModel.load(Path(__file__).resolve().parents[1] / "src/dpsynth/assets/topics")
    for name in datasets:
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(data_root / name / "train.csv", folder / "train.csv")
        texts = read_text_table(folder / "train.csv", require_labels=True).texts
        assigned = nearest_indices(embedder.encode_private(texts), topics.centroids)
        np.save(folder / "topics.npy", assigned.astype(np.int16))
        (folder / "embedder.json").write_text(json.dumps(embedder.identity()), encoding="utf-8")
        print(f"{name}: {len(texts)} records over {len(set(assigned.tolist()))} topics",
              file=sys.stderr)


class TopicCentroids(Embedder):
    """Answers each prepared private text with its nearest topic's centroid."""

    is_remote = False

    def __init__(self, texts: list[str], assigned: np.ndarray, centroids: np.ndarray,
                 identity: dict) -> None:
        self._vectors = {text: centroids[t] for text, t in zip(texts, assigned, strict=True)}
        self._dim, self._identity = centroids.shape[1], identity

    @property
    def dim(self) -> int:
        return self._dim

    def identity(self) -> dict[str, object]:
        return self._identity

    def encode(self, texts):
        raise RuntimeError("this run embeds no public text")

    def encode_private(self, texts):
        return np.stack([self._vectors[text] for text in texts]).astype(np.float32)


def train(prepared: Path, runs: list[dict], out: Path, tar_name: str) -> None:
    import dpsynth
    from dpsynth.methods.parts.topics import TopicModel

    centroids = TopicModel.load(
        Path(__file__).resolve().parents[1] / "src/dpsynth/assets/topics").centroids
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lm-training-scale-"))  # models, checkpoints
    for spec in runs:
        folder = prepared / spec["dataset"]
        table = read_text_table(folder / "train.csv", require_labels=True)
        texts, labels = table.texts, sorted(set(table.labels or []))  # a public set's labels
        embedder = TopicCentroids(texts, np.load(folder / "topics.npy"), centroids,
                                  json.loads((folder / "embedder.json").read_text()))
        for seed in spec["seeds"]:
            run = (f"{spec['dataset']}-{spec['recipe']}-eps{spec['epsilon']:g}-seed{seed}")
            work = scratch / spec["name"] / run
            started = time.perf_counter()
            dpsynth.synthesize(str((folder / "train.csv").resolve()), label="label",
                               labels=labels,
                               epsilon=spec["epsilon"], recipe=spec["recipe"],
                               params=spec["params"], embedder=embedder, seed=seed,
                               output_dir=str(work), output_format="csv", report=False,
                               budget_options={"noise": "seeded_not_private"},
                               log_level="warning")
            wall = time.perf_counter() - started
            (work / "bench.json").write_text(json.dumps({"wall_s": wall}), encoding="utf-8")
            with tarfile.open(out / f"{tar_name}.tar", "a") as tar:
                for name in ("synthetic.csv", "bench.json", "metrics.jsonl", "privacy.json"):
                    if (work / name).exists():
                        tar.add(work / name, arcname=f"{spec['name']}/{run}/{name}")
            print(f"{spec['name']} {run}: {wall:.0f} s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="nearest topics of the private records, here")
    p.add_argument("datasets", nargs="+")
    p.add_argument("--data-root", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--embedder", default="minilm")
    t = sub.add_parser("train", help="the runs, on the GPU machine")
    t.add_argument("prepared", type=Path)
    t.add_argument("--runs", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.datasets, args.data_root, args.out, args.embedder)
    else:
        train(args.prepared, json.loads(args.runs.read_text(encoding="utf-8")), args.out,
              args.runs.stem)


if __name__ == "__main__":
    main()
