import pytest

from dpsynth.checkpoint import CheckpointStore
from dpsynth.data import PrivateDataset


def test_latest_is_the_highest_step(tmp_path):
    store = CheckpointStore(tmp_path / "ckpt")
    assert store.latest() is None
    store.save(1, {"population": ["a"], "rng": {"state": 1}})
    store.save(12, {"population": ["b", "c"]})
    store.save(3, {"population": []})
    assert store.latest() == (12, {"population": ["b", "c"]})
    assert not list((tmp_path / "ckpt").glob("*.tmp"))


def test_a_private_dataset_cannot_be_checkpointed(tmp_path):
    store = CheckpointStore(tmp_path)
    with pytest.raises(TypeError, match="not JSON serializable"):
        store.save(1, {"data": PrivateDataset(["secret"])})
    assert store.latest() is None
    assert not list(tmp_path.iterdir())


def test_the_latest_checkpoint_is_the_highest_step_not_the_last_name(tmp_path):
    store = CheckpointStore(tmp_path)
    for step in (99_950, 100_000, 7):
        store.save(step, {"step": step})
    assert store.latest() == (100_000, {"step": 100_000})
