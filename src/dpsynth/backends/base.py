"""The interfaces recipes use to reach models: `Embedder` and `Generator`.

Everything that crosses these interfaces is public: synthetic text, conditions built from
DP releases, and public text. Private text reaches only a local `Embedder` (through
`PrivateDataset.embed`) and never a `Generator`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynth.errors import DpsynthError

if TYPE_CHECKING:
    from dpsynth.backends.generators.context_lm import ContextLM

BLANK = "_"
"""The blank marker in texts passed to `Generator.fill`, as in dpga-textsyn's prompts."""


class BackendError(DpsynthError):
    """A backend refused in a way no retry can fix (authentication, unknown URL or model)."""


FAILED = ""
"""The output a generator gives for one input it could not serve; see `Generator`."""


@dataclass(frozen=True)
class Condition:
    """What a generated text should be: every field optional and public."""

    label: str | None = None
    keywords: tuple[str, ...] = ()
    length: int | None = None
    """Target length in words."""
    text: str | None = None
    """Free text: a topic description, the kind of document, or extra instructions."""


class Embedder(ABC):
    """Maps texts to unit-normalised float32 vectors of a fixed dimension."""

    is_remote: bool = False
    """True when texts leave this machine; private text then needs an explicit opt-in."""

    @property
    @abstractmethod
    def dim(self) -> int: ...

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an (n, dim) float32 array whose rows have unit L2 norm."""

    def encode_private(self, texts: Sequence[str]) -> np.ndarray:
        """`encode` for private texts: wrappers that store anything (a cache) bypass it here.

        `PrivateDataset.embed` calls this, never `encode`. A text's embedding must be, bit for
        bit, a function of that text alone, never of the texts embedded with it (one record
        would otherwise move another's vote: docs/privacy.md); `encode` of a model that pads
        batches breaks that, and overrides this (`SentenceTransformerEmbedder`).
        """
        return self.encode(texts)

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        """`encode` for real records that are scored but never released (evaluation's test and
        train splits): wrappers that store anything bypass it, as for `encode_private`, but
        batches may pad, because no vote and no noisy count depends on these vectors."""
        return self.encode(texts)

    def identity(self) -> dict[str, object]:
        """What determines the output besides the input: part of every cache key."""
        return {"backend": type(self).__name__}

    def usage(self) -> dict[str, float]:
        """Counters for the report (requests, tokens, estimated cost) where they apply."""
        return {}

    def served_by(self) -> Embedder:
        """The backend that answers this one's requests: itself, or the one a wrapper (a
        cache) holds. The health check probes and names it."""
        return self


class Generator(ABC):
    """The text operations the recipes need, each batched: one output per input.

    An output that could not be produced (the backend failed for that one input after its
    retries, or returned something malformed) is the empty string `FAILED`; callers drop or
    redo those. Errors that no retry can fix (a bad key, an unknown model) raise instead.
    """

    is_remote: bool = False
    """True when the operations' inputs leave this machine (an OpenAI-compatible server)."""

    batch_size: int | None = None
    """Inputs a local model computes in one forward batch; None where it does not batch."""

    def identity(self) -> dict[str, object]:
        """What determines the output besides the input (backend, model, sampling parameters,
        prompt set): part of every cache key."""
        return {"backend": type(self).__name__}

    def usage(self) -> dict[str, float]:
        """Counters for the report: calls, tokens, failures, estimated cost (where known)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Where sampling stands (a call counter that keys each call's randomness, a cache's
        request numbering), for checkpoints: a resumed run continues from it rather than
        replaying earlier samples. A backend whose samples depend on nothing earlier has none."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict` (one without state has nothing to continue)."""
        del state

    def stored_embeddings(self, texts: Sequence[str], embedder: Embedder
                          ) -> dict[str, np.ndarray]:
        """Vectors the backend already holds for some of `texts` under `embedder` (a pool's
        index of its own texts), so a recipe need not embed them again; most hold none."""
        return {}

    def served_by(self) -> Generator:
        """The backend that answers this one's requests: itself, the one a wrapper (cache,
        counting, label names) holds, or a pool's remote editor. The health check probes and
        names it."""
        return self

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        """Summed log-probability of each continuation right after its prompt (in-context
        classification scores candidate labels this way). Only backends that hold their
        model's token probabilities offer it; the others raise `BackendError`."""
        raise BackendError(f"{type(self).__name__} cannot score continuations (no token "
                           "log-probabilities); use the offline or hf generator")

    def context_lm(self) -> ContextLM:
        """The local causal LM behind this generator, for recipes that put text in its
        context and read its next-token distributions (DP decoding). Only backends that hold
        their model in this process offer it; the others raise `BackendError`."""
        raise BackendError(f"{type(self).__name__} holds no local LM whose next-token "
                           "distributions can be read; use the smollm or hf generator")

    @abstractmethod
    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        """A new text for each condition."""

    @abstractmethod
    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        """A variation of each text under its condition; `strength` in [0, 1] is how much
        changes."""

    @abstractmethod
    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        """Each text with its `BLANK` markers filled in."""

    @abstractmethod
    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        """A child text for each group of two or more parent texts."""


class WrappedGenerator(Generator):
    """A generator that adds one concern around `inner` (caching, counting, label names) and
    forwards the rest: a subclass overrides only what its concern changes."""

    def __init__(self, inner: Generator) -> None:
        self.inner = inner
        self.is_remote = inner.is_remote
        self.batch_size = inner.batch_size

    def identity(self) -> dict[str, object]:
        return self.inner.identity()

    def usage(self) -> dict[str, float]:
        return self.inner.usage()

    def served_by(self) -> Generator:
        return self.inner.served_by()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def stored_embeddings(self, texts: Sequence[str], embedder: Embedder
                          ) -> dict[str, np.ndarray]:
        return self.inner.stored_embeddings(texts, embedder)

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        return self.inner.score(prompts, continuations)

    def context_lm(self) -> ContextLM:
        return self.inner.context_lm()

    def generate(self, conditions: Sequence[Condition]) -> list[str]:
        return self.inner.generate(conditions)

    def rewrite(self, texts: Sequence[str], conditions: Sequence[Condition],
                strength: float = 0.5) -> list[str]:
        return self.inner.rewrite(texts, conditions, strength)

    def fill(self, masked_texts: Sequence[str], conditions: Sequence[Condition]) -> list[str]:
        return self.inner.fill(masked_texts, conditions)

    def crossover(self, parent_groups: Sequence[Sequence[str]],
                  conditions: Sequence[Condition]) -> list[str]:
        return self.inner.crossover(parent_groups, conditions)


class UnusedGenerator(Generator):
    """Stands in for `backends.generator` in a recipe that samples its own DP-trained LM
    (ctcl, dpft), so no model is loaded, or needs installing, for nothing."""

    def _unused(self, *args: object, **kwargs: object) -> list[str]:
        raise BackendError("this recipe samples its own LM; backends.generator is not used")

    generate = rewrite = fill = crossover = _unused
