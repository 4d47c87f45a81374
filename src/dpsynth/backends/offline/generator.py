"""`OfflineGenerator`: the dpsynth default generator, a small conditional LM run on this machine.

The four operations map onto the two things the model was trained to do, "condition ->
document" and fill-in-the-middle:

- generate: the condition's fields, then the document.
- rewrite: hide about `strength` of the words in 1-3 runs and fill them in under the
  condition (strength 1 writes a new text under the condition).
- fill: each run of `_` blanks becomes one blank; the number of `_` marks is its length.
- crossover: the child's condition joins the given condition with the top TF-IDF keywords of
  every parent (public IDF table), its length is the parents' mean, and it starts with the
  first 30% of the first parent's words; the model writes the rest.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpsynth.backends.base import Condition, Generator
from dpsynth.backends.fingerprint import folder_digest
from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.keywords import KeywordExtractor
from dpsynth.backends.offline.model import (
    KEYWORDS_FILE,
    asset_dir,
    load_tokenizer,
)
from dpsynth.backends.offline.sampling import (
    Request,
    Segment,
    TokenClasses,
    sample,
    sample_reference,
)
from dpsynth.errors import InputError

LENGTH_SLACK = 0.25
"""Each text (or filled span) ends between (1 - slack) and (1 + slack) times its target."""
DEFAULT_BLANK_WORDS = 1
"""Words per `_` mark when filling blanks, as in dpga-textsyn's word-level fill mutation."""
CROSSOVER_PREFIX = 0.3
CROSSOVER_KEYWORDS_PER_PARENT = 3
MAX_KEYWORDS = 6
LABEL_GUIDANCE = 2.0
"""Classifier-free guidance on the label in `generate` (1: plain sampling). At 2 an SST-2
classifier tells positive- from negative-conditioned texts 68% of the time, against 52%
without guidance (100 texts each, 30 words); it doubles the cost of labelled generation.
With `guide_keywords` the contrast drops the keywords too, so guidance stresses the whole
condition (CTCL's topic keywords: see LmTrainingParams.guidance)."""


ENGINES = ("fast", "int8", "reference")
"""How the offline LM samples: "fast" (`sampling.sample`: length-bucketed batches, rows leave
the batch as they finish, contrast rows only for guided requests, one output projection per
guided pair), "int8" (the same on int8 dynamic-quantised projections: faster, a slightly
different model; held-out perplexity in benchmarks/offline_generator_speed.py) or
"reference" (`sampling.sample_reference`, the plain loop; the same distribution as "fast",
for benchmarks and tests)."""


def _size(request: Request) -> tuple[float, int]:
    """Sort key of a request: the words it may write, then its prompt length."""
    words = sum(min(s.max_words, 4 * s.target, 10_000) for s in request.segments)
    return (words, len(request.prompt))


def use_available_cores() -> int:
    """Set PyTorch's intra-op threads to the CPU cores this process may use (a container's
    affinity can be far below the host's core count that PyTorch sees), unless the user
    chose a count with OMP_NUM_THREADS. Returns the thread count."""
    import torch

    if "OMP_NUM_THREADS" not in os.environ and hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
        if torch.get_num_threads() > cores:
            torch.set_num_threads(cores)
    return torch.get_num_threads()


def _budget(target: int | None) -> Segment:
    if target is None:
        return Segment()
    target = max(1, target)
    return Segment(min_words=max(1, math.floor(target * (1 - LENGTH_SLACK))), target=target,
                   max_words=max(target + 1, math.ceil(target * (1 + LENGTH_SLACK))))


class OfflineGenerator(Generator):
    """Generator on the shipped public LM (or any folder written by train_public_lm.py).

    Sampling is seeded: the same seed and the same sequence of calls give the same texts."""

    is_remote = False

    def __init__(self, model_dir: str | Path | None = None, *, temperature: float = 1.0,
                 top_p: float = 0.95, seed: int | None = None, batch_size: int = 64,
                 label_guidance: float = LABEL_GUIDANCE, guide_keywords: bool = False,
                 engine: str = "fast") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from transformers import GPT2LMHeadModel
        except ImportError:
            raise InputError("the offline generator needs the 'local' extra: "
                             "pip install -c constraints.txt 'dpsynth[local]'") from None
        folder = Path(model_dir) if model_dir is not None else asset_dir()
        if not (folder / "config.json").is_file():
            raise InputError(f"model_dir: {folder} holds no offline LM (config.json missing); "
                             "train one with scripts/train_public_lm.py")
        if temperature < 0 or not 0 < top_p <= 1:
            raise InputError(f"temperature={temperature}, top_p={top_p}: need temperature >= 0 "
                             "and 0 < top_p <= 1")
        if engine not in ENGINES:
            raise InputError(f"engine={engine!r}: one of {', '.join(ENGINES)}")
        self.model_dir = folder
        self.engine = engine
        self.temperature, self.top_p, self.batch_size = temperature, top_p, batch_size
        self.label_guidance, self.guide_keywords = label_guidance, guide_keywords
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**63)
        self._identity = {"backend": "offline", "model": folder_digest(folder),
                          "temperature": temperature, "top_p": top_p,
                          "label_guidance": label_guidance, "guide_keywords": guide_keywords,
                          "engine": engine, "seed": seed}
        self._calls = 0
        self.tokenizer = load_tokenizer(folder)
        self.model = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
        use_available_cores()
        self.context = int(self.model.config.n_positions)
        self.classes = TokenClasses(self.tokenizer)
        kw_path = folder / KEYWORDS_FILE
        self.keywords = KeywordExtractor.load(kw_path) if kw_path.is_file() else None

    def identity(self) -> dict[str, object]:
        """The folder's content digest and every setting that changes what is sampled; the
        seed as given (None when unseeded, as for the hf generator)."""
        return dict(self._identity)

    # ------------------------------------------------------------ plumbing

    def _rngs(self):
        """A torch and a Python RNG for one call, derived from the seed and the call count."""
        import torch

        self._calls += 1
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + self._calls) % 2**63)
        return gen, random.Random(f"{self.seed}:{self._calls}")

    def state_dict(self) -> dict[str, int]:
        """The call count that keys each call's randomness: checkpointed so that a resumed
        run samples what an uninterrupted one would have."""
        return {"calls": self._calls}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._calls = int(state["calls"])

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def _run(self, requests: list[Request], gen) -> list[list[str]]:
        """Decoded segments for each request, sampled in batches of similar lengths (prompt
        and words to write), so that a batch's rows finish close together."""
        if self.engine == "reference":  # the plain path, in the given order
            order, draw = list(range(len(requests))), sample_reference
        else:
            order, draw = sorted(range(len(requests)), key=lambda i: _size(requests[i])), sample
        decoded: list[list[str] | None] = [None] * len(requests)
        for start in range(0, len(order), self.batch_size):
            part = order[start : start + self.batch_size]
            ids = draw(self.model, self.classes, [requests[i] for i in part],
                       temperature=self.temperature, top_p=self.top_p, generator=gen,
                       context=self.context, guidance=self.label_guidance,
                       **({"int8": True} if self.engine == "int8" else {}))
            for i, row in zip(part, ids, strict=True):
                decoded[i] = [fmt.clean(self.tokenizer.decode(s)) for s in row]
        return decoded  # type: ignore[return-value]

    def _fit(self, prompt: str, reserve: int) -> list[int]:
        """Prompt ids, cut from the left when the prompt and `reserve` new tokens overflow."""
        ids = self._encode(prompt)
        room = max(self.context // 2, self.context - reserve)  # a prompt keeps half at least
        return ids[-room:]

    def _reserve(self, words: int | None) -> int:
        """Tokens to leave for `words` new words (about 1.4 tokens a word, with room)."""
        return self.context // 2 if words is None else int(1.8 * words) + 8

    @staticmethod
    def _fields(cond: Condition, length: int | None = None,
                extra_keywords: Sequence[str] = ()) -> fmt.Fields:
        keywords = tuple(dict.fromkeys([*cond.keywords, *extra_keywords]))[:MAX_KEYWORDS]
        return fmt.Fields(kind=cond.text, label=cond.label, keywords=keywords,
                          length=cond.length if cond.length is not None else length)

    @staticmethod
    def _check_pairs(name: str, items: Sequence, conditions: Sequence[Condition]) -> None:
        if len(items) != len(conditions):
            raise InputError(f"{name}: {len(items)} inputs but {len(conditions)} conditions; "
                             "give one condition per input")

    # ------------------------------------------------------------ operations

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        gen, _ = self._rngs()
        requests = []
        for cond in conditions:
            fields = self._fields(cond)
            reserve = self._reserve(cond.length)
            contrast = None
            if cond.label or (self.guide_keywords and fields.keywords):
                # guidance stresses what the label (and, if asked, the keywords) change
                kept = () if self.guide_keywords else fields.keywords
                unguided = fmt.Fields(fields.kind, None, kept, fields.length)
                contrast = self._fit(fmt.generation_prompt(unguided), reserve)
            requests.append(Request(self._fit(fmt.generation_prompt(fields), reserve),
                                    (_budget(cond.length),), contrast=contrast))
        return [segs[0] for segs in self._run(requests, gen)]

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        self._check_pairs("rewrite", texts, conditions)
        if not 0 <= strength <= 1:
            raise InputError(f"strength={strength}: must lie in [0, 1]")
        gen, rng = self._rngs()
        out: list[str | None] = [None] * len(texts)
        fresh, infills = [], []
        for i, (text, cond) in enumerate(zip(texts, conditions, strict=True)):
            words = fmt.clean(text).split()
            hidden = round(strength * len(words))
            if not words or strength >= 1 or hidden >= len(words):
                length = cond.length or len(words) or None
                fresh.append((i, Condition(cond.label, cond.keywords, length, cond.text)))
            elif hidden == 0:
                out[i] = fmt.clean(text)
            else:
                k = 1 if hidden < 4 else rng.choice((1, 2, 3))
                masked, spans = fmt.hide(words, fmt.random_spans(len(words), hidden, k, rng))
                infills.append((i, masked, [len(s.split()) for s in spans],
                                self._fields(cond, length=len(words))))
        self._infill(infills, gen, out)
        if fresh:
            for (i, _), text in zip(fresh, self.generate([c for _, c in fresh]), strict=True):
                out[i] = text
        return [t if t is not None else "" for t in out]

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        self._check_pairs("fill", masked_texts, conditions)
        gen, _ = self._rngs()
        out: list[str | None] = [None] * len(masked_texts)
        jobs = []
        for i, (text, cond) in enumerate(zip(masked_texts, conditions, strict=True)):
            words = fmt.masked_words(text)
            mask = [w == fmt.BLANK_TOKEN for w in words]
            if not any(mask):
                out[i] = fmt.clean(text)
                continue
            masked, runs = fmt.hide(words, mask)
            sizes = [DEFAULT_BLANK_WORDS * len(r.split()) for r in runs]
            jobs.append((i, masked, sizes, self._fields(cond, length=len(words))))
        self._infill(jobs, gen, out)
        return [t if t is not None else "" for t in out]

    def _infill(self, jobs, gen, out: list[str | None]) -> None:
        """Fill the blank tokens of each job's words, one span per blank, into `out`."""
        if not jobs:
            return
        requests, edges = [], []
        for _, masked, sizes, fields in jobs:
            head, middle, tail = self._window(fields, masked, self._reserve(sum(sizes)))
            prompt = fmt.infill_prompt(fields, middle)
            requests.append(Request(self._fit(prompt, self._reserve(sum(sizes))),
                                    tuple(_budget(n) for n in sizes), fill=True))
            edges.append((head, middle, tail))
        for (i, *_), (head, middle, tail), spans in zip(jobs, edges, self._run(requests, gen),
                                                        strict=True):
            out[i] = " ".join([*head, fmt.merge_spans(middle, spans), *tail])

    def _window(self, fields: fmt.Fields, masked: list[str], reserve: int):
        """(head, middle, tail) of a masked text: when the prompt would not fit the context,
        kept words before the first and after the last blank move out of the prompt (they
        stay in the text as they are)."""
        first = masked.index(fmt.BLANK_TOKEN)
        last = len(masked) - 1 - masked[::-1].index(fmt.BLANK_TOKEN)
        lo, hi = 0, len(masked)
        while True:
            size = len(self._encode(fmt.infill_prompt(fields, masked[lo:hi])))
            if size + reserve <= self.context or (lo == first and hi == last + 1):
                return masked[:lo], masked[lo:hi], masked[hi:]
            step = max(1, (size + reserve - self.context) // 2)
            if first - lo >= hi - 1 - last:
                lo = min(first, lo + step)
            else:
                hi = max(last + 1, hi - step)

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        self._check_pairs("crossover", parent_groups, conditions)
        gen, _ = self._rngs()
        requests, prefixes = [], []
        for g, (parents, cond) in enumerate(zip(parent_groups, conditions, strict=True)):
            if len(parents) < 2:
                raise InputError(f"crossover: group {g} has {len(parents)} parent(s); "
                                 "give two or more")
            lengths = [fmt.count_words(p) for p in parents]
            target = cond.length or max(1, round(sum(lengths) / len(lengths)))
            extra: list[str] = []
            if self.keywords is not None:
                for p in parents:
                    extra.extend(self.keywords.top(p, CROSSOVER_KEYWORDS_PER_PARENT))
            first = fmt.clean(parents[0]).split()
            keep = min(round(CROSSOVER_PREFIX * len(first)), round(CROSSOVER_PREFIX * target))
            prefix = " ".join(first[:keep])
            fields = self._fields(cond, length=target, extra_keywords=extra)
            prompt = fmt.generation_prompt(fields, prefix)
            requests.append(Request(self._fit(prompt, self._reserve(target)),
                                    (_budget(target),), words_so_far=keep))
            prefixes.append(prefix)
        return [fmt.clean(f"{prefix} {segs[0]}")
                for prefix, segs in zip(prefixes, self._run(requests, gen), strict=True)]

    # ------------------------------------------------------------ scoring

    def _nll(self, texts: Sequence[str], fields: Sequence[fmt.Fields] | None = None):
        """Summed negative log-likelihood and token count of each text after its condition."""
        import torch

        fields = list(fields) if fields is not None else [fmt.Fields()] * len(texts)
        nll = np.zeros(len(texts))
        count = np.zeros(len(texts), dtype=int)
        for start in range(0, len(texts), self.batch_size):
            rows = []
            for text, f in zip(texts[start : start + self.batch_size],
                               fields[start : start + self.batch_size], strict=True):
                prompt = self._encode(fmt.generation_prompt(f))
                body = self._encode(" " + fmt.clean(text))[: self.context - len(prompt)]
                rows.append((prompt, body))
            width = max(len(p) + len(b) for p, b in rows)
            ids = torch.full((len(rows), width), self.classes.eos, dtype=torch.long)
            labels = torch.full((len(rows), width), -100, dtype=torch.long)
            attention = torch.zeros((len(rows), width), dtype=torch.long)
            for r, (p, b) in enumerate(rows):
                ids[r, : len(p) + len(b)] = torch.tensor(p + b)
                labels[r, len(p) : len(p) + len(b)] = torch.tensor(b)
                attention[r, : len(p) + len(b)] = 1
            with torch.no_grad():
                logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
            target = labels[:, 1:]
            losses = torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), target.clamp(min=0), reduction="none")
            losses = losses * (target >= 0)
            nll[start : start + len(rows)] = losses.sum(1).numpy()
            count[start : start + len(rows)] = (target >= 0).sum(1).numpy()
        return nll, count

    def perplexity(self, texts: Sequence[str],
                   conditions: Sequence[Condition] | None = None) -> np.ndarray:
        """Per-text token perplexity under the model (no condition unless given): lower is more
        fluent, as in Embedding-EDA's readability filter."""
        texts = list(texts)
        if not texts:
            return np.zeros(0)
        fields = None if conditions is None else [self._fields(c) for c in conditions]
        nll, count = self._nll(texts, fields)
        return np.exp(nll / np.maximum(count, 1))

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """Summed log-probability of each continuation after its prompt, both read as the
        body of a document with no condition."""
        from dpsynth.backends.generators.scoring import continuation_logprobs

        if len(prompts) != len(continuations):
            raise InputError(f"score: {len(prompts)} prompts but {len(continuations)} "
                             "continuations")
        head = self._encode(fmt.generation_prompt(fmt.Fields()))
        rows = [(head + self._encode(" " + fmt.clean(p)), self._encode(" " + fmt.clean(c)))
                for p, c in zip(prompts, continuations, strict=True)]
        return continuation_logprobs(self.model, rows, self.classes.eos, self.context,
                                     self.batch_size)
