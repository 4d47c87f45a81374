"""Build the universal topic model shipped in src/dpsynth/assets/topics (ctcl §3.2).

Public text only: paragraphs of ../shared/data/public (Wikipedia, Wikinews, Gutenberg),
embedded with the bundled MiniLM, clustered, each topic named by 10 c-TF-IDF keywords.

    python scripts/build_topic_model.py [--shared ../shared/data] [--paragraphs 30000]
        [--topics 200] [--seed 0] [--max-words 80]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dpsynth.backends import build_embedder
from dpsynth.backends.config import MiniLMConfig
from dpsynth.data.public_text import PUBLIC_SOURCES, public_paragraphs
from dpsynth.methods.parts.topics import build_topic_model

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src/dpsynth/assets/topics"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--paragraphs", type=int, default=30_000)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-words", type=int, default=80, help="words of each paragraph "
                        "embedded (MiniLM was trained on 128-token inputs; the cost grows with "
                        "length)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    start = time.perf_counter()
    texts = public_paragraphs(args.shared, args.paragraphs, args.seed)
    embeddings = build_embedder(MiniLMConfig(batch_size=128)).encode(
        [" ".join(t.split()[: args.max_words]) for t in texts])
    model = build_topic_model(texts, embeddings, args.topics, args.seed)
    model.meta.update({"sources": list(PUBLIC_SOURCES), "paragraphs": len(texts),
                       "command": "python scripts/build_topic_model.py "
                                  f"--paragraphs {args.paragraphs} --topics {args.topics} "
                                  f"--seed {args.seed} --max-words {args.max_words}",
                       "seconds": round(time.perf_counter() - start, 1)})
    model.save(args.out)
    print(f"{model.n_topics} topics ({model.meta['method']}, noise "
          f"{model.meta['noise_fraction']:.2f}) from {len(texts)} paragraphs -> {args.out}")
    for i in range(min(5, model.n_topics)):
        print(f"  topic {i}: {', '.join(model.keywords[i])}")


if __name__ == "__main__":
    main()
