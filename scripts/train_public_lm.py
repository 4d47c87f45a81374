"""Train the offline generator: a small conditional LM on public text, shipped with dpsynth.

Steps (each a subcommand; together they reproduce src/dpsynth/assets/public_lm/):

    python scripts/train_public_lm.py prepare [DATA_DIR]   # corpus, keywords, tokenizer, cache
    python scripts/train_public_lm.py train                # resumable, in chunks of <=10 min
    python scripts/train_public_lm.py export               # weights -> package assets
    python scripts/train_public_lm.py evaluate             # held-out perplexity

Continuing a shipped model (same tokenizer, keyword IDF and held-out documents; only
documents past the first run's word budget are trained on):

    python scripts/train_public_lm.py --cache C prepare --continue-from DIR --words-scale 2
    python scripts/train_public_lm.py --cache C train --init-from DIR --lr 5e-4 ...

The corpus is public text only: ../shared/data/public (Wikipedia, Wikinews, Gutenberg) and the
IMDB and SST-2 reviews. The sets used as private data in tests and benchmarks are refused.
Every document gets a condition (kind of document, sentiment label where it has one, TF-IDF
keywords, length) and a quarter of them become fill-in-the-middle examples.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.keywords import KeywordExtractor, terms
from dpsynth.backends.offline.model import (
    KEYWORDS_FILE,
    TOKENIZER_FILE,
    asset_dir,
    build_model,
    load_tokenizer,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_CACHE = REPO / ".cache" / "public_lm"
PRIVATE_SETS = frozenset({"ag_news", "trec", "yelp", "disaster_tweets"})

PUBLIC_SOURCES = {  # folder -> (kind phrase used as the condition's type, words to sample)
    "public/wikipedia_en": ("encyclopedia article", 1_600_000),
    "public/wikinews_en": ("news report", 1_600_000),
    "public/gutenberg": ("fiction", 1_600_000),
    "imdb": ("movie review", 1_600_000),
    "sst2": ("movie review snippet", 200_000),
}
MAX_DOC_WORDS = 140
MIN_DOC_WORDS = 5
HELDOUT_PER_KIND = 300
HELDOUT_MAX_SHARE = 0.05
FIM_RATE = 0.25
VOCAB_SIZE = 8192
CONTEXT = 256

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Doc:
    kind: str
    text: str
    label: str | None = None
    keywords: tuple[str, ...] = ()


# ---------------------------------------------------------------- corpus


def refuse_private(path: Path) -> None:
    """Stop if a path names one of the private benchmark sets."""
    hit = PRIVATE_SETS.intersection(path.parts)
    if hit:
        sys.exit(f"refusing {path}: '{min(hit)}' is a private set of the benchmarks, "
                 "never public training text")


def split_long(text: str) -> Iterator[str]:
    """Pieces of at most MAX_DOC_WORDS words, cut at sentence ends where possible."""
    piece: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        while len(words) > MAX_DOC_WORDS:
            if piece:
                yield " ".join(piece)
                piece = []
            yield " ".join(words[:MAX_DOC_WORDS])
            words = words[MAX_DOC_WORDS:]
        if len(piece) + len(words) > MAX_DOC_WORDS:
            yield " ".join(piece)
            piece = []
        piece.extend(words)
    if piece:
        yield " ".join(piece)


def read_source(data_dir: Path, folder: str) -> list[tuple[str, str | None]]:
    """(text, label) pairs of one public source, cleaned, before sampling."""
    path = data_dir / folder
    refuse_private(path)
    if folder.startswith("public/"):
        rows: list[tuple[str, str | None]] = []
        for part in sorted(path.glob("part-*.txt")):
            rows.extend((fmt.clean(line), None) for line in part.read_text("utf-8").splitlines())
        return rows
    import pandas as pd

    frame = pd.read_csv(path / "train.csv")
    label_names = {"pos": "positive", "neg": "negative"}
    return [(fmt.clean(str(t)), label_names.get(str(lab), str(lab)))
            for t, lab in zip(frame["text"], frame["label"], strict=True)]


def build_corpus(data_dir: Path, rng: random.Random,
                 words_scale: float = 1.0) -> tuple[list[Doc], dict[str, int]]:
    """A seeded sample of each public source, cut into documents of model-sized length, and
    per kind how many of them the budget at `words_scale` 1 takes. The shuffle depends on the
    seed alone, so a larger scale extends each kind's list of the first run past its end."""
    docs: list[Doc] = []
    first: dict[str, int] = {}
    for folder, (kind, budget) in PUBLIC_SOURCES.items():
        rows = read_source(data_dir, folder)
        rng.shuffle(rows)
        words = 0
        for text, label in rows:
            for piece in split_long(text):
                n = fmt.count_words(piece)
                if n >= MIN_DOC_WORDS:
                    docs.append(Doc(kind, piece, label))
                    words += n
            if kind not in first and words >= budget:
                first[kind] = sum(d.kind == kind for d in docs)
            if words >= budget * words_scale:
                break
        first.setdefault(kind, sum(d.kind == kind for d in docs))
        print(f"{folder}: {words:,} words", flush=True)
    return docs, first


def split_heldout(docs: list[Doc], first: dict[str, int],
                  fresh_only: bool) -> tuple[list[Doc], list[Doc]]:
    """(held-out, train). Held out: the head of each kind's first-run documents, the same for
    any `words_scale`. Train: the rest of them, or with `fresh_only` the documents past the
    first run's budget, never a text equal to a held-out one."""
    by_kind: dict[str, list[Doc]] = {}
    for d in docs:
        by_kind.setdefault(d.kind, []).append(d)
    cut = {k: min(HELDOUT_PER_KIND, math.ceil(HELDOUT_MAX_SHARE * first[k])) for k in by_kind}
    heldout = [d for k, kind_docs in by_kind.items() for d in kind_docs[: cut[k]]]
    start = first if fresh_only else cut
    seen = {d.text for d in heldout}
    train = [d for k, kind_docs in by_kind.items() for d in kind_docs[start[k] :]
             if d.text not in seen]
    assert seen.isdisjoint(d.text for d in train), "a held-out text is in the training set"
    dropped = sum(len(v) - start[k] for k, v in by_kind.items()) - len(train)
    print(f"held out {len(heldout):,} documents; {dropped} training copies of them dropped",
          flush=True)
    return heldout, train


def fit_keywords(docs: list[Doc]) -> KeywordExtractor:
    """Public IDF table (scikit-learn) over the training documents, rare and common terms cut."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer=terms, min_df=5, max_df=0.2, max_features=30_000)
    vec.fit(d.text for d in docs)
    idf = {t: round(float(vec.idf_[i]), 4) for t, i in vec.vocabulary_.items()}
    return KeywordExtractor(idf)


def train_tokenizer(docs: list[Doc]):
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator((d.text for d in docs), vocab_size=VOCAB_SIZE, min_frequency=2,
                            special_tokens=list(fmt.SPECIAL_TOKENS), show_progress=False)
    return tok


# ---------------------------------------------------------------- examples


def sample_fields(doc: Doc, rng: random.Random) -> fmt.Fields:
    """The doc's condition with fields dropped at random, so any subset works at inference.

    Documents without a label sometimes carry their top keyword as label, so the label
    field also learns topical labels, not only sentiment."""
    if rng.random() < 0.05:
        return fmt.Fields()
    pool = list(doc.keywords)
    label = doc.label if doc.label and rng.random() < 0.9 else None
    if label is None and doc.label is None and pool and rng.random() < 0.25:
        label = pool.pop(0)
    keywords: tuple[str, ...] = ()
    if pool and rng.random() < 0.75:
        keywords = tuple(rng.sample(pool, min(len(pool), rng.randint(1, 6))))
    return fmt.Fields(kind=doc.kind if rng.random() < 0.85 else None, label=label,
                      keywords=keywords,
                      length=fmt.count_words(doc.text) if rng.random() < 0.85 else None)


def mask_for_infill(n: int, rng: random.Random) -> list[bool]:
    """Which words to hide: mostly 1-3 spans (10-50% of the words); sometimes single words
    hidden independently (15-50% each), as dpga-textsyn's fill mutation does."""
    if rng.random() < 0.3:
        p = rng.uniform(0.15, 0.5)
        mask = [rng.random() < p for _ in range(n)]
        return mask if any(mask) else [True, *mask[1:]]
    k = rng.choices((1, 2, 3), weights=(0.5, 0.3, 0.2))[0]
    hidden = max(k, round(rng.uniform(0.1, 0.5) * n))
    return fmt.random_spans(n, hidden, k, rng)


def to_sequence(doc: Doc, rng: random.Random) -> str:
    fields = sample_fields(doc, rng)
    words = doc.text.split(" ")
    if len(words) >= 8 and rng.random() < FIM_RATE:
        masked, spans = fmt.hide(words, mask_for_infill(len(words), rng))
        return fmt.infill_sequence(fields, masked, spans)
    return fmt.document_sequence(fields, doc.text)


def pack(ids: list[list[int]], eos: int, rng: random.Random) -> np.ndarray:
    """Greedy packing of whole sequences into CONTEXT-token rows padded with -1."""
    order = list(range(len(ids)))
    rng.shuffle(order)
    rows, row = [], []
    for i in order:
        seq = ids[i][:CONTEXT]
        if len(row) + len(seq) > CONTEXT:
            rows.append(row + [-1] * (CONTEXT - len(row)))
            row = []
        row = row + seq
    if row:
        rows.append(row + [-1] * (CONTEXT - len(row)))
    return np.asarray(rows, dtype=np.int32)


# ---------------------------------------------------------------- commands


def prepare(args: argparse.Namespace) -> None:
    """The training rows and held-out documents. With `continue_from` (a model folder), its
    tokenizer and keyword IDF are kept and only documents new to it are trained on."""
    import shutil

    data_dir, cache = Path(args.data_dir), Path(args.cache)
    refuse_private(data_dir)
    cache.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    base = getattr(args, "continue_from", None)
    docs, first = build_corpus(data_dir, rng, getattr(args, "words_scale", 1.0))
    heldout, train = split_heldout(docs, first, fresh_only=base is not None)
    if base is None:
        extractor = fit_keywords(train)
        extractor.save(cache / KEYWORDS_FILE)
        train_tokenizer(train).save(str(cache / TOKENIZER_FILE))
    else:
        for name in (TOKENIZER_FILE, KEYWORDS_FILE):
            shutil.copy(Path(base) / name, cache / name)
        extractor = KeywordExtractor.load(cache / KEYWORDS_FILE)
    for d in heldout + train:
        d.keywords = extractor.top(d.text)
    tok = load_tokenizer(cache)
    sequences = [to_sequence(d, rng) for d in train]
    ids = [e.ids for e in tok.encode_batch(sequences)]
    rows = pack(ids, tok.token_to_id(fmt.EOS), rng)
    np.save(cache / "rows.npy", rows)
    (cache / "heldout.jsonl").write_text(
        "".join(json.dumps(asdict(d)) + "\n" for d in heldout), encoding="utf-8")
    stats = {"documents": len(train), "heldout_documents": len(heldout),
             "first_run_documents": sum(first.values()) - len(heldout),
             "words": sum(fmt.count_words(d.text) for d in train),
             "tokens": int((rows >= 0).sum()), "rows": len(rows),
             "fim_sequences": sum(fmt.FILL in s for s in sequences),
             "tokens_per_word": round(sum(map(len, ids)) / sum(
                 fmt.count_words(d.text) for d in train), 3)}
    (cache / "corpus.json").write_text(json.dumps(stats, indent=1), encoding="utf-8")
    print(json.dumps(stats), flush=True)
    print("example:", sequences[0][:300], flush=True)


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Warm-up, a constant peak, then linear decay to a tenth of the peak over the last
    `decay_frac` of the steps. Past rates do not depend on max_steps until the decay starts,
    so a run may be lengthened or shortened before then and stay reproducible."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    decay_start = args.max_steps * (1 - args.decay_frac)
    if step < decay_start:
        return args.lr
    frac = min(1.0, (step - decay_start) / max(1.0, args.max_steps - decay_start))
    return args.lr * (1 - 0.9 * frac)


def batches(rows: np.ndarray, batch: int, seed: int, epoch: int, index: int):
    """(epoch, next index, rows) in a seeded order per epoch, from a saved position."""
    while True:
        order = np.random.default_rng(seed + epoch).permutation(len(rows))
        while index + batch <= len(order):
            yield epoch, index + batch, rows[order[index : index + batch]]
            index += batch
        epoch, index = epoch + 1, 0


def save_atomic(obj: dict, path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def arch(args: argparse.Namespace) -> dict[str, int]:
    """Model shape from the train arguments (defaults for checkpoints that predate them)."""
    return {"n_layer": getattr(args, "n_layer", 4), "n_embd": getattr(args, "n_embd", 256),
            "n_head": getattr(args, "n_head", 4)}


def load_weights(model, folder: Path) -> None:
    """Start from a model folder's weights (float16 in the package, trained on in float32);
    its shape and vocabulary must be the ones being trained."""
    import torch
    from safetensors.torch import load_file

    shape = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    for key in ("vocab_size", "n_layer", "n_embd", "n_head", "n_positions"):
        if shape[key] != getattr(model.config, key):
            sys.exit(f"--init-from {folder}: {key} is {shape[key]}, the run's is "
                     f"{getattr(model.config, key)}")
    weights = {k: v.to(torch.float32) for k, v in load_file(str(folder / "model.safetensors"))
               .items()}
    model.load_state_dict(weights, strict=True)


def train(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    rows = np.load(cache / "rows.npy")
    tok = load_tokenizer(cache)
    torch.manual_seed(args.seed)
    model = build_model(tok.get_vocab_size(), tok.token_to_id(fmt.EOS), n_positions=CONTEXT,
                        **arch(args))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.1)
    ckpt_path = cache / "checkpoint.pt"
    state = {"step": 0, "epoch": 0, "index": 0, "tokens": 0, "seconds": 0.0}
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["torch_rng"])
        state = ckpt["state"]
        print(f"resumed at step {state['step']}", flush=True)
    elif args.init_from:
        load_weights(model, Path(args.init_from))
        print(f"initialised from {args.init_from}", flush=True)
    model.train()
    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))  # finish step, save, exit
    data = batches(rows, args.batch, args.seed, state["epoch"], state["index"])
    log = (cache / "train.log").open("a", encoding="utf-8")
    chunks = 0
    while state["step"] < args.max_steps and (args.max_chunks == 0 or chunks < args.max_chunks):
        chunk_start = time.time()
        window_loss, window_tokens, window_start = 0.0, 0, time.time()
        deadline = chunk_start + args.chunk_minutes * 60
        while state["step"] < args.max_steps and time.time() < deadline and not stop["asked"]:
            epoch, index, batch = next(data)
            ids = torch.from_numpy(batch.astype(np.int64))
            valid = ids >= 0
            labels = ids.masked_fill(~valid, -100)
            inputs = ids.masked_fill(~valid, 0)
            for group in opt.param_groups:
                group["lr"] = lr_at(state["step"], args)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=inputs, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            n = int(valid.sum())
            state.update(step=state["step"] + 1, epoch=epoch, index=index,
                         tokens=state["tokens"] + n)
            window_loss += float(loss.detach()) * n
            window_tokens += n
            if state["step"] % 25 == 0:
                dt = time.time() - window_start
                line = (f"step {state['step']} loss {window_loss / window_tokens:.3f} "
                        f"lr {lr_at(state['step'], args):.2e} tok/s {window_tokens / dt:.0f} "
                        f"tokens {state['tokens']:,} {time.strftime('%H:%M:%S')}")
                print(line, flush=True)
                log.write(line + "\n")
                log.flush()
                window_loss, window_tokens, window_start = 0.0, 0, time.time()
        state["seconds"] += time.time() - chunk_start
        save_atomic({"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "torch_rng": torch.get_rng_state(), "state": state,
                     "args": vars(args)}, ckpt_path)
        chunks += 1
        print(f"checkpoint at step {state['step']} ({state['seconds'] / 60:.1f} min)",
              flush=True)
        if stop["asked"]:
            return


def export(args: argparse.Namespace) -> None:
    import shutil

    import torch

    cache, out = Path(args.cache), Path(args.out)
    ckpt = torch.load(cache / "checkpoint.pt", weights_only=False)
    tok = load_tokenizer(cache)
    model = build_model(tok.get_vocab_size(), tok.token_to_id(fmt.EOS), n_positions=CONTEXT,
                        **arch(argparse.Namespace(**ckpt["args"])))
    model.load_state_dict(ckpt["model"])
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out, safe_serialization=True)
    for name in (TOKENIZER_FILE, KEYWORDS_FILE):
        shutil.copy(cache / name, out / name)
    state = ckpt["state"]
    training = {"steps": state["step"], "tokens_seen": state["tokens"],
                "train_seconds": round(state["seconds"]), "batch_rows": ckpt["args"]["batch"],
                "context": CONTEXT, "peak_lr": ckpt["args"]["lr"], "seed": ckpt["args"]["seed"],
                "parameters": sum(p.numel() for p in model.parameters()),
                "init_from": ckpt["args"].get("init_from"),
                "corpus": json.loads((cache / "corpus.json").read_text(encoding="utf-8"))}
    (cache / "training.json").write_text(json.dumps(training, indent=1), encoding="utf-8")
    print(json.dumps(training), flush=True)


def evaluate(args: argparse.Namespace) -> None:
    """Perplexity of held-out public documents per kind, given their condition and without:
    per token of this tokenizer, and per word (comparable across tokenizers)."""
    from dpsynth.backends.offline.generator import OfflineGenerator

    gen = OfflineGenerator(model_dir=args.out, batch_size=32)
    docs = [Doc(**json.loads(line)) for line in
            (Path(args.cache) / "heldout.jsonl").read_text(encoding="utf-8").splitlines()]
    report: dict[str, dict[str, float]] = {}
    totals = np.zeros(3)  # nll without condition, tokens, words
    for kind in dict.fromkeys(d.kind for d in docs):
        picked = [d for d in docs if d.kind == kind][: args.per_kind]
        texts = [d.text for d in picked]
        words = sum(fmt.count_words(t) for t in texts)
        conds = [fmt.Fields(kind=d.kind, label=d.label, keywords=d.keywords[:4],
                            length=fmt.count_words(d.text)) for d in picked]
        plain_nll, tokens = (float(x.sum()) for x in gen._nll(texts))
        cond_nll = float(gen._nll(texts, conds)[0].sum())
        report[kind] = {"documents": len(texts), "tokens": int(tokens), "words": words,
                        "token_ppl": math.exp(plain_nll / tokens),
                        "token_ppl_given_condition": math.exp(cond_nll / tokens),
                        "word_ppl": math.exp(plain_nll / words),
                        "word_ppl_given_condition": math.exp(cond_nll / words)}
        totals += (plain_nll, tokens, words)
    report["all"] = {"documents": sum(r["documents"] for r in report.values()),
                     "token_ppl": math.exp(totals[0] / totals[1]),
                     "word_ppl": math.exp(totals[0] / totals[2])}
    (Path(args.cache) / "eval.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(json.dumps(report, indent=1), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=str(DEFAULT_CACHE),
                        help="work folder for the tokenized corpus and checkpoints")
    parser.add_argument("--seed", type=int, default=20261120)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("data_dir", nargs="?", default=str(DEFAULT_DATA))
    p.add_argument("--continue-from", default=None, help="a model folder whose tokenizer and "
                   "keyword IDF to keep; train only on documents its run did not sample")
    p.add_argument("--words-scale", type=float, default=1.0, help="sample this many times "
                   "each source's word budget (with --continue-from: the new part is trained)")
    t = sub.add_parser("train")
    t.add_argument("--max-steps", type=int, default=3000)
    t.add_argument("--batch", type=int, default=16, help="rows of CONTEXT tokens per step")
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--decay-frac", type=float, default=0.25)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--init-from", default=None, help="start from this model folder's weights "
                   "(a fresh optimizer and schedule) instead of at random")
    t.add_argument("--n-layer", type=int, default=4)
    t.add_argument("--n-embd", type=int, default=256)
    t.add_argument("--n-head", type=int, default=4)
    t.add_argument("--chunk-minutes", type=float, default=9.0,
                   help="save a checkpoint at least this often (resume from it any time)")
    t.add_argument("--max-chunks", type=int, default=0, help="stop after this many chunks "
                   "(0: until max-steps); rerun the same command to continue")
    for name in ("export", "evaluate"):
        e = sub.add_parser(name)
        e.add_argument("--out", default=str(asset_dir()))
        if name == "evaluate":
            e.add_argument("--per-kind", type=int, default=200,
                           help="held-out documents scored per kind of document")
    args = parser.parse_args()
    {"prepare": prepare, "train": train, "export": export, "evaluate": evaluate}[args.command](
        args)


if __name__ == "__main__":
    main()
