"""Train the inversion decoder shipped in src/dpsynth/assets/inversion (embedding-eda §3.1).

Public text only: sentences of ../shared/data/public (Wikipedia, Wikinews, Gutenberg),
embedded with the bundled MiniLM; the decoder learns to write each sentence back from its
embedding. Steps (each a subcommand):

    python scripts/train_inversion_decoder.py prepare [--shared ../shared/data]
    python scripts/train_inversion_decoder.py train --max-minutes 20   # resumable
    python scripts/train_inversion_decoder.py evaluate [--samples 8]   # held-out cosine

`train` checkpoints to .cache/inversion and exports the folder when it stops.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

from dpsynth.backends import build_embedder
from dpsynth.backends.config import MiniLMConfig
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.inversion import (
    InversionDecoder,
    InversionSpec,
    inversion_dir,
    new_model,
    save_model,
)
from dpsynth.backends.offline.model import asset_dir, load_tokenizer
from dpsynth.data.public_text import public_paragraphs, sentences

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "inversion"
HELDOUT = 500


def prepare(args: argparse.Namespace) -> None:
    """Sentences of 4–32 words from seeded public paragraphs; the held-out sentences come
    from paragraphs the training sentences do not."""
    start = time.perf_counter()
    paragraphs = public_paragraphs(args.shared, args.paragraphs, args.seed, min_words=10)
    random.Random(args.seed).shuffle(paragraphs)
    cut = len(paragraphs) // 20
    held = [s for p in paragraphs[:cut] for s in sentences(p, 4, 32)]
    train = list(dict.fromkeys(s for p in paragraphs[cut:] for s in sentences(p, 4, 32)))
    rng = random.Random(args.seed + 1)
    held = rng.sample(held, min(HELDOUT, len(held)))
    train = rng.sample(train, min(args.sentences, len(train)))
    embedder = build_embedder(MiniLMConfig(batch_size=128))
    CACHE.mkdir(parents=True, exist_ok=True)
    for name, texts in (("train", train), ("heldout", held)):
        np.save(CACHE / f"{name}.npy", embedder.encode(texts))
        (CACHE / f"{name}.json").write_text(json.dumps(texts), encoding="utf-8")
    meta = {"embedder": embedder.identity(), "train": len(train), "heldout": len(held),
            "paragraphs": len(paragraphs), "seconds": round(time.perf_counter() - start, 1)}
    (CACHE / "prepare.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    print(meta)


def _batch(tok, texts: list[str], max_tokens: int):
    import torch

    eos = tok.token_to_id(fmt.EOS)
    rows = [[*tok.encode(f"{fmt.TEXT} {fmt.clean(t)}").ids[:max_tokens + 1], eos]
            for t in texts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), eos, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def train(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    meta = json.loads((CACHE / "prepare.json").read_text(encoding="utf-8"))
    texts = json.loads((CACHE / "train.json").read_text(encoding="utf-8"))
    emb = torch.from_numpy(np.load(CACHE / "train.npy"))
    spec = InversionSpec(embedding_dim=emb.shape[1], prefix_length=args.prefix,
                         hidden=args.hidden, max_tokens=args.max_tokens, embedder=meta["embedder"])
    model = new_model(spec, asset_dir())
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    state_path = CACHE / "checkpoint.pt"
    step, seconds, losses = 0, 0.0, []
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, seconds, losses = state["step"], state["seconds"], state["losses"]
    tok = load_tokenizer(asset_dir())
    order = np.random.default_rng(args.seed).permutation(len(texts) * 8) % len(texts)
    began = time.perf_counter()
    model.train()
    while True:  # the schedule follows steps or minutes, whichever runs out first
        progress = max(step / args.max_steps,
                       (seconds + time.perf_counter() - began) / (60 * args.max_minutes))
        if progress >= 1:
            break
        warm = min(1.0, (step + 1) / 100)
        decay = max(0.1, 1 - max(0.0, progress - 0.75) / 0.25)
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * decay
        rows = order[step * args.batch : (step + 1) * args.batch]
        ids, mask = _batch(tok, [texts[i] for i in rows], args.max_tokens)
        loss = model.loss(emb[rows], ids, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        step += 1
        losses.append(loss.item())
        if step % 50 == 0:
            print(f"step {step} loss {np.mean(losses[-50:]):.3f} "
                  f"{seconds + time.perf_counter() - began:.0f}s", flush=True)
    seconds += time.perf_counter() - began
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "seconds": seconds, "losses": losses}, state_path)
    save_model(model, spec, args.out)
    log = {"steps": step, "batch": args.batch, "seconds": round(seconds, 1),
           "final_loss": round(float(np.mean(losses[-100:])), 3), "lr": args.lr,
           "threads": args.threads, "examples_seen": step * args.batch}
    (CACHE / "train_log.json").write_text(json.dumps(log, indent=2), encoding="utf-8")
    print(log)


def evaluate(args: argparse.Namespace) -> None:
    """Cosine similarity between held-out texts' embeddings and their reconstructions'."""
    from dpsynth.backends.offline.generator import OfflineGenerator

    texts = json.loads((CACHE / "heldout.json").read_text(encoding="utf-8"))[: args.n]
    emb = np.load(CACHE / "heldout.npy")[: args.n]
    embedder = build_embedder(MiniLMConfig(batch_size=128))
    start = time.perf_counter()
    decoded = InversionDecoder(args.out).decode_closest(emb, embedder, args.samples)
    seconds = time.perf_counter() - start
    cos = np.sum(embedder.encode(decoded) * emb, axis=1)
    shuffled = np.sum(embedder.encode(decoded) * np.roll(emb, 1, axis=0), axis=1)
    scorer = OfflineGenerator(seed=0)
    ppl_decoded, ppl_original = scorer.perplexity(decoded), scorer.perplexity(texts)
    result = {"n": len(texts), "samples": args.samples, "cosine_mean": round(float(cos.mean()), 4),
              "cosine_median": round(float(np.median(cos)), 4),
              "cosine_to_other_text_mean": round(float(shuffled.mean()), 4),
              "decode_seconds": round(seconds, 1),
              "perplexity_decoded_quantiles_10_50_90": np.round(
                  np.quantile(ppl_decoded, [0.1, 0.5, 0.9]), 1).tolist(),
              "perplexity_original_quantiles_10_50_90": np.round(
                  np.quantile(ppl_original, [0.1, 0.5, 0.9]), 1).tolist()}
    (CACHE / "evaluate.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(result, indent=2))
    for original, back, c in list(zip(texts, decoded, cos, strict=True))[:8]:
        print(f"[{c:.2f}] {original}\n    -> {back}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--paragraphs", type=int, default=12_000)
    p.add_argument("--sentences", type=int, default=30_000)
    p.add_argument("--seed", type=int, default=20261121)
    t = sub.add_parser("train")
    t.add_argument("--max-minutes", type=float, default=20.0, help="in total, over resumes")
    t.add_argument("--max-steps", type=int, default=2_000)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--prefix", type=int, default=4)
    t.add_argument("--hidden", type=int, default=1024)
    t.add_argument("--max-tokens", type=int, default=48)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("evaluate")
    e.add_argument("--n", type=int, default=200)
    e.add_argument("--samples", type=int, default=0,
                   help="sampled hypotheses besides the greedy one (decode_closest)")
    for q in (t, e):
        q.add_argument("--out", type=Path, default=inversion_dir())
    args = parser.parse_args()
    {"prepare": prepare, "train": train, "evaluate": evaluate}[args.command](args)


if __name__ == "__main__":
    main()
