"""Reading and writing every supported format, and the errors for unreadable files."""

import pandas as pd
import pytest

from dpsynth.data import read_table, write_table
from dpsynth.errors import DataError

FRAME = pd.DataFrame({"text": ["first ticket", "second, with a comma", "third \"quoted\""],
                      "label": ["a", "b", "a"]})


@pytest.mark.parametrize("name", ["d.csv", "d.tsv", "d.jsonl", "d.parquet", "d_hf"])
def test_round_trip(tmp_path, name):
    fmt = "hf" if name == "d_hf" else None
    path = write_table(FRAME, tmp_path / name, fmt)
    back = read_table(path)
    pd.testing.assert_frame_equal(back[["text", "label"]].astype(str), FRAME)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"nope\.csv: file not found"):
        read_table(tmp_path / "nope.csv")


def test_empty_file(tmp_path):
    (tmp_path / "e.csv").write_text("  \n")
    with pytest.raises(DataError, match="e.csv: file is empty"):
        read_table(tmp_path / "e.csv")


def test_non_utf8_bytes_name_the_row_as_validation_numbers_it(tmp_path):
    (tmp_path / "bad.csv").write_bytes(b"text,label\nfine,a\ncaf\xe9,b\n")
    with pytest.raises(DataError, match=r"bad.csv: bytes that are not UTF-8 at row 2 \(line 3\)"):
        read_table(tmp_path / "bad.csv")
    (tmp_path / "bad.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl: bytes that are not UTF-8 at line 2,"):
        read_table(tmp_path / "bad.jsonl")


def test_bad_jsonl_line_names_the_row(tmp_path):
    (tmp_path / "b.jsonl").write_text('{"text": "ok"}\n{"text": oops}\n')
    with pytest.raises(DataError, match=r"b.jsonl, row 2: invalid JSON"):
        read_table(tmp_path / "b.jsonl")


def test_unknown_suffix(tmp_path):
    (tmp_path / "d.xlsx").write_text("x")
    with pytest.raises(DataError, match="cannot tell the format"):
        read_table(tmp_path / "d.xlsx")


def test_parquet_bytes_that_are_not_utf8(tmp_path):
    pd.DataFrame({"text": [b"good", b"\xff\xfe"]}).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(DataError, match=r"b.parquet, row 2, field 'text': bytes that are not"):
        read_table(tmp_path / "b.parquet")


def test_one_jsonl_record_cannot_change_the_type_of_the_others(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "user": 9007199254740993}\n'
                    '{"text": "b", "user": 2}\n{"text": "c", "user": 1.5}\n')
    users = [str(u) for u in read_table(path)["user"]]
    assert users == ["9007199254740993", "2", "1.5"]


@pytest.mark.parametrize("name", ["out.csv", "out.tsv"])
def test_a_lone_carriage_return_stays_inside_its_row(tmp_path, name):
    """pandas writes a lone \\r unquoted, and a reader splits the row there: quoted, each
    record comes back whole, in its own row."""
    frame = pd.DataFrame({"text": ["first\rsecond", "plain"], "label": ["a", "b"]})
    back = read_table(write_table(frame, tmp_path / name))
    assert back["text"].tolist() == ["first\rsecond", "plain"]
    assert back["label"].tolist() == ["a", "b"]


def test_a_table_without_one_keeps_minimal_quoting(tmp_path):
    frame = pd.DataFrame({"text": ["plain", "with, comma"], "label": ["a", "b"]})
    written = write_table(frame, tmp_path / "out.csv").read_text(encoding="utf-8")
    assert written.splitlines()[:2] == ["text,label", "plain,a"]
