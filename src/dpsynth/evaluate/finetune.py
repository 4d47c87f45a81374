"""Downstream classification by fine-tuning a small transformer encoder (the seeds' setting).

The seeds fine-tune RoBERTa-base on the synthetic set and test on real data. This is the same
protocol on a CPU budget: any local Hugging Face encoder folder (the bundled MiniLM by
default) with a fresh classification head, trained for a bounded number of epochs.
Slower than the logistic regression on frozen embeddings, and closer to what a model team
would do with the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsynth.errors import InputError
from dpsynth.evaluate.downstream import ClassificationScores, scores_from_predictions
from dpsynth.progress import track


class FinetuneConfig(BaseModel):
    """The encoder and its training budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Path | None = Field(None, description="a local HF encoder folder; default: MiniLM")
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(16, gt=0)
    learning_rate: float = Field(5e-5, gt=0)
    max_tokens: int = Field(128, ge=8)
    threads: int = Field(2, gt=0, description="torch threads while training")


def finetune_classification(train_texts: Sequence[str], train_labels: Sequence[str],
                            test_texts: Sequence[str], test_labels: Sequence[str],
                            config: FinetuneConfig | None = None,
                            seed: int = 0) -> ClassificationScores:
    """Fine-tune on (synthetic) train, score on (real) test."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    config = config or FinetuneConfig()
    if len(train_texts) != len(train_labels) or not train_texts:
        raise InputError("finetune_classification: needs as many labels as texts, and some")
    path = config.model or _minilm_folder()
    if not Path(path).is_dir():
        raise InputError(f"finetune model: no Hugging Face model folder at {path}")
    classes = sorted(set(train_labels))
    index = {c: i for i, c in enumerate(classes)}
    previous = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = _with_fresh_head(AutoModelForSequenceClassification, path,
                                 max(len(classes), 2))
        y = torch.tensor([index[label] for label in train_labels])
        steps = max(1, math.ceil(config.epochs * len(train_texts) / config.batch_size))
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                                      weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / steps)
        rng = np.random.default_rng(seed)
        order = np.concatenate([rng.permutation(len(train_texts))
                                for _ in range(math.ceil(config.epochs) + 1)])
        model.train()
        for step in track(range(steps), "fine-tuning classifier", total=steps):
            batch = order[step * config.batch_size:(step + 1) * config.batch_size]
            inputs = tokenizer([train_texts[i] for i in batch], padding=True, truncation=True,
                               max_length=config.max_tokens, return_tensors="pt")
            loss = model(**inputs, labels=y[batch]).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        model.eval()
        predicted = []
        with torch.no_grad():
            for start in range(0, len(test_texts), 64):
                inputs = tokenizer(list(test_texts[start:start + 64]), padding=True,
                                   truncation=True, max_length=config.max_tokens,
                                   return_tensors="pt")
                predicted += model(**inputs).logits[:, : len(classes)].argmax(-1).tolist()
    finally:
        torch.set_num_threads(previous)
    return scores_from_predictions(test_labels, [classes[i] for i in predicted], classes,
                                   n_train=len(train_texts))


def _with_fresh_head(auto_class, path: Path, num_labels: int):
    """Load the encoder with a new classification head, without the loader's report that the
    head is newly initialised (it is meant to be)."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return auto_class.from_pretrained(str(path), num_labels=num_labels)
    finally:
        hf_logging.set_verbosity(previous)


def _minilm_folder() -> Path:
    from dpsynth.backends.embedders.sentence_transformer import minilm_path

    return minilm_path()
