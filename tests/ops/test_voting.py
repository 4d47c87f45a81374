"""DP nearest-neighbour votes: one vote per unit, within its own label, one charge."""

import numpy as np
import pytest

from dpsynth.errors import InputError
from dpsynth.privacy import PrivacyLedger, SubsampledGaussianHistogram, make_rng
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.releases.voting import dp_labelled_votes, dp_nearest_votes


def test_votes_count_each_record_once_within_its_label():
    candidates = np.eye(3, dtype=np.float32)
    voters = Voters(np.eye(3, dtype=np.float32)[[0, 0, 1, 2, 2]], np.array([0, 0, 1, 1, 1]))
    ledger = PrivacyLedger(1000.0, 1e-5)
    mech = SubsampledGaussianHistogram(0.1, 1.0)
    votes = dp_nearest_votes(voters, candidates, np.array([0, 1, 1]), mech, ledger, make_rng(0),
                             "voting")
    np.testing.assert_allclose(votes, [2, 1, 2], atol=0.5)
    assert [c.stage for c in ledger.charges] == ["voting"]


def test_labelled_votes_count_each_record_once_in_its_own_labels_cell():
    """Records vote over every candidate, whatever it was generated for: candidate 2 takes
    votes of both labels, each in its label's column."""
    candidates = np.eye(3, dtype=np.float32)
    voters = Voters(np.eye(3, dtype=np.float32)[[0, 0, 2, 2, 2]], np.array([0, 0, 1, 1, 0]))
    ledger = PrivacyLedger(1000.0, 1e-5)
    mech = SubsampledGaussianHistogram(0.1, 1.0)
    cells = dp_labelled_votes(voters, candidates, 2, mech, ledger, make_rng(0), "voting")
    np.testing.assert_allclose(cells, [[2, 0], [0, 0], [1, 2]], atol=0.5)
    assert [c.stage for c in ledger.charges] == ["voting"]
    assert ledger.charges[0].event == mech.event  # the charge of one vote per candidate


def test_votes_need_one_record_per_unit():
    with pytest.raises(InputError, match="max_records_per_user: 1"):
        dp_nearest_votes(Voters(np.eye(2)), np.eye(2), None,
                         SubsampledGaussianHistogram(1.0, 1.0), PrivacyLedger(1.0, 1e-5),
                         make_rng(0), "voting", records_per_unit=2)
