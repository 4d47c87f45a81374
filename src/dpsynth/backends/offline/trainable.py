"""The offline LM as something a recipe can fine-tune with DP and then sample from: the model
to train, its document format, the export of trained weights, and a generator over them.

CTCL and the DP fine-tune baseline use it through `dpsynth.backends.build_trainable_lm`, so a
recipe names no model class, tokenizer or prompt format.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from dpsynth.backends.offline import format as fmt
from dpsynth.backends.offline.generator import MAX_KEYWORDS, OfflineGenerator
from dpsynth.backends.offline.model import asset_dir, load_tokenizer


class TrainableLM:
    """A public model folder (the shipped LM unless `source` names another)."""

    frozen: tuple[str, ...] = ()
    """Parameters this LM keeps public whatever the config says (none: its embedding and
    output layer are untied)."""

    def __init__(self, source: str | Path | None = None) -> None:
        self.source = Path(source) if source is not None else asset_dir()
        self._tokenizer = load_tokenizer(self.source)

    @property
    def pad_id(self) -> int:
        """End-of-text, which also pads the training batches."""
        return self._tokenizer.token_to_id(fmt.EOS)

    def document(self, label: str | None, keywords: Sequence[str], text: str,
                 kind: str | None = None) -> tuple[list[int], int]:
        """A training document and its first target token: the condition (kind, label, up to
        MAX_KEYWORDS keywords), then the text, in the format the generator conditions on;
        every token after the first is learnt (the conditions too, as the seed trains)."""
        fields = fmt.Fields(kind=kind, label=label, keywords=tuple(keywords[:MAX_KEYWORDS]))
        return self._tokenizer.encode(fmt.document_sequence(fields, text)).ids, 1

    def fresh_model(self):
        """The public weights, in float32 for training."""
        import torch
        from transformers import GPT2LMHeadModel

        return GPT2LMHeadModel.from_pretrained(self.source, dtype=torch.float32)

    def export(self, model, folder: Path) -> None:
        """Trained weights as a model folder the generator can load (tokenizer and keyword
        table travel along)."""
        model.save_pretrained(folder)
        for extra in self.source.iterdir():
            if extra.suffix == ".json" and extra.name != "config.json":
                shutil.copy(extra, folder / extra.name)

    @staticmethod
    def generator(folder: Path, temperature: float, top_p: float, seed: int,
                  guidance: float) -> OfflineGenerator:
        """Samples of the trained folder, with classifier-free guidance on the whole
        condition (label and keywords)."""
        return OfflineGenerator(folder, temperature=temperature, top_p=top_p, seed=seed,
                                label_guidance=guidance, guide_keywords=True)
