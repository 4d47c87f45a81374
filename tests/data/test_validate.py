"""Each validation error names the file, the row and the field, and never quotes the text."""

import pandas as pd
import pytest

from dpsynth.data import DataConfig
from dpsynth.data.validate import validate
from dpsynth.errors import DataError


def spec(**kw):
    return DataConfig(path="p.csv", label_column="label", **kw)


def frame(texts, labels=None):
    return pd.DataFrame({"text": texts, "label": labels or ["a", "b"] * (len(texts) // 2)})


def test_clean_table_passes_through():
    out = validate(frame(["one", "two", "three", "four"]), spec(), "p.csv")
    assert out.texts == ["one", "two", "three", "four"]
    assert out.labels == ["a", "b", "a", "b"]


def test_missing_column_lists_columns():
    with pytest.raises(DataError, match="p.csv: missing column 'body'; columns are: text, label"):
        validate(frame(["x", "y"]), DataConfig(path="p.csv", text_column="body"), "p.csv")


def test_no_rows():
    with pytest.raises(DataError, match="p.csv: has no rows"):
        validate(pd.DataFrame({"text": []}), DataConfig(path="p.csv"), "p.csv")


@pytest.mark.parametrize("bad", ["", "   \t "])
def test_empty_or_whitespace_text(bad):
    with pytest.raises(DataError, match=r"p.csv, row 3, field 'text': text is empty"):
        validate(frame(["a", "b", bad, "d"]), spec(), "p.csv")


def test_missing_text_value():
    with pytest.raises(DataError, match=r"row 2, field 'text': text is missing"):
        validate(pd.DataFrame({"text": ["a", None]}), DataConfig(path="p.csv"), "p.csv")


def test_missing_label():
    with pytest.raises(DataError, match=r"row 2, field 'label': label is missing"):
        validate(frame(["a", "b", "c", "d"], ["x", "", "x", "y"]), spec(), "p.csv")


def test_over_long_text_truncated_by_default():
    out = validate(frame(["x" * 50, "short"]), spec(max_chars=10), "p.csv")
    assert out.texts[0] == "x" * 10


def test_over_long_text_rejected_by_policy():
    secret = "confidential " * 10
    with pytest.raises(DataError, match=r"row 2, field 'text': text longer than") as info:
        validate(frame(["ok", secret]), spec(max_chars=20, over_length="reject"), "p.csv")
    assert "confidential" not in str(info.value)


def test_duplicates_are_kept_by_default():
    out = validate(frame(["a", "b", "a", "c"]), spec(), "p.csv")
    assert out.texts == ["a", "b", "a", "c"]


def test_drop_removes_repeats_within_a_user_only():
    texts = ["a", "b", "a", "a", "c", "d"]
    labels = ["x", "y", "x", "y", "x", "y"]
    table = pd.DataFrame({"text": texts, "label": labels,
                          "user": ["u1", "u1", "u1", "u2", "u2", "u3"]})
    out = validate(table, spec(duplicates="drop", user_column="user"), "p.csv")
    # u1's second "a" goes; u2's "a" stays: another unit's text never removes this unit's
    assert out.texts == ["a", "b", "a", "c", "d"]
    assert out.users == ["u1", "u1", "u2", "u2", "u3"]


def test_drop_without_users_is_a_config_error():
    with pytest.raises(ValueError, match="duplicates: drop needs a user_column"):
        spec(duplicates="drop")


def test_one_user_neither_adds_a_label_nor_stops_the_run():
    """The label set is declared (a run needs it), so a user with a label nobody else holds
    changes no label of the dataset and no abort: neighbours share their label set."""
    from dpsynth.data.load import load_private

    crowd = pd.DataFrame({"text": [f"common text {i}" for i in range(20)],
                          "label": ["a", "b"] * 10, "user": [f"u{i}" for i in range(20)]})
    victim = pd.DataFrame({"text": ["rare one", "rare two"], "label": ["z", "z"],
                           "user": ["victim", "victim"]})
    users = DataConfig(path="p.csv", label_column="label", labels=["a", "b", "z"],
                       user_column="user", max_records_per_user=2)
    without = load_private(users, frame=crowd)
    with_victim = load_private(users, frame=pd.concat([crowd, victim], ignore_index=True))
    assert without.label_names == with_victim.label_names == ("a", "b", "z")
    assert (without.n_units, with_victim.n_units) == (20, 21)
