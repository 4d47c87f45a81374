from collections import Counter

import numpy as np
import pytest

from dpsynth.data.bounding import bound_contributions


def test_at_most_k_records_per_user_and_reproducible():
    users = ["u1"] * 10 + ["u2"] * 3 + ["u3"]
    kept, units = bound_contributions(users, k=2, seed=1)
    counts = Counter(users[i] for i in kept)
    assert counts == {"u1": 2, "u2": 2, "u3": 1}
    assert list(kept) == sorted(kept)
    assert len(set(units.tolist())) == 3
    again, _ = bound_contributions(users, k=2, seed=1)
    np.testing.assert_array_equal(kept, again)


def test_choice_is_spread_over_a_users_records():
    users = ["u"] * 20
    picks = {int(bound_contributions(users, k=1, seed=s)[0][0]) for s in range(40)}
    assert len(picks) > 10


def test_k_must_be_positive():
    with pytest.raises(ValueError):
        bound_contributions(["a"], k=0, seed=0)
