"""The engines that run SmolLM2 on a CPU, behind one interface, so the generator and
benchmarks/generator_speed.py time and use the same code.

Each engine turns batches of prompt token ids into sampled continuations that stop at the
chat template's end of turn, and scores token sequences (perplexity, in-context
classification). `ct2-int8-smooth` (CTranslate2, int8 weights converted after SmoothQuant,
smooth.py) is the default because it measured fastest with held-out perplexity within 2% of
float32's (benchmarks/results/generator_speed.md); `ct2-int8` (no smoothing, +3.5%) and the
torch engines stay for comparison and for machines without CTranslate2.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from dpsynth.backends.smollm import weights
from dpsynth.errors import InputError

ENGINES = ("ct2-int8-smooth", "ct2-int8", "ct2-float32", "torch-float32", "torch-bfloat16",
           "torch-int8")
DEFAULT_ENGINE = "ct2-int8-smooth"


class Engine(Protocol):
    name: str

    def sample(self, prompts: Sequence[list[int]], max_new_tokens: int, temperature: float,
               top_p: float, seed: int) -> list[list[int]]:
        """One continuation per prompt (token ids, without the end-of-turn token); rows stop
        at their end of turn, the batch when its longest row has."""
        ...

    def logprobs(self, rows: Sequence[list[int]], starts: Sequence[int]) -> np.ndarray:
        """Summed log-probability of `row[start:]` after `row[:start]`, per row."""
        ...


def free_threads() -> int:
    """The count OMP_NUM_THREADS chose, else the cores nobody else is using now (at least
    one): on a shared machine one thread that runs beats two that wait, by up to 10x
    measured under load, and a count read from the load at start goes stale when a second
    job starts after this one (measured: about 20x slower, two jobs holding three threads on two
    cores)."""
    cores = len(os.sched_getaffinity(0))
    chosen = os.environ.get("OMP_NUM_THREADS", "")
    if chosen.isdigit() and int(chosen) > 0:
        return min(cores, int(chosen))
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def load_engine(name: str, threads: int | None = None) -> Engine:
    """The engine `name` (one of `ENGINES`) over the installed SmolLM2 weights."""
    threads = threads or free_threads()
    if name not in ENGINES:
        raise InputError(f"backends.generator.engine: '{name}' is none of {', '.join(ENGINES)}")
    kind, precision, *variant = name.split("-")
    if kind == "ct2":
        return CT2Engine(weights.ct2_folder(precision, smoothed=variant == ["smooth"]),
                         precision, threads, name)
    return TorchEngine.load(weights.hf_folder(), precision, threads, name)


class CT2Engine:
    """CTranslate2's generator: int8 GEMMs, finished rows leave the batch."""

    def __init__(self, folder, compute_type: str, threads: int, name: str) -> None:
        import ctranslate2

        self._ct2 = ctranslate2
        self.name = name
        vocabulary = json.loads((Path(folder) / "vocabulary.json").read_text(encoding="utf-8"))
        self.tokens = lambda ids: [vocabulary[i] for i in ids]  # CTranslate2 takes token strings
        self._load = lambda: ctranslate2.Generator(str(folder), device="cpu",
                                                   compute_type=compute_type,
                                                   intra_threads=threads, inter_threads=1)
        self.model = self._load()

    def sample(self, prompts, max_new_tokens, temperature, top_p, seed):
        # CTranslate2 samples with one random generator per worker thread, seeded from the
        # global seed when that thread first samples; reseeding later changes nothing. So a
        # seeded batch gets fresh worker threads: reloading the model takes about 0.1 s.
        self._ct2.set_random_seed(seed % 2**31)
        self.model = None
        self.model = self._load()
        results = self.model.generate_batch(
            [self.tokens(p) for p in prompts], max_length=max_new_tokens,
            sampling_topk=0 if temperature > 0 else 1, sampling_topp=top_p,
            sampling_temperature=temperature or 1.0, end_token=weights.END_OF_TURN,
            include_prompt_in_result=False)
        return [list(r.sequences_ids[0]) for r in results]

    def logprobs(self, rows, starts):
        scored = self.model.score_batch([self.tokens(r) for r in rows], max_batch_size=8)
        # score_batch gives the log-probability of tokens 1..n-1, each after those before it
        return np.array([sum(s.log_probs[start - 1:]) for s, start in zip(scored, starts,
                                                                           strict=True)])


class TorchEngine:
    """transformers' `generate` on float32, bfloat16 or dynamic-int8 weights, on the CPU or
    (for a model just trained there) a GPU."""

    def __init__(self, model, name: str, device: str = "cpu") -> None:
        import torch

        self._torch = torch
        self.model, self.name, self.device = model.eval(), name, device
        self.end = model.config.eos_token_id  # <|im_end|> in SmolLM2's config

    @classmethod
    def load(cls, folder, precision: str, threads: int, name: str) -> TorchEngine:
        """The weights in `folder` on the CPU at `precision`, on `threads` threads."""
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_pretrained(folder)
        if precision == "bfloat16":
            model = model.to(torch.bfloat16)
        elif precision == "int8":
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear},
                                                           dtype=torch.qint8)
        return cls(model, name)

    def sample(self, prompts, max_new_tokens, temperature, top_p, seed):
        torch = self._torch
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.end, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):  # left padding: generation continues the edge
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        torch.manual_seed(seed)
        sampling = ({"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
                    if temperature > 0 else {"do_sample": False})
        with torch.no_grad():
            out = self.model.generate(input_ids=ids.to(self.device),
                                      attention_mask=mask.to(self.device),
                                      max_new_tokens=max_new_tokens, eos_token_id=self.end,
                                      pad_token_id=self.end, **sampling)
        rows = out[:, width:].tolist()
        return [row[:row.index(self.end)] if self.end in row else row for row in rows]

    def logprobs(self, rows, starts):
        from dpsynth.backends.generators.scoring import continuation_logprobs

        pairs = [(list(r[:s]), list(r[s:])) for r, s in zip(rows, starts, strict=True)]
        return continuation_logprobs(self.model, pairs, self.end,
                                     self.model.config.max_position_embeddings)
