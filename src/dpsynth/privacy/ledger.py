"""The privacy ledger: every release is a recorded event, composed exactly with PLD accounting.

Where a bounded-range selection is among the events, the ledger also composes their RDP curves
and spends the smaller of the two ε's (`events.spend`): both bound the same releases.

`charge` computes what the composed ε *would* be with the new event and refuses it — raising
`BudgetExceededError` — before anything is released; `release` charges a mechanism and only
then draws its noise. The ledger saves to JSON (checkpoints, the run's privacy.json) and, on
load, recomputes every figure from the recorded events rather than trusting stored numbers.

A run that restarts in an output folder rebuilds its ledger from the folder's journal
(`privacy/journal.py`) and `replay`s the releases made after the checkpoint it resumes from:
the same call, in the same order, gets the recorded charge and noisy answer back instead of
charging and drawing again. A call that differs ends the replay; every recorded charge stays.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpsynth.errors import BudgetExceededError, InputError
from dpsynth.privacy.events import (
    RDP_ORDERS,
    PldAccountant,
    event_from_json,
    event_to_json,
    rdp_epsilon,
    spend,
)
from dpsynth.privacy.mechanisms import Mechanism, ReleasedInParts
from dpsynth.privacy.noise import NoiseSource
from dpsynth.stops import raise_if_stop_requested

FORMAT = "dpsynth.privacy-ledger/1"

PLAN_SLACK = 1e-3
"""Relative room over a stage's planned ε (`PrivacyLedger.hold_to`): the plan is computed on
a coarser PLD grid than the ledger's, both upper bounds."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Charge:
    """One recorded release."""

    stage: str
    event: dp_event.DpEvent
    mechanism: str = ""
    sensitivity: float | None = None
    noise_scale: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "mechanism": self.mechanism,
                "sensitivity": self.sensitivity, "noise_scale": self.noise_scale,
                "event": event_to_json(self.event)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Charge:
        return cls(data["stage"], event_from_json(data["event"]), data.get("mechanism", ""),
                   data.get("sensitivity"), data.get("noise_scale"))


NOT_DRAWN = object()
"""The answer of a journaled release whose noise was never drawn (or never written)."""


@dataclass(frozen=True)
class Journaled:
    """A release an earlier process made for this output folder: its position in the
    ledger, its charge and, when it was drawn and written down, its noisy answer."""

    index: int
    charge: Charge
    output: Any = NOT_DRAWN
    draws: int | None = None
    """The noise stream's position after the answer was drawn (None in older journals)."""
    parts: tuple[tuple[Any, int], ...] = ()
    """For a release drawn in parts whose whole answer was not written down: the parts that
    were, first to last, each with the noise stream's position after it."""
    layout: str | None = None
    """The layout those parts were drawn under (`ReleasedInParts.layout`)."""


@dataclass
class _Composition:
    """A composed PLD plus the δ spent outside it, and the events' RDP curve, which the spend
    uses once a bounded-range event is composed."""

    pld: pld_lib.PrivacyLossDistribution
    additive_delta: float = 0.0
    private: bool = True
    rdp: np.ndarray = field(default_factory=lambda: np.zeros(len(RDP_ORDERS)))
    bounded_range: bool = False

    def epsilon(self, delta: float) -> float:
        left = delta - self.additive_delta
        if not self.private or left <= 0:
            return math.inf
        return spend(float(self.pld.get_epsilon_for_delta(left)),
                     self.rdp if self.bounded_range else None, left)


@dataclass
class PrivacyLedger:
    """Budget (ε, δ) and the events charged against it, composed by PLD (add/remove one unit).

    `discretization` is the PLD's value discretisation interval: the default 1e-4 is what
    dp_accounting uses; coarser values are faster and still upper bounds.
    """

    epsilon: float
    delta: float
    discretization: float = 1e-4
    charges: list[Charge] = field(default_factory=list)
    on_charge: Callable[[Charge], None] | None = field(default=None, repr=False, compare=False)
    """Called after a charge is recorded and before its noise is drawn: a write-ahead hook
    so that a crash can never lose a release that may already have left the process."""
    on_answer: Callable[[int, Any, int], None] | None = field(default=None, repr=False,
                                                               compare=False)
    """Called with (charge index, noisy answer, the noise stream's position after it) after
    the noise is drawn and before the answer is returned: the journal writes them, so that a
    restart reuses the answer and continues the stream where it was."""
    on_part: Callable[[int, int, Any, int, str], None] | None = field(
        default=None, repr=False, compare=False)
    """Called with (charge index, part index, part, the stream's position after it, the
    release's layout) as each part of a release drawn in parts (`ReleasedInParts`) is drawn:
    a restart continues after the parts written down."""
    _pending: deque = field(default_factory=deque, init=False, repr=False, compare=False)
    _caps: dict[str, float] | None = field(default=None, init=False, repr=False,
                                           compare=False)
    _by_stage: dict[str, _Composition] = field(default_factory=dict, init=False, repr=False,
                                               compare=False)

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"epsilon must be finite and > 0, got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if not 0 < self.discretization <= 0.1:
            raise ValueError(f"discretization must be in (0, 0.1], got {self.discretization}")
        recorded, self.charges = list(self.charges), []
        self._total = self._empty()
        total = self._compose_all(self._total, [c.event for c in recorded])
        if total.epsilon(self.delta) <= self.epsilon and all(c.stage for c in recorded):
            self._total, self.charges = total, recorded
            return
        for charge in recorded:  # over budget: charge one by one to name the release
            self._commit(charge)

    def _empty(self) -> _Composition:
        return _Composition(pld_lib.identity(self.discretization))

    def _event_composition(self, event: dp_event.DpEvent) -> _Composition:
        try:
            return _cached_composition(event, self.discretization)
        except TypeError:  # events holding lists (ComposedDpEvent) are not hashable
            return _event_composition(event, self.discretization)

    def _compose(self, base: _Composition, event: dp_event.DpEvent, times: int = 1
                 ) -> _Composition:
        part = self._event_composition(event)
        pld = part.pld if times == 1 else part.pld.self_compose(times)
        return _Composition(base.pld.compose(pld),
                            base.additive_delta + times * part.additive_delta,
                            base.private and part.private, base.rdp + times * part.rdp,
                            base.bounded_range or part.bounded_range)

    def _compose_all(self, base: _Composition, events: Sequence[dp_event.DpEvent]
                     ) -> _Composition:
        """Compose many recorded events at once: composition is commutative, so each
        distinct event is self-composed by its count (a training run's thousands of equal
        steps cost one FFT power, not thousands of convolutions)."""
        counts: dict[str, tuple[dp_event.DpEvent, int]] = {}
        for event in events:
            key = json.dumps(event_to_json(event), sort_keys=True)
            counts[key] = (event, counts[key][1] + 1 if key in counts else 1)
        for event, times in counts.values():
            base = self._compose(base, event, times)
        return base

    def hold_to(self, caps: dict[str, float]) -> None:
        """From now on refuse a charge that would make its stage, alone, spend more than
        `caps` gives it (the budget plan's ε per stage) or that names no planned stage. The
        total alone cannot catch a recipe that releases a stage more often, or with a larger
        sensitivity, than planned where another stage left slack (an early stop)."""
        self._caps = dict(caps)
        by_stage: dict[str, list[dp_event.DpEvent]] = {}
        for charge in self.charges:
            by_stage.setdefault(charge.stage, []).append(charge.event)
        self._by_stage = {stage: self._compose_all(self._empty(), events)
                          for stage, events in by_stage.items()}
        if any(self._over_cap(stage, c) for stage, c in self._by_stage.items()):
            self._release_hold("an earlier run's releases already pass the plan")

    def _over_cap(self, stage: str, composition: _Composition) -> bool:
        cap = self._caps.get(stage) if self._caps is not None else None
        return cap is not None and composition.epsilon(self.delta) > cap * (1 + PLAN_SLACK) \
            + PLAN_SLACK

    def _release_hold(self, why: str) -> None:
        """Stop holding stages to the plan where releases beyond it are the design: a replay
        that ended early charges again what it draws again (the total still binds)."""
        if self._caps is not None:
            log.info("%s: stages are no longer held to the plan, only to the budget", why)
        self._caps = None

    def _stage_trial(self, charge: Charge) -> _Composition | None:
        """The stage's composition with `charge`, refused past its cap (see `hold_to`)."""
        if self._caps is None:
            return None
        if charge.stage not in self._caps:
            raise BudgetExceededError(f"stage '{charge.stage}' is not in the run's budget plan "
                                      f"({', '.join(self._caps)}); nothing was released")
        trial = self._compose(self._by_stage.get(charge.stage, self._empty()), charge.event)
        if self._over_cap(charge.stage, trial):
            raise BudgetExceededError(
                f"stage '{charge.stage}': charging {charge.mechanism or 'event'} "
                f"{charge.event} would bring the stage alone to "
                f"ε={trial.epsilon(self.delta):.6g}, over the ε={self._caps[charge.stage]:.6g} "
                "its plan gave it: a release the plan did not foresee; nothing was released")
        return trial

    def _commit(self, charge: Charge) -> None:
        if not charge.stage:
            raise ValueError("a charge needs a non-empty stage name")
        stage_trial = self._stage_trial(charge)
        trial = self._compose(self._total, charge.event)
        epsilon = trial.epsilon(self.delta)
        if epsilon > self.epsilon:
            raise BudgetExceededError(
                f"stage '{charge.stage}': charging {charge.mechanism or 'event'} "
                f"{charge.event} would bring the spend to ε={epsilon:.6g} at δ={self.delta:.3g}, "
                f"over the budget ε={self.epsilon:g} (spent so far ε={self.spent():.6g}); "
                "nothing was released")
        self._total = trial
        if stage_trial is not None:
            self._by_stage[charge.stage] = stage_trial
        self.charges.append(charge)
        if self.on_charge is not None:
            self.on_charge(charge)

    def replay(self, releases: Sequence[Journaled]) -> None:
        """Expect these recorded releases (already among `charges`) to be asked for again, in
        order, by a run resuming where they were made."""
        self._pending = deque(releases)

    def end_replay(self, why: str) -> None:
        """Charge anew whatever is asked for from here on, even a repeat of a recorded
        release, whose charge stays on the ledger: for outputs that may have been seen
        outside the journal, so that drawing them again is a second release."""
        if self._pending:
            log.warning("%s: the %d recorded release(s) not replayed stay charged, and what is "
                        "drawn again is charged again", why, len(self._pending))
        self._pending.clear()
        self._release_hold(why)

    def _replayed(self, stage: str, event: dp_event.DpEvent) -> Journaled | None:
        """The next recorded release when this call repeats it; otherwise the replay ends
        (its charges stay on the ledger) and None."""
        if not self._pending:
            return None
        head = self._pending[0]
        if head.charge.stage == stage and _same_event(head.charge.event, event):
            return self._pending.popleft()
        log.warning("the resumed run asked for a release the journal does not hold next "
                    "(stage '%s'); the %d recorded release(s) not replayed stay charged",
                    stage, len(self._pending))
        self._pending.clear()
        self._release_hold("the replay ended")
        return None

    def charge(self, stage: str, event: dp_event.DpEvent, *, mechanism: str = "",
               sensitivity: float | None = None, noise_scale: float | None = None) -> Charge:
        """Record a release; raises BudgetExceededError, recording nothing, when over budget.
        A replayed release is already recorded: it is returned, not charged again."""
        replayed = self._replayed(stage, event)
        if replayed is not None:
            return replayed.charge
        raise_if_stop_requested()  # a stop whose KeyboardInterrupt was lost: no more releases
        charge = Charge(stage, event, mechanism, sensitivity, noise_scale)
        self._commit(charge)
        return charge

    def release(self, stage: str, mechanism: Mechanism, values: Any, noise: NoiseSource) -> Any:
        """Charge `mechanism` for `stage`, then — only then — draw its noisy answer.

        A replayed release returns the answer recorded for it (when one was) without drawing
        again: the stream moves to where the recorded release left it. A journal too old to
        say where draws anyway, so that a seeded stream stays where an uninterrupted run
        would have it."""
        replayed = self._replayed(stage, mechanism.event)
        if replayed is None:
            raise_if_stop_requested()
            self._commit(Charge(stage, mechanism.event, mechanism.kind, mechanism.sensitivity,
                                mechanism.noise_scale))
        elif replayed.output is not NOT_DRAWN and replayed.draws is not None:
            noise.continue_at(replayed.draws)
            return replayed.output
        if replayed is not None and replayed.output is not NOT_DRAWN:
            mechanism._release(values, noise)  # an older journal: the stream moves as it did
            return replayed.output
        index = replayed.index if replayed is not None else len(self.charges) - 1
        answer = self._draw(index, mechanism, values, noise,
                            self._continuable(replayed, mechanism))
        if self.on_answer is not None:
            self.on_answer(index, answer, noise.draws)
        return answer

    def _draw(self, index: int, mechanism: Mechanism, values: Any, noise: NoiseSource,
              parts: tuple[tuple[Any, int], ...]) -> Any:
        """The noisy answer. One drawn in parts has each part written down as it is drawn
        and, replayed, continues after the parts written down, the stream where they left
        it (the charge, made once, covers every part)."""
        if not isinstance(mechanism, ReleasedInParts):
            return mechanism._release(values, noise)
        if parts:
            noise.continue_at(parts[-1][1])

        def write_down(part: int, value: Any) -> None:
            if self.on_part is not None:
                self.on_part(index, part, value, noise.draws, mechanism.layout)

        return mechanism._release_from(values, noise, [value for value, _ in parts],
                                       write_down)

    @staticmethod
    def _continuable(replayed: Journaled | None, mechanism: Mechanism) -> tuple:
        """The parts a replayed release continues after. Parts drawn under another layout
        (a setting that moves records between parts changed since) are refused: the new
        parts could read a record that fed an old one, and one charge would pay for two."""
        if replayed is None or not replayed.parts:
            return ()
        if isinstance(mechanism, ReleasedInParts) and not mechanism.layout:
            raise InputError(
                f"release {replayed.index} (stage '{replayed.charge.stage}') was being drawn "
                "when the run stopped, from data whose identity cannot be checked (an "
                "in-memory table): continuing its parts on the data given now could read an "
                "edited record twice under one charge; use a new output folder")
        if not isinstance(mechanism, ReleasedInParts) \
                or mechanism.layout != replayed.layout:
            raise InputError(
                f"release {replayed.index} (stage '{replayed.charge.stage}') was being drawn "
                "when the run stopped, with another layout of the data among its parts (a "
                "recipe setting or the data file changed since); resume with the config and "
                "data it was started with, or use a new output folder")
        return replayed.parts

    def spent(self) -> float:
        """Composed ε at the budget's δ: PLD accounting, or RDP where a bounded-range
        selection makes that tighter."""
        return self._total.epsilon(self.delta)

    def remaining(self) -> float:
        """Budget ε minus spent ε (for display: ε does not add up under PLD composition)."""
        return max(0.0, self.epsilon - self.spent())

    def would_spend(self, event: dp_event.DpEvent) -> float:
        """The composed ε if `event` were charged now; charges nothing. The next replayed
        release is already charged, so asking for it again costs nothing more."""
        if self._pending and _same_event(self._pending[0].charge.event, event):
            return self.spent()
        return self._compose(self._total, event).epsilon(self.delta)

    def spent_rdp(self) -> float:
        """Composed ε by the RDP accountant alone: the cross-check (looser than PLD, except
        where bounded-range draws make it the bound `spent` uses)."""
        return rdp_epsilon([c.event for c in self.charges], self.delta)

    def breakdown(self) -> dict[str, dict[str, Any]]:
        """Per stage: releases, mechanisms, and the ε the stage would cost alone at δ."""
        stages: dict[str, list[Charge]] = {}
        for charge in self.charges:
            stages.setdefault(charge.stage, []).append(charge)
        out = {}
        for stage, charges in stages.items():
            total = self._compose_all(self._empty(), [c.event for c in charges])
            out[stage] = {"releases": len(charges),
                          "mechanisms": sorted({c.mechanism for c in charges if c.mechanism}),
                          "epsilon_alone": _finite(total.epsilon(self.delta))}
        return out

    def to_dict(self) -> dict[str, Any]:
        spent = self.spent()
        return {"format": FORMAT, "budget": {"epsilon": self.epsilon, "delta": self.delta},
                "discretization": self.discretization,
                "spent": {"epsilon": _finite(spent), "epsilon_rdp": _finite(self.spent_rdp()),
                          "accountant": "min(pld, rdp)" if self._total.bounded_range
                          else "pld",
                          "neighbouring": "add_or_remove_one_unit"},
                "breakdown": self.breakdown(),
                "charges": [c.to_json() for c in self.charges]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        """Rebuild from recorded events; every figure is recomputed, none is read back."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a dpsynth privacy ledger (format {data.get('format')!r})")
        budget = data["budget"]
        return cls(float(budget["epsilon"]), float(budget["delta"]),
                   float(data.get("discretization", 1e-4)),
                   [Charge.from_json(c) for c in data["charges"]])

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        return cls.from_dict(json.loads(text))


def _same_event(a: dp_event.DpEvent, b: dp_event.DpEvent) -> bool:
    return event_to_json(a) == event_to_json(b)


def _event_composition(event: dp_event.DpEvent, discretization: float) -> _Composition:
    """One event's PLD."""
    accountant = PldAccountant(discretization)
    if not accountant.supports(event):
        raise ValueError(f"the ledger cannot account event {event}")
    accountant.compose(event)
    return _Composition(accountant.pld, accountant.additive_delta, accountant.is_private,
                        accountant.rdp, accountant.bounded_range)


@functools.lru_cache(maxsize=256)
def _cached_composition(event: dp_event.DpEvent, discretization: float) -> _Composition:
    """A training run charges the same step event hundreds of times, and building a
    subsampled Gaussian's PLD takes a good fraction of a second: build it once."""
    return _event_composition(event, discretization)


def _finite(value: float) -> float | None:
    """JSON has no infinity: an unbounded ε is written as null."""
    return value if math.isfinite(value) else None
