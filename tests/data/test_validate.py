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


def test_a_label_read_from_the_data_with_one_example_is_refused_a_declared_one_is_not():
    texts, labels = ["a", "b", "c", "d", "e"], ["x", "x", "lonely", "y", "y"]
    with pytest.raises(DataError, match=r"row 3, field 'label': the label has 1 example") as info:
        validate(frame(texts, labels), spec(), "p.csv")
    assert "lonely" not in str(info.value)  # read from the data: it could be private text
    # declared, the label set is public whatever its counts: nothing one record could flip
    out = validate(frame(texts, labels), spec(labels=["x", "y", "lonely"]), "p.csv")
    assert out.labels == labels


def test_over_long_text_truncated_by_default():
    out = validate(frame(["x" * 50, "short"]), spec(max_chars=10, min_examples_per_label=1),
                   "p.csv")
    assert out.texts[0] == "x" * 10


def test_over_long_text_rejected_by_policy():
    secret = "confidential " * 10
    with pytest.raises(DataError, match=r"row 2, field 'text': text longer than") as info:
        validate(frame(["ok", secret]), spec(max_chars=20, over_length="reject",
                                             min_examples_per_label=1), "p.csv")
    assert "confidential" not in str(info.value)


def test_duplicates_are_kept_by_default():
    out = validate(frame(["a", "b", "a", "c"]), spec(min_examples_per_label=1), "p.csv")
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


def test_label_count_row_refers_to_the_file_after_dropping_duplicates():
    table = pd.DataFrame({"text": ["a", "a", "b", "c", "d", "e"],
                          "label": ["x", "x", "x", "y", "y", "z"], "user": list("uuvwxy")})
    from dpsynth.data.load import load_private

    with pytest.raises(DataError, match=r"row 6, field 'label': the label has 1 user"):
        load_private(spec(duplicates="drop", user_column="user"), frame=table)


def test_a_label_counts_users_not_records_so_one_user_cannot_add_it():
    """Without data.labels the label set is read from the data: one user's two records of a
    label of their own must not put it there (a user-level neighbour would then differ in
    its label set, which no charge covers)."""
    from dpsynth.data.load import load_private

    crowd = pd.DataFrame({"text": [f"common text {i}" for i in range(20)],
                          "label": ["a", "b"] * 10, "user": [f"u{i}" for i in range(20)]})
    victim = pd.DataFrame({"text": ["rare one", "rare two"], "label": ["z", "z"],
                           "user": ["victim", "victim"]})
    users = DataConfig(path="p.csv", label_column="label", user_column="user",
                       max_records_per_user=2)
    assert load_private(users, frame=crowd).label_names == ("a", "b")
    with pytest.raises(DataError, match=r"row 21, field 'label': the label has 1 user\(s\) "
                       r"after data.max_records_per_user, fewer than "
                       r"data.min_examples_per_label=2") as info:
        load_private(users, frame=pd.concat([crowd, victim], ignore_index=True))
    assert "rare" not in str(info.value) and "'z'" not in str(info.value)
    # a second user holding the label makes it a label of the data
    other = victim.assign(user=["victim", "other"])
    both = load_private(users, frame=pd.concat([crowd, other], ignore_index=True))
    assert both.label_names == ("a", "b", "z")
