"""`dpsynth run` writes `text` and `label` whatever the private columns are called; `dpsynth
eval --text-column review --label-column sentiment` must still read that synthetic set."""

from dpsynth.evaluate.suite import EvalConfig, _synthetic_table


def test_the_synthetic_set_falls_back_to_the_columns_dpsynth_writes(tmp_path):
    (tmp_path / "s.csv").write_text("text,label\nthe parcel is late,shipping\nrefund,billing\n")
    table = _synthetic_table(tmp_path / "s.csv",
                             EvalConfig(text_column="review", label_column="sentiment"))
    assert table.texts == ["the parcel is late", "refund"]
    assert table.labels == ["shipping", "billing"]


def test_named_columns_win_where_the_synthetic_set_has_them(tmp_path):
    (tmp_path / "s.csv").write_text("review,sentiment,text\ngood film,pos,x\nbad film,neg,y\n")
    table = _synthetic_table(tmp_path / "s.csv",
                             EvalConfig(text_column="review", label_column="sentiment"))
    assert table.texts == ["good film", "bad film"] and table.labels == ["pos", "neg"]
