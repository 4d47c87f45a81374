from collections import Counter

import numpy as np
import pytest

from dpsynth.data.bounding import bound_contributions


def _texts(users):
    return [f"{u} record {i}" for i, u in enumerate(users)]


def test_at_most_k_records_per_user_and_reproducible():
    users = ["u1"] * 10 + ["u2"] * 3 + ["u3"]
    kept, units = bound_contributions(users, _texts(users), k=2)
    counts = Counter(users[i] for i in kept)
    assert counts == {"u1": 2, "u2": 2, "u3": 1}
    assert list(kept) == sorted(kept)
    assert len(set(units.tolist())) == 3
    again, _ = bound_contributions(users, _texts(users), k=2)
    np.testing.assert_array_equal(kept, again)


def test_choice_is_spread_over_a_users_records():
    picks = {int(bound_contributions(["u"] * 20, [f"{s} text {i}" for i in range(20)], k=1)[0][0])
             for s in range(40)}
    assert len(picks) > 10


def test_adding_a_user_keeps_every_other_users_records():
    rng = np.random.default_rng(0)
    users = [f"u{int(u)}" for u in rng.integers(0, 30, size=200)]
    texts = _texts(users)
    kept, _ = bound_contributions(users, texts, k=1)
    for position in (0, 100, 200):  # the new user at the start, middle and end of the file
        more_users = users[:position] + ["new"] * 3 + users[position:]
        more_texts = [*texts[:position], "n1", "n2", "n3", *texts[position:]]
        kept2, _ = bound_contributions(more_users, more_texts, k=1)
        before = {(users[i], texts[i]) for i in kept}
        after = {(more_users[i], more_texts[i]) for i in kept2}
        assert after - before == {next(p for p in after if p[0] == "new")}
        assert before <= after


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        bound_contributions(["a"], ["t"], k=0)
