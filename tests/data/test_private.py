"""The private dataset shows counts only, refuses pickling and gates its texts by purpose."""

import copy
import logging
import pickle

import numpy as np
import pytest

from dpsynth.data import Access, PrivateDataset
from dpsynth.errors import InputError

CANARIES = ["canary-7f3a my diagnosis is secret", "canary-91bc account 4417-0032"]


@pytest.fixture
def dataset():
    return PrivateDataset([*CANARIES, "ordinary text"], labels=["x", "y", "x"],
                          label_names=["x", "y"])


def test_repr_and_str_show_counts_only(dataset):
    for shown in (repr(dataset), str(dataset), f"{dataset}", f"{dataset!s:>10}"):
        assert shown == "PrivateDataset(units=3, labels=2)"


def test_logging_the_dataset_leaks_no_text(dataset, caplog):
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("dpsynth.test").info("loaded %s %r", dataset, dataset)
        dataset.texts(Access.LOCAL_EMBEDDING)
    assert caplog.records
    for canary in CANARIES:
        assert canary not in caplog.text


@pytest.mark.parametrize("dump", [pickle.dumps, copy.copy, copy.deepcopy])
def test_refuses_pickling_and_copies(dataset, dump):
    with pytest.raises(TypeError, match="refuses to be pickled"):
        dump(dataset)


def test_texts_need_a_named_purpose(dataset):
    assert dataset.texts(Access.LOCAL_DP_TRAINING)[0] == CANARIES[0]
    with pytest.raises(TypeError, match="name the purpose"):
        dataset.texts("because")  # type: ignore[arg-type]


def test_private_labels_only_for_ledgered_ops(dataset):
    np.testing.assert_array_equal(dataset.label_codes(Access.LEDGERED_OP), [0, 1, 0])
    with pytest.raises(TypeError, match="ledgered ops|charge the ledger"):
        dataset.label_codes(Access.LOCAL_EMBEDDING)


class _Embedder:
    def __init__(self, remote):
        self.is_remote = remote
        self.seen = None

    def encode(self, texts):
        self.seen = list(texts)
        return np.ones((len(texts), 2), dtype=np.float32)


def test_remote_embedder_refused_without_opt_in(dataset):
    remote = _Embedder(remote=True)
    with pytest.raises(InputError, match="refusing to send private text to a remote embedder"):
        dataset.embed(remote)
    assert remote.seen is None


def test_remote_embedder_with_opt_in_warns(dataset, caplog):
    with caplog.at_level(logging.WARNING):
        out = dataset.embed(_Embedder(remote=True), allow_remote=True)
    assert out.shape == (3, 2)
    assert "remote embedder" in caplog.text


def test_local_embedder_sees_texts(dataset):
    local = _Embedder(remote=False)
    dataset.embed(local)
    assert local.seen == [*CANARIES, "ordinary text"]


def test_declared_label_set_is_kept_and_checked():
    ds = PrivateDataset(["a", "b"], labels=["y", "y"], label_names=["x", "y"])
    assert ds.label_names == ("x", "y")
    with pytest.raises(InputError, match="not in the declared label set"):
        PrivateDataset(["a"], labels=["z"], label_names=["x", "y"])


def test_labels_without_their_declared_set_are_refused():
    with pytest.raises(InputError, match="need their declared label set"):
        PrivateDataset(["a", "b"], labels=["x", "y"])


def test_units_and_records_per_unit():
    with pytest.raises(InputError, match="more than records_per_unit=1"):
        PrivateDataset(["a", "b", "c", "d"], units=[0, 0, 1, 2])
    ds = PrivateDataset(["a", "b", "c", "d"], units=[0, 0, 1, 2], records_per_unit=3)
    assert (ds.n_records, ds.n_units, ds.records_per_unit) == (4, 3, 3)
    sub = ds.subset([2, 3])
    assert (sub.n_records, sub.n_units, sub.records_per_unit) == (2, 2, 3)
