"""How often SmolLM2 does what each generator operation asks, on public text, before and after
the prompt set and output cleaning written for it (issue 41, part 3).

    python benchmarks/smollm_on_task.py [--n 50] [--seed 0] [--samples FILE] [--dpga]
        [--temperature T] [--top-p P] [--documents]

Before: the generic prompt set, the model's reply as it comes (stripped), as the hf backend
returns it, at hf's default sampling (temperature 1, top-p 1); then the same at smollm's
default sampling, to tell the two changes apart. After: the smollm generator as shipped
(the small prompt set, cleaning, failed replies resampled within its bound, blanks filled by
continuation). Inputs are public: ag_news' label names and IMDB test
reviews (first sentences), the reviews' labels named "positive/negative movie review"; with
`--documents` every condition also carries its kind of document, as a run with `data.document`
sends it ("news article" for the topics, "movie review" for the reviews, whose labels then
say only what the review thinks of the film). An
output is on task when `on_task` says so; its rule was checked by reading the outputs
written to --samples. `--dpga` asks the shipped generator only, with the inputs shaped as
dpga's operators send them: fill blanks each word with probability DpgaParams.fill_mask_rate
(runs of blanks merged, `mask_words`), not one word in five.
"""

from __future__ import annotations

import argparse
import os
import random
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "data" / "imdb" / "test.csv"
TOPICS = ("World", "Sports", "Business", "Sci/Tech", "positive movie review",
          "negative movie review")
REVIEW = {"neg": "negative movie review", "pos": "positive movie review"}
DOCUMENT = {**dict.fromkeys(TOPICS[:4], "news article"),
            **dict.fromkeys(REVIEW.values(), "movie review")}
ABOUT = {"negative movie review": "a film the writer disliked",
         "positive movie review": "a film the writer liked"}
META = re.compile(
    r"<\|im_|\b(?:i'?m sorry|as an ai|i can(?:no|')t|here(?:'s| is| are)\b|i hope|let me know|"
    r"feel free|rewritten|the (?:above|original|following|given) text|fill(?:ed)? in|"
    r"blanks?\b|sure[!,]|certainly[!,]|what (?:is|would) your|please provide|"
    r"i'?m (?:ready|happy|glad) to)", re.IGNORECASE)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def on_task(op: str, output: str, source: str | list[str], target: int) -> bool:
    """The rule: a text of roughly the asked length, with no talk about the task, that keeps
    to its input (fill keeps the unmasked words and leaves no blank; rewrite and crossover
    share words with their inputs without copying one)."""
    out = words(output)
    if not out or META.search(output) or not 0.3 * target <= len(out) <= 2.5 * target:
        return False
    if len(out) >= 10 and len(set(out)) < 0.3 * len(out):  # stuck in a loop
        return False
    if op == "generate":
        return True
    sources = source if isinstance(source, list) else [source]
    if any(output.strip() == s.strip() for s in sources):
        return False
    if op == "fill":
        if " _ " in f" {output} ":
            return False
        kept = [w for w in words(source.replace("_", " ")) if w]
        return sum(w in set(out) for w in kept) >= 0.6 * len(kept)
    shared = set(out) & set(w for s in sources for w in words(s))
    return len(shared) >= 0.2 * min(len(set(out)), 30)


def inputs(n: int, rng: random.Random, mask_rate: float | None = None,
           documents: bool = False):
    import pandas as pd

    from dpsynth.backends.base import Condition

    def condition(label: str, length: int) -> Condition:
        if not documents:
            return Condition(label=label, length=length)
        return Condition(label=ABOUT.get(label, label), length=length, text=DOCUMENT[label])

    reviews = pd.read_csv(PUBLIC).sample(n=4 * n, random_state=0)
    snippets = []
    for text, label in zip(reviews["text"], reviews["label"], strict=True):
        sentences = re.split(r"(?<=[.!?])\s+", text.replace("<br />", " "))
        snippet = " ".join(sentences[:2])
        if 12 <= len(snippet.split()) <= 50:
            snippets.append((snippet, REVIEW[label]))
    snippets = snippets[:2 * n]
    gen = [condition(TOPICS[i % len(TOPICS)], length=(20, 40, 60)[i % 3])
           for i in range(n)]
    rewrite = [(t, condition(y, length=len(t.split()))) for t, y in snippets[:n]]
    fill = []
    masks = np.random.default_rng(0)
    for text, label in snippets[:n]:
        tokens = text.split()
        if mask_rate is None:
            for i in rng.sample(range(1, len(tokens)), max(1, len(tokens) // 5)):
                tokens[i] = "_"
            masked = " ".join(tokens)
        else:
            from dpsynth.methods.parts.toolbox import mask_words

            masked = mask_words(text, mask_rate, masks)
        fill.append((masked, condition(label, length=len(tokens))))
    pairs = [(snippets[i][0], snippets[i + 1][0]) for i in range(0, 2 * n - 1, 2)]
    cross = [([a, b], condition(snippets[2 * i][1],
                                length=(len(a.split()) + len(b.split())) // 2))
             for i, (a, b) in enumerate(pairs)]
    return gen, rewrite, fill, cross


def run(generator, raw: bool, data) -> dict[str, list[tuple[object, str, int]]]:
    """Each operation's (input, output, target words); `raw`: the replies before cleaning."""
    gen, rewrite, fill, cross = data
    p = generator.prompts
    results = {}
    plans = {
        "generate": ([None] * len(gen), gen, [p.generate(c) for c in gen],
                     lambda: generator.generate(gen)),
        "rewrite": ([t for t, _ in rewrite], [c for _, c in rewrite],
                    [p.rewrite(t, c, 0.5) for t, c in rewrite],
                    lambda: generator.rewrite([t for t, _ in rewrite], [c for _, c in rewrite])),
        "fill": ([t for t, _ in fill], [c for _, c in fill], [p.fill(t, c) for t, c in fill],
                 lambda: generator.fill([t for t, _ in fill], [c for _, c in fill])),
        "crossover": ([g for g, _ in cross], [c for _, c in cross],
                      [p.crossover(g, c) for g, c in cross],
                      lambda: generator.crossover([g for g, _ in cross], [c for _, c in cross])),
    }
    for op, (sources, conditions, prompts, served) in plans.items():
        outputs = [r.strip() for r in generator.replies(prompts)] if raw else served()
        results[op] = [(s, o, c.length) for s, o, c in zip(sources, outputs, conditions,
                                                            strict=True)]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=Path, default=None)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--documents", action="store_true", help="conditions carry their kind "
                        "of document, as a run with data.document sends them")
    parser.add_argument("--dpga", action="store_true", help="the shipped generator only, on "
                        "inputs shaped as dpga's operators send them")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from dpsynth.backends.config import SmolLMConfig
    from dpsynth.backends.generators.prompt_sets import load_prompt_set
    from dpsynth.backends.smollm.generator import SmolLMGenerator

    print(f"load at start: {os.getloadavg()}", flush=True)
    from dpsynth.methods.dpga import DpgaParams

    data = inputs(args.n, random.Random(args.seed),
                  DpgaParams().fill_mask_rate if args.dpga else None, args.documents)
    sampling = {"temperature": args.temperature, "top_p": args.top_p}
    cfg = SmolLMConfig(seed=args.seed, **{k: v for k, v in sampling.items() if v is not None})
    shipped = SmolLMGenerator(load_prompt_set(cfg.prompt_set()), cfg)
    generic = load_prompt_set("generic")
    old = cfg.model_copy(update={"temperature": 1.0, "top_p": 1.0})  # hf's defaults
    runs = {"dpga's operators: smollm as shipped, fill masking as dpga does":
            run(shipped, False, data)} if args.dpga else {
        "before: generic prompts, raw reply, T 1.0 / top-p 1.0":
            run(SmolLMGenerator(generic, old, engine=shipped.engine), True, data),
        f"generic prompts, raw reply, T {cfg.temperature} / top-p {cfg.top_p}":
            run(SmolLMGenerator(generic, cfg, engine=shipped.engine), True, data),
        "after: smollm as shipped (small prompts, cleaning, resampling, fill by continuation)":
            run(shipped, False, data),
    }
    print("| operation | " + " | ".join(runs) + " |")
    print("|---" * (len(runs) + 1) + "|")
    for op in ("generate", "rewrite", "fill", "crossover"):
        rates = []
        for results in runs.values():
            hits = [on_task(op, o, s, t) for s, o, t in results[op]]
            rates.append(f"{sum(hits) / len(hits):.0%} ({sum(hits)}/{len(hits)})")
        print(f"| {op} | " + " | ".join(rates) + " |")
    print(f"after: {shipped.usage()}")
    print(f"load at end: {os.getloadavg()}")
    if args.samples:
        with args.samples.open("w") as out:
            for name, results in runs.items():
                for op, rows in results.items():
                    for s, o, t in rows:
                        verdict = "ON " if on_task(op, o, s, t) else "OFF"
                        out.write(f"[{name[:12]}] {op} {verdict} target={t}\n  IN: {s!r}\n"
                                  f"  OUT: {o!r}\n")


if __name__ == "__main__":
    main()
