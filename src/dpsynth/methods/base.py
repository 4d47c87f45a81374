"""The common shape of a recipe: parameters, the privacy stages it plans, and `run`.

A recipe reaches private data only through `ctx.private` (whose releases charge the ledger),
talks to models only through the backends, and keeps everything it checkpoints public.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ValidationError

from dpsynth.backends.base import Embedder, Generator
from dpsynth.backends.generators.counting import CountingGenerator
from dpsynth.checkpoint import CheckpointStore
from dpsynth.data.facts import DataFacts
from dpsynth.errors import ConfigError
from dpsynth.privacy.planning import BudgetPlan, StageSpec, apply_split, plan_budget
from dpsynth.private import Private
from dpsynth.progress import track

OUTPUT_SIZE = "n_output"
"""Every recipe's name for the output size: the synthetic records it writes. Left out (None),
it is N, the private set's number of privacy units, which is public (the declared bound
`data.max_units` where there is one); the recipe's other sizes follow from it (`Recipe.sizes`)."""


@dataclass
class SyntheticSet:
    """The output: synthetic texts and, for labelled data, their labels."""

    texts: list[str]
    labels: list[str] | None = None


@dataclass
class RunContext:
    """Everything a recipe's `run` may use."""

    private: Private
    """The private side: one method per kind of release, each charged on the ledger."""
    embedder: Embedder
    generator: Generator
    checkpoints: CheckpointStore
    """Written through `save`, which adds the ledger and the noise state."""
    seed: int
    """Seed of the public randomness (conditions, masks, pairings); never of DP noise."""
    plan: BudgetPlan
    """The recipe's budget plan, made once before the run from (ε, δ) and public facts: every
    release's mechanism and noise scale. `dpsynth plan` prints this very plan."""
    report: Callable[[dict[str, Any]], None] = field(default=lambda row: None)
    """Per-iteration diagnostics, computed from DP releases and synthetic data only."""
    resumed: tuple[int, dict[str, Any]] | None = None
    """The recipe's state at the checkpoint this run resumed from (ledger, noise and generator
    cache numbering already restored), or None for a fresh run."""
    label_names: dict[str, str] = field(default_factory=dict)
    """`data.label_names`: the public name a model is asked for each coded label by.
    `generator` already asks by these names; a recipe that conditions a model of its own
    (ctcl, dpft) names its labels with `label_name`."""

    document: str | None = None
    """`data.document`: the kind of document the data holds. `generator` already asks for
    it; a recipe that prompts a model of its own (ctcl, dpft, dp_decoding) asks itself.
    """

    state_version: int = 1
    """The recipe's `state_version`, written into every checkpoint."""

    _public_embeddings: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def label_name(self, label: str | None) -> str | None:
        """The name a model is asked for `label` by (the label itself when none is declared)."""
        return None if label is None else self.label_names.get(label, label)

    def counted(self, generator: Generator) -> Generator:
        """A generator of the recipe's own (the LM ctcl and dpft train), its outputs counted
        with the run generator's, so usage.json counts all the run asked of any model. A
        context built without the run's counter (a test's) leaves it uncounted."""
        run = self.generator
        return run.counting(generator) if isinstance(run, CountingGenerator) else generator

    def embed_public(self, texts: list[str]) -> np.ndarray:
        """Embed public or synthetic texts, each distinct text once per run: elites carried
        over from one generation to the next are not embedded again, and a pool's texts are
        read from its stored embeddings when the run embeds with the pool's embedder."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._public_embeddings]
        if missing:  # a pool's own vectors
            self._public_embeddings.update(self.generator.stored_embeddings(missing,
                                                                            self.embedder))
            missing = [t for t in missing if t not in self._public_embeddings]
        if missing:
            self._public_embeddings.update(zip(missing, self.embedder.encode(missing),
                                               strict=True))
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([self._public_embeddings[t] for t in texts])

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Checkpoint the recipe's public state with the ledger, the noise stream and the
        generator's cache numbering."""
        envelope = {"recipe": state, "state_version": self.state_version,
                    **self.private.state_dict(), "public_seed": self.seed,
                    "generator": self.generator.state_dict()}
        self.checkpoints.save(step, envelope)


class Recipe(ABC):
    """A synthesis recipe: `params` validated at construction, never changed by `run`."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]]
    one_record_per_unit: ClassVar[bool] = False
    """Recipes whose releases count one vote or one clipped gradient per unit need k = 1."""
    state_version: ClassVar[int] = 1
    """Raised when the checkpointed state's layout changes: a resumed run refuses a
    checkpoint of another layout instead of misreading it."""
    uses_backend_generator: ClassVar[bool] = True
    """False for recipes that sample a model of their own (ctcl, dpft: the DP fine-tuned LM):
    `backends.generator` is then neither probed nor asked for anything."""
    renamed: ClassVar[dict[str, str]] = {}
    """Parameters an older dpsynth took under another name: old name → new name. A config
    that still uses the old one is refused with a message naming the new one."""

    embeds_private: ClassVar[bool] = False
    """True for recipes whose releases read the private records' embeddings (voters,
    kd_tutor's teachers): the run embeds them before the first release, so a record the
    embedder cannot take stops the run before anything is charged, never between two."""

    needs_local_lm: ClassVar[bool] = False
    """True for recipes that put private records in the generator's context (dp_decoding): a
    remote generator, or a model off the CPU, is refused by the plan."""

    def __init__(self, params: BaseModel, split: dict[str, float] | None = None) -> None:
        self.params = params
        self.split = split

    @classmethod
    def from_config(cls, raw: dict[str, Any], split: dict[str, float] | None = None) -> Recipe:
        """Validate `recipe.params`; `split` is `budget.split`, overriding stage fractions."""
        for old, new in cls.renamed.items():
            if old in raw:
                raise ConfigError(
                    f"recipe.params.{old}: renamed {new}, the output size every recipe "
                    f"shares; write {new}: {raw[old]} (or leave it out: the output is then "
                    "as large as the private set, N records)" if new == OUTPUT_SIZE else
                    f"recipe.params.{old}: renamed {new}")
        try:
            return cls(cls.Params.model_validate(raw), split)
        except ValidationError as exc:
            details = "; ".join(
                f"recipe.params.{'.'.join(map(str, e['loc']))}: "
                + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
                for e in exc.errors())
            raise ConfigError(details) from None

    def sizes(self, private: DataFacts) -> dict[str, int]:
        """The sizes this config leaves out (None), fixed from public facts: the output size
        from N, a recipe's other sizes from the output size (each recipe says by which of its
        seed's ratios). Values the config sets are kept as given."""
        n = getattr(self.params, OUTPUT_SIZE)
        return {OUTPUT_SIZE: n if n is not None else private.n_units}

    def resolved(self, private: DataFacts) -> Recipe:
        """This recipe with every size fixed (`sizes`): what a plan and a run use."""
        sizes = self.sizes(private)
        if all(getattr(self.params, key) == value for key, value in sizes.items()):
            return self
        return type(self)(self.params.model_copy(update=sizes), self.split)

    def resized(self, **changes: int) -> Recipe:
        """This recipe with some parameters set (a time budget's proposal), the sizes derived
        from them left out again so that `resolved` derives them from the new values."""
        params = self.params.model_dump(exclude_unset=True) | changes
        return type(self)(type(self.params).model_validate(params), self.split)

    def validate(self, private: DataFacts) -> None:
        """Refuse, from public facts (k, the label set, N) and before any release, a config
        this recipe cannot run: a run must never stop half way for a precondition."""
        if self.one_record_per_unit and private.records_per_unit != 1:
            raise ConfigError(
                f"data.max_records_per_user: recipe {self.name} counts one vote or one "
                f"clipped gradient per privacy unit, so it needs 1 record per user, got "
                f"{private.records_per_unit}; set data.max_records_per_user: 1")

    @abstractmethod
    def stages(self, private: DataFacts, delta: float) -> list[StageSpec]:
        """The releases this recipe will make, for planning its noise before it runs."""

    @abstractmethod
    def expected_generations(self, private: DataFacts) -> dict[str, int]:
        """Generator outputs the run will ask for, per operation (for `dpsynth plan`)."""

    def fixed_noise(self) -> dict[str, float]:
        """Stages whose noise scale the recipe pins (a paper's default σ); none by default."""
        return {}

    def plan_notes(self, private: DataFacts, plan: BudgetPlan) -> list[str]:
        """Where this plan's noise would drown the signal it must carry, from public facts
        alone (N, the config, the plan): `dpsynth plan` prints them, a run logs them."""
        return []

    def budget_plan(self, private: DataFacts, epsilon: float, delta: float) -> BudgetPlan:
        """Noise scales for every stage so that all of them compose to (ε, δ)."""
        stages = apply_split(self.stages(private, delta), self.split)
        return _plan(epsilon, delta, tuple(stages), tuple(sorted(self.fixed_noise().items())))

    @abstractmethod
    def run(self, ctx: RunContext) -> SyntheticSet:
        """Synthesise, asking `ctx.private` for every private release."""


@functools.lru_cache(maxsize=32)
def _plan(epsilon: float, delta: float, stages: tuple[StageSpec, ...],
          fixed: tuple[tuple[str, float], ...]) -> BudgetPlan:
    """Calibration takes seconds; a resumed run or `plan` then `run` reuse the answer. The
    coarser PLD grid gives a pessimistic ε, so the plan also holds on the ledger's finer one."""
    return plan_budget(epsilon, delta, list(stages), fixed=dict(fixed), discretization=1e-3)


class IterativeRecipe(Recipe):
    """A recipe of the form initial → T × step → output (pe, dpga, eda): this class owns
    resume, checkpoints and per-iteration reports, so a recipe writes its algorithm only.

    State is public (DP releases and synthetic data) and JSON-able: it is what a checkpoint
    holds after each step, and what a resumed run starts from."""

    @abstractmethod
    def iterations(self) -> int:
        """T, the number of steps."""

    @abstractmethod
    def initial(self, ctx: RunContext) -> dict[str, Any]:
        """The state before the first step (the initial population and any releases it
        needs)."""

    @abstractmethod
    def step(self, ctx: RunContext, state: dict[str, Any], t: int,
             last: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """Step `t`: one DP selection and what follows from it. Returns the next state and
        the step's report row (DP releases and synthetic data only)."""

    @abstractmethod
    def output(self, ctx: RunContext, state: dict[str, Any]) -> SyntheticSet:
        """The synthetic set, from the state after the last step."""

    def finished(self, state: dict[str, Any]) -> bool:
        """Whether the run stops before T (no label left to evolve, say)."""
        return False

    def run(self, ctx: RunContext) -> SyntheticSet:
        if ctx.resumed is None:
            start, state = 0, self.initial(ctx)
            ctx.save(0, state)
        else:
            start, state = ctx.resumed
        for t in track(range(start, self.iterations()), f"{self.name} iterations",
                           log_progress=True):
            if self.finished(state):
                break
            state, row = self.step(ctx, state, t, last=t + 1 == self.iterations())
            ctx.report({"iteration": t + 1, **row, "epsilon_spent": ctx.private.spent()})
            ctx.save(t + 1, state)
        return self.output(ctx, state)


def label_groups(private: DataFacts) -> list[str | None]:
    """The groups a recipe evolves: one per public label, or a single unlabelled one."""
    return list(private.label_names) if private.label_names else [None]


def group_codes(groups: list[str | None], labels: list) -> np.ndarray | None:
    """Each synthetic text's group index, for releases that vote within a label (None without
    labels: everyone votes over everything)."""
    return None if groups == [None] else np.array([groups.index(y) for y in labels],
                                                  dtype=np.int64)
