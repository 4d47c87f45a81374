import math

import pytest

from dpsynth.errors import InputError
from dpsynth.evaluate import canary_exposure, make_canaries, plant_canaries
from dpsynth.evaluate.canaries import plant_canaries_in_file, read_canaries
from dpsynth.evaluate.tables import read_text_table

BACKGROUND = [f"ticket {i}: the parcel for order {i} arrived late and the box was damaged"
              for i in range(200)]


def test_canaries_are_distinct_and_split_in_half():
    canaries = make_canaries(20, seed=1)
    assert len(canaries.planted) == len(canaries.reference) == 20
    assert len(set(canaries.planted + canaries.reference)) == 40
    assert make_canaries(20, seed=1) == canaries
    with pytest.raises(InputError, match="k must be"):
        make_canaries(0, seed=1)


def test_plant_inserts_every_canary_with_a_known_label():
    canaries = make_canaries(5, seed=2)
    labels = ["late", "damaged"] * 100
    texts, new_labels = plant_canaries(BACKGROUND, labels, canaries, seed=3, repeats=2)
    assert len(texts) == len(BACKGROUND) + 10 and len(new_labels) == len(texts)
    for canary in canaries.planted:
        assert texts.count(canary) == 2
    assert not any(c in texts for c in canaries.reference)
    assert set(new_labels) == {"late", "damaged"}
    unlabelled, none = plant_canaries(BACKGROUND, None, canaries, seed=3)
    assert none is None and len(unlabelled) == len(BACKGROUND) + 5


def test_exposure_high_when_the_output_copies_canaries():
    canaries = make_canaries(30, seed=4)
    leaky = BACKGROUND + list(canaries.planted)
    out = canary_exposure(canaries, leaky)
    assert out["auc"] == 1.0
    assert out["verbatim"] == 30
    assert out["mean_exposure_bits"] == pytest.approx(math.log2(31))


def test_exposure_at_chance_when_the_output_ignores_them():
    canaries = make_canaries(50, seed=5)
    out = canary_exposure(canaries, BACKGROUND)
    assert out["verbatim"] == 0
    assert 0.3 < out["auc"] < 0.7
    assert out["mean_exposure_bits"] < 2.5


def test_partial_echo_lies_between():
    canaries = make_canaries(40, seed=6)
    half = BACKGROUND + list(canaries.planted[:20])
    out = canary_exposure(canaries, half)
    assert out["verbatim"] == 20
    assert 0.6 < out["auc"] < 1.0


def test_planting_in_a_file_round_trips(tmp_path):
    import pandas as pd

    pd.DataFrame({"text": BACKGROUND[:30], "label": ["a", "b"] * 15,
                  "user": [f"u{i}" for i in range(30)], "note": ["x"] * 30}).to_csv(
        tmp_path / "private.csv", index=False)
    canaries = plant_canaries_in_file(tmp_path / "private.csv", tmp_path / "planted.csv",
                                      k=4, seed=7, user_column="user")
    planted = read_text_table(tmp_path / "planted.csv")
    assert len(planted) == 34 and all(c in planted.texts for c in canaries.planted)
    assert set(planted.labels) == {"a", "b"}
    frame = pd.read_csv(tmp_path / "planted.csv", keep_default_na=False)
    canary_rows = frame[frame["text"].isin(canaries.planted)]
    assert canary_rows["user"].nunique() == 4 and set(canary_rows["note"]) == {""}
    assert read_canaries(tmp_path / "planted.csv.canaries.json") == canaries
