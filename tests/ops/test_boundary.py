"""`ctx.private`: each kind of release is charged under the stage it is handed (its name and
its mechanism), and the private side never leaves the process."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dpsynth.data import PrivateDataset
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.noise import NoiseSource
from dpsynth.privacy.planning import StageSpec, plan_budget
from dpsynth.privacy.stages import (
    KEYWORD_HISTOGRAM,
    LABEL_HISTOGRAM,
    LENGTH_HISTOGRAM,
    LENGTH_RANGE,
    SELECTION,
    SIMILARITY_THRESHOLD,
    TOPIC_HISTOGRAM,
    VOTING,
)
from dpsynth.private import Private
from dpsynth.private.engine import ENGINES
from dpsynth.private.engine.local import LocalEngine
from tests.methods.fakes import HashEmbedder

WORDS = "invoice refund parcel courier wifi battery screen charge late broken".split()
STAGES = [StageSpec(LENGTH_RANGE, "svt", 0.1, sensitivity=1, compositions=2),
          StageSpec(LABEL_HISTOGRAM, "laplace", 0.1, sensitivity=1),
          StageSpec(LENGTH_HISTOGRAM, "laplace", 0.1, sensitivity=1),
          StageSpec(KEYWORD_HISTOGRAM, "laplace", 0.1, sensitivity=1),
          StageSpec(SIMILARITY_THRESHOLD, "noisy_mean", 0.1, sensitivity=2.0),
          StageSpec(VOTING, "subsampled_gaussian", 0.2, compositions=2, sampling_rate=1.0),
          StageSpec(SELECTION, "limited_domain", 0.1, selections=2, domain_size=10,
                    delta=1e-7, monotonic=True),
          StageSpec(TOPIC_HISTOGRAM, "gaussian", 0.1, sensitivity=1)]


def _private(ledger: PrivacyLedger) -> Private:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) for _ in range(40)]
    data = PrivateDataset(texts, labels=["a", "b"] * 20, label_names=["a", "b"])
    return Private(data, ledger, NoiseSource(0), LocalEngine(HashEmbedder()))


def test_every_release_is_charged_under_the_stage_it_is_handed():
    plan = plan_budget(50.0, 1e-5, STAGES)
    ledger = PrivacyLedger(50.0, 1e-5)
    private = _private(ledger)
    embed = HashEmbedder().encode
    candidates = embed(WORDS)
    groups = np.arange(len(WORDS)) % 2
    low, high = private.length_range(plan.stage(LENGTH_RANGE), 20)
    private.label_distribution(plan.stage(LABEL_HISTOGRAM))
    private.length_histogram(plan.stage(LENGTH_HISTOGRAM), np.array([low, high + 1]))
    private.keyword_votes(plan.stage(KEYWORD_HISTOGRAM), candidates, groups)
    private.similarity_threshold(plan.stage(SIMILARITY_THRESHOLD), 8)
    private.nearest_votes(plan.stage(VOTING), candidates, groups)
    private.labelled_votes(plan.stage(VOTING), candidates, 2)
    private.select_parents(plan.stage(SELECTION), candidates, groups)
    cells = private.condition_distribution(plan.stage(TOPIC_HISTOGRAM), candidates[:3])
    private.close()
    assert cells.shape == (2, 3) and cells.sum() == pytest.approx(1.0)
    assert [c.stage for c in ledger.charges] == [
        LENGTH_RANGE, LENGTH_RANGE, LABEL_HISTOGRAM, LENGTH_HISTOGRAM, KEYWORD_HISTOGRAM,
        SIMILARITY_THRESHOLD, VOTING, VOTING, SELECTION, TOPIC_HISTOGRAM]
    for charge in ledger.charges:
        assert charge.event == plan.stage(charge.stage).mechanism.event
    assert private.spent() == ledger.spent() <= 50.0


def test_the_private_side_stays_in_the_process():
    private = _private(PrivacyLedger(1.0, 1e-5))
    with pytest.raises(TypeError, match="must not reach"):
        pickle.dumps(private)
    assert "invoice" not in repr(private)
    assert (private.label_names, private.n_units, private.records_per_unit) == (("a", "b"), 40,
                                                                                1)


def test_every_executor_the_config_accepts_has_an_engine():
    from typing import get_args

    from dpsynth.backends.config import ExecutorConfig

    assert set(get_args(ExecutorConfig.model_fields["name"].annotation)) == set(ENGINES)
