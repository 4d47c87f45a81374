"""Build the compact public text pool for `backends.generator.name: pool` (at most 20 MB).

Public text only: paragraphs of ../shared/data/public (Wikipedia, Wikinews, Gutenberg) and
IMDB and SST-2 train reviews; each text cut at a sentence end to at most --max-words words.
The sets used as private data in tests and benchmarks are never read. Writes the pool (one
text per line), SOURCES.md (counts and licences) and, unless --no-embed, the pool's MiniLM
embeddings (the file the pool generator reads instead of embedding again) to --out.

    python scripts/build_default_pool.py --out src/dpsynth/assets/pool   # the shipped pool
        [--shared ../shared/data] [--per-source 2000] [--seed 0] [--max-words 120]
        [--no-embed]
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from dpsynth.data.io import read_table
from dpsynth.data.public_text import PUBLIC_SOURCES, public_paragraphs, sentences

ROOT = Path(__file__).resolve().parents[1]
MIN_WORDS = 8
MAX_BYTES = 20_000_000
REVIEWS = {"imdb": "aclImdb v1 train reviews (research use)",
           "sst2": "GLUE SST-2 train snippets (research use)"}
LICENCES = {"wikipedia_en": "CC BY-SA 3.0 / GFDL, attribute Wikipedia contributors",
            "wikinews_en": "CC BY 2.5, attribute Wikinews contributors",
            "gutenberg": "public domain in the US", **REVIEWS}
_TAGS = re.compile(r"<br\s*/?>|\s+")


def cut(text: str, max_words: int) -> str:
    """The text, or its longest run of leading sentences within `max_words` words."""
    text = _TAGS.sub(" ", text).strip()
    if len(text.split()) <= max_words:
        return text
    kept: list[str] = []
    for sentence in sentences(text, 1, max_words):
        if len(" ".join([*kept, sentence]).split()) > max_words:
            break
        kept.append(sentence)
    return " ".join(kept)


def reviews(shared: Path, name: str, n: int, rng: random.Random) -> list[str]:
    texts = [str(t) for t in read_table(shared / name / "train.csv")["text"]]
    return rng.sample(texts, min(n, len(texts)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "default_pool")
    parser.add_argument("--per-source", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-words", type=int, default=120)
    parser.add_argument("--no-embed", action="store_true",
                        help="skip the embeddings (about 12 minutes on 2 CPU cores)")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    n = args.per_source
    paragraphs = public_paragraphs(args.shared, n * len(PUBLIC_SOURCES), args.seed,
                                   min_words=MIN_WORDS)
    if len(paragraphs) != n * len(PUBLIC_SOURCES):
        raise SystemExit(f"a public source has fewer than {n} paragraphs; lower --per-source")
    by_source = {source: paragraphs[i * n:(i + 1) * n]
                 for i, source in enumerate(PUBLIC_SOURCES)}
    by_source |= {name: reviews(args.shared, name, n, rng) for name in REVIEWS}

    lines, counts = [], {}
    for source, texts in by_source.items():
        kept = [t for t in (cut(t, args.max_words) for t in texts)
                if len(t.split()) >= MIN_WORDS]
        counts[source] = len(kept)
        lines += kept
    rng.shuffle(lines)
    body = "\n".join(dict.fromkeys(lines)) + "\n"
    if len(body.encode("utf-8")) > MAX_BYTES:
        raise SystemExit(f"pool is {len(body.encode()) / 1e6:.1f} MB, over the 20 MB limit; "
                         "lower --per-source or --max-words")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "public_pool.txt").write_text(body, encoding="utf-8")
    rows = "\n".join(f"| {s} | {n:,} | {LICENCES[s]} |" for s, n in counts.items())
    (args.out / "SOURCES.md").write_text(
        f"# Default public pool\n\nBuilt by scripts/build_default_pool.py (seed {args.seed}, "
        f"{args.per_source} per source, {MIN_WORDS}-{args.max_words} words, cut at sentence "
        f"ends).\n\n| source | texts | licence |\n|---|---|---|\n{rows}\n", encoding="utf-8")
    print(f"{sum(counts.values()):,} texts, {len(body.encode()) / 1e6:.1f} MB -> {args.out}")
    if not args.no_embed:
        embed(args.out / "public_pool.txt")


def embed(pool: Path) -> None:
    """Store the pool's embeddings beside it, as the pool generator would on first use."""
    from dpsynth.backends import build_embedder
    from dpsynth.backends.config import MiniLMConfig
    from dpsynth.backends.pool.generator import PoolGenerator

    for stale in pool.parent.glob(f"{pool.name}.emb-*.npy"):
        stale.unlink()
    generator = PoolGenerator(pool, build_embedder(MiniLMConfig()))
    print(f"embedded {generator.usage()['pool_texts_embedded']:,} texts")


if __name__ == "__main__":
    main()
