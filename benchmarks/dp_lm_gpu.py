"""ctcl and dpft on SmolLM2-135M-Instruct at the seed's scale, on a GPU: the grid cells of
issue 40 that 2 CPU cores cannot train.

Each cell (set, recipe, seed, ε) makes the recipe's releases with dpsynth's own parts:
- the recipe's budget plan (`budget_plan`, δ = 1/(N ln N)), every release charged on a ledger;
- its condition release: ctcl, Gaussian counts over (label, topic) cells at the seed's σ = 10,
  each record's topic its nearest public topic by MiniLM (found beforehand by the `topics`
  command: MiniLM has no wheel small enough to carry to the GPU machine); dpft, Gaussian label
  counts; the conditions are then allocated over the cells by ctcl's own `conditions_over`;
- DP-Adam through `dp_finetune` (book-keeping clipping, each step charged) on the documents
  `SmolLMTrainable` builds from (label, topic keywords, text);
- `n` texts through the smollm generator (its prompts, cleaning, retries) and
  `generate_distinct`, as the recipes sample, but from the merged weights in bfloat16 on the
  GPU with transformers' `generate`, where the recipes export to CTranslate2 int8 on the CPU.
Each cell is written as the run folder `utility.py --keep-runs` scores (synthetic.csv,
bench.json, metrics.jsonl), so its grid line is made on the CPU by the same scorer as every
other cell. The noise here comes from numpy/torch generators seeded per cell (a benchmark,
not a release).

    python benchmarks/dp_lm_gpu.py topics --data-root DATA --sets ag_news,trec,yelp --out T
    python benchmarks/dp_lm_gpu.py run --data-root DATA --topics T --out RUNS
        [--sets ag_news,trec,yelp] [--recipes ctcl,dpft] [--epsilons 1,4] [--seeds 0,1,2]
        [--steps 200] [--batch 128] [--n 500] [--lora-ranks 16] [--full-sets ag_news]
        [--workers 4] [--deadline-s 0] [--tf32] [--label-names '{"trec": {"ABBR": ...}}']

Cells run in `--workers` processes sharing the GPU (a LoRA step of one process leaves it
mostly idle), recipe by recipe and set by set in `--sets`' order, each set's seeds together,
so the cells a time limit leaves out are the last recipe's last sets; no ε starts after
`--deadline-s` (0: no limit).
`--lora-ranks 16,0` adds full fine-tuning (rank 0, learning rate `--full-learning-rate`) on
`--full-sets`, written under RUNS/rank0 (LoRA cells under RUNS/rank16). Without a GPU it runs
on the CPU (slowly). `--label-names` gives a set's codes their public names
(`data.label_names`, as utility.py's flag of that name): the recipes train and sample on the
names and keep the codes in synthetic.csv.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path


@dataclass(frozen=True)
class Facts:
    """The public facts the recipes' budget plans read."""

    label_names: tuple[str, ...]
    n_units: int
    records_per_unit: int = 1

    @property
    def has_labels(self) -> bool:
        return True


@dataclass(frozen=True)
class Cell:
    dataset: str
    recipe: str
    seed: int
    lora_rank: int


def topics(args: argparse.Namespace) -> None:
    """Each train record's nearest public topic (MiniLM, as ctcl finds it), one .npy per set."""
    import numpy as np

    from dpsynth.backends import build_embedder
    from dpsynth.backends.config import MiniLMConfig
    from dpsynth.evaluate import read_text_table
    from dpsynth.methods.parts.topics import TopicModel
    from dpsynth.private.engine.nearest import nearest_indices

    centroids = TopicModel.load(TOPICS_ASSET).centroids
    embedder = build_embedder(MiniLMConfig())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for dataset in args.sets.split(","):
        table = read_text_table(Path(args.data_root) / dataset / "train.csv",
                                require_labels=True)
        nearest = nearest_indices(embedder.encode(table.texts), centroids)
        np.save(out / f"{dataset}.npy", nearest.astype(np.int32))
        print(f"{dataset}: {len(nearest)} records, {len(set(nearest.tolist()))} topics used")


TOPICS_ASSET = Path(__file__).resolve().parents[1] / "src/dpsynth/assets/topics"


def run_cell(cell: Cell, args: argparse.Namespace, deadline: float) -> list[str]:
    """Both ε of one (set, recipe, seed, rank), in a worker process; a line per ε."""
    import numpy as np
    import torch

    from dpsynth.backends.config import SmolLMConfig
    from dpsynth.backends.generators.label_names import with_public_names
    from dpsynth.backends.smollm.engines import TorchEngine
    from dpsynth.backends.smollm.generator import SmolLMGenerator
    from dpsynth.backends.smollm.trainable import SmolLMTrainable
    from dpsynth.config import RecipeConfig
    from dpsynth.evaluate import read_text_table
    from dpsynth.methods.ctcl import conditions_over
    from dpsynth.methods.parts.distinct import generate_distinct
    from dpsynth.methods.parts.topics import TopicModel
    from dpsynth.methods.registry import build_recipe
    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.privacy.stages import LABEL_HISTOGRAM, TOPIC_HISTOGRAM, TRAINING
    from dpsynth.private.releases.metadata import to_distribution
    from dpsynth.private.training.dp_training import DpTraining, dp_finetune

    if args.deadline_s and time.time() > deadline:
        return [f"{cell}: not started (deadline)"]
    torch.set_num_threads(2)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = args.tf32  # float32 matrix products on TF32 cores
    table = read_text_table(Path(args.data_root) / cell.dataset / "train.csv",
                            require_labels=True)
    names = tuple(sorted(set(table.labels)))
    label_of = np.array([names.index(y) for y in table.labels])
    facts = Facts(names, len(table))
    delta = 1 / (facts.n_units * math.log(facts.n_units))
    ctcl = cell.recipe == "ctcl"
    model_topics = TopicModel.load(TOPICS_ASSET)
    topic_of = (np.load(Path(args.topics) / f"{cell.dataset}.npy") if ctcl
                else np.zeros(len(table), dtype=np.int32))
    keywords = model_topics.keywords if ctcl else [[]]
    lm = SmolLMTrainable(cell.lora_rank)
    public = json.loads(args.label_names).get(cell.dataset, {})
    documents = [lm.document(public.get(names[y], names[y]), keywords[t], text)
                 for text, y, t in zip(table.texts, label_of, topic_of, strict=True)]
    rate = args.learning_rate if cell.lora_rank else args.full_learning_rate
    params = {"steps": args.steps, "batch_size": args.batch, "lora_rank": cell.lora_rank,
              "learning_rate": rate, "n_output": args.n}
    recipe = build_recipe(RecipeConfig(name=cell.recipe, params=params), None)
    lines = []
    for epsilon in args.epsilon_list:
        if args.deadline_s and time.time() > deadline:
            lines.append(f"{cell} ε={epsilon:g}: not started (deadline)")
            continue
        began = time.perf_counter()
        rng = np.random.default_rng([cell.seed, round(epsilon * 1000), cell.lora_rank])
        torch.manual_seed(cell.seed)
        plan = recipe.budget_plan(facts, epsilon, delta)
        ledger = PrivacyLedger(epsilon, delta, discretization=1e-3)
        histogram = plan.stage(TOPIC_HISTOGRAM if ctcl else LABEL_HISTOGRAM)
        counts = np.zeros((len(names), len(keywords)))
        np.add.at(counts, (label_of, topic_of), 1.0)
        ledger.charge(histogram.name, histogram.release_event, mechanism="gaussian",
                      sensitivity=1.0, noise_scale=histogram.noise_scale)
        noisy = counts + rng.normal(0, histogram.noise_scale, counts.shape)
        conditions = conditions_over(to_distribution(noisy.ravel()).reshape(counts.shape),
                                     args.n, names, keywords if ctcl else [])
        training = plan.stage(TRAINING)
        q = training.spec.sampling_rate
        config = DpTraining(steps=args.steps, sampling_rate=q,
                            noise_multiplier=training.noise_scale, learning_rate=rate,
                            max_length=args.max_length, frozen=lm.frozen, device=device,
                            physical_batch_size=args.physical_batch,
                            expected_batch_size=max(1, round(q * facts.n_units)))
        keys = iter([rng.bytes(16) for _ in range(args.steps)])
        torch.cuda.reset_peak_memory_stats() if device == "cuda" else None
        trained_at = time.perf_counter()
        model = dp_finetune(lm.fresh_model(), [d for d, _ in documents], lm.pad_id, config,
                            ledger, training.name, training.release_event,
                            lambda k=keys: next(k), starts=[s for _, s in documents])
        train_s = time.perf_counter() - trained_at
        if cell.lora_rank:
            model = model.merge_and_unload()
        engine = TorchEngine(model.to(device, torch.bfloat16), "torch-bfloat16", device)
        temperature, top_p, _ = recipe.params.sampling()
        generator = with_public_names(SmolLMGenerator(lm.prompts, SmolLMConfig(
            temperature=temperature, top_p=top_p, seed=cell.seed, engine="torch-bfloat16",
            batch_size=args.sample_batch), engine=engine), public or None)
        texts, asked = generate_distinct(generator.generate, conditions)
        wall = time.perf_counter() - began
        folder = (Path(args.out) / f"rank{cell.lora_rank}"
                  / f"{cell.dataset}-{cell.recipe}-eps{epsilon:g}-seed{cell.seed}")
        _write_run(folder, texts, [conditions[i].label for i in asked], wall, {
            "training_steps": args.steps, "synthetic": len(texts),
            "epsilon_spent": ledger.spent(), "delta": delta,
            "noise_multiplier": training.noise_scale, "sampling_rate": q,
            "train_s": train_s, "s_per_step": train_s / args.steps,
            "peak_gpu_gib": (torch.cuda.max_memory_allocated() / 2**30
                             if device == "cuda" else 0.0), "device": device})
        lines.append(f"{folder.name} rank {cell.lora_rank}: ε spent {ledger.spent():.3f}, "
                     f"σ={training.noise_scale:.3f}, q={q:.4f}, {train_s / args.steps:.3f} "
                     f"s/step, {len(texts)} kept of {args.n}, {wall:.0f} s")
        del model, engine, generator
    return lines


def _write_run(folder: Path, texts: list[str], labels: list[str], wall: float,
               report: dict) -> None:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(folder / "synthetic.csv", index=False)
    (folder / "metrics.jsonl").write_text(json.dumps(report) + "\n", encoding="utf-8")
    (folder / "bench.json").write_text(json.dumps({"wall_s": wall}), encoding="utf-8")


def cells(args: argparse.Namespace) -> list[Cell]:
    """Recipe by recipe, then set by set (a set's seeds together, so a row fills before
    the next starts); full fine-tuning (rank 0) last, only on `--full-sets`."""
    ranks = [int(r) for r in args.lora_ranks.split(",")]
    full = set(args.full_sets.split(","))
    return [Cell(dataset, recipe, seed, rank)
            for rank in ranks for recipe in args.recipes.split(",")
            for dataset in args.sets.split(",") for seed in args.seed_list
            if rank or dataset in full]


def run(args: argparse.Namespace) -> None:
    from dpsynth.backends.smollm import weights

    started = time.time()
    deadline = started + args.deadline_s
    weights.hf_folder()  # dequantised once, before the workers read it
    todo = cells(args)
    print(f"{len(todo)} cells ({len(args.epsilon_list)} ε each) in {args.workers} workers",
          flush=True)
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_cell, cell, args, deadline): cell for cell in todo}
        for future in as_completed(futures):
            try:
                lines = future.result()
            except Exception as exc:  # one cell's failure leaves the others' results
                lines = [f"{futures[future]}: failed: {exc!r}"]
            for line in lines:
                print(f"[{time.time() - started:5.0f} s] {line}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("topics", "run"))
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--topics", help="the `topics` command's folder (ctcl)")
    parser.add_argument("--sets", default="ag_news,trec,yelp")
    parser.add_argument("--recipes", default="ctcl,dpft")
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--lora-ranks", default="16")
    parser.add_argument("--full-sets", default="ag_news")
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--full-learning-rate", type=float, default=5e-4)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--sample-batch", type=int, default=250)
    parser.add_argument("--physical-batch", type=int, default=128, help="records per forward "
                        "and backward pass (a worker's GPU memory follows it; on an H200, 16 "
                        "a pass made a step 3.6x slower than 128)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--deadline-s", type=float, default=0)
    parser.add_argument("--label-names", default="{}", help="JSON {set: {label: public "
                        "name}} for sets whose labels are codes")
    parser.add_argument("--tf32", action="store_true", help="TF32 matrix products on a GPU "
                        "for the forward and backward passes (the clipping's norms and sums "
                        "stay in full float32)")
    args = parser.parse_args()
    args.epsilon_list = [float(e) for e in args.epsilons.split(",")]
    args.seed_list = [int(s) for s in args.seeds.split(",")]
    topics(args) if args.command == "topics" else run(args)


if __name__ == "__main__":
    main()
