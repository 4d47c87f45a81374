"""Private embeddings out of core: on a file with no name, the same votes and releases as in
memory, and a vote's memory bounded by its blocks rather than by the number of records."""

import tempfile
import tracemalloc
from pathlib import Path

import numpy as np

from dpsynth.data import Access, PrivateDataset
from dpsynth.data.scratch import scratch_array
from dpsynth.privacy import LimitedDomainTopK, PrivacyLedger, SubsampledGaussianHistogram, make_rng
from dpsynth.private.engine import nearest
from dpsynth.private.engine.nearest import private_voters
from dpsynth.private.releases.limited_domain import dp_select_parents
from dpsynth.private.releases.voting import dp_nearest_votes

DIM = 256
WORDS = np.array("order refund late parcel login password invoice screen crash charge".split())


class ByteEmbedder:
    """Each text's byte histogram, unit-normalised: local, deterministic and cheap."""

    is_remote = False

    def encode(self, texts):
        rows = np.stack([np.bincount(np.frombuffer(t.encode(), np.uint8), minlength=DIM)
                         for t in texts]).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def records(n: int, seed: int = 0) -> PrivateDataset:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, 6)) + f" {i}" for i in range(n)]
    return PrivateDataset(texts, labels=[str(y) for y in rng.integers(0, 3, n)],
                          label_names=["0", "1", "2"])


def candidates(n: int = 30) -> tuple[np.ndarray, np.ndarray]:
    return ByteEmbedder().encode([f"{w} {w} candidate {i}" for i, w in
                                  enumerate(np.resize(WORDS, n))]), np.arange(n) % 3


def test_a_large_array_lives_on_a_file_with_no_name(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    array = scratch_array(1000, 8, in_memory_bytes=0)
    array[:] = 1.5
    assert isinstance(array, np.memmap) and float(array.sum()) == 12_000
    assert list(tmp_path.iterdir()) == []  # no path, even while the run holds the array
    maps = Path("/proc/self/maps")
    if maps.exists():  # Linux: the mapping's file is already deleted, and goes with it
        assert _mapped_from(maps, tmp_path) and all(
            line.endswith("(deleted)") for line in _mapped_from(maps, tmp_path))
        del array
        assert _mapped_from(maps, tmp_path) == []


def _mapped_from(maps: Path, folder: Path) -> list[str]:
    return [line for line in maps.read_text().splitlines() if str(folder) in line]


def test_small_arrays_stay_in_memory():
    assert not isinstance(scratch_array(10, 8, in_memory_bytes=320), np.memmap)
    assert isinstance(scratch_array(11, 8, in_memory_bytes=320), np.memmap)


def test_out_of_core_gives_the_in_memory_votes_and_releases(monkeypatch):
    monkeypatch.setattr(nearest, "STREAM_ROWS", 100)
    private, embedder = records(1500), ByteEmbedder()
    in_memory = private.embed(embedder, block_rows=128, in_memory_bytes=1 << 30)
    on_disk = private.embed(embedder, block_rows=128, in_memory_bytes=0)
    assert not isinstance(in_memory, np.memmap) and isinstance(on_disk, np.memmap)
    np.testing.assert_array_equal(in_memory, on_disk)
    np.testing.assert_array_equal(on_disk,
                                  embedder.encode(private.texts(Access.LOCAL_EMBEDDING)))
    cands, groups = candidates()

    def releases(embeddings):  # seeded noise: the same draws on both paths
        voters = private_voters(private, embeddings)
        ledger, noise = PrivacyLedger(50.0, 1e-5), make_rng(7)
        votes = dp_nearest_votes(voters, cands, groups, SubsampledGaussianHistogram(2.0, 0.5),
                                 ledger, noise, "voting")
        parents = dp_select_parents(voters, cands, groups,
                                    LimitedDomainTopK(2.0, 1e-6, domain_size=5, k=3), ledger,
                                    noise, "selection")
        return votes, parents

    (votes, parents), (votes_ooc, parents_ooc) = releases(in_memory), releases(on_disk)
    np.testing.assert_array_equal(votes, votes_ooc)
    assert parents == parents_ooc


def _vote_peak_bytes(private: PrivateDataset, in_memory_bytes: int) -> int:
    """Peak heap while embedding the records and voting once (the dataset already loaded)."""
    cands, groups = candidates()
    tracemalloc.start()
    try:
        embeddings = private.embed(ByteEmbedder(), block_rows=256,
                                   in_memory_bytes=in_memory_bytes)
        dp_nearest_votes(private_voters(private, embeddings), cands, groups,
                         SubsampledGaussianHistogram(2.0, 0.5), PrivacyLedger(50.0, 1e-5),
                         make_rng(0), "voting")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_voting_memory_grows_by_bytes_per_record_not_by_embeddings(monkeypatch):
    """An embedding row is DIM * 4 = 1 KiB; out of core, each extra record adds only its share
    of the index arrays (vote targets: 8 bytes), far below that. In memory, the same measure
    sees the rows: the test can tell the two apart."""
    monkeypatch.setattr(nearest, "STREAM_ROWS", 256)
    small, large = records(2000), records(8000)
    _vote_peak_bytes(records(10), 0)  # first-call allocations (imports, caches) out of the way

    def per_record(in_memory_bytes: int) -> float:
        return (_vote_peak_bytes(large, in_memory_bytes)
                - _vote_peak_bytes(small, in_memory_bytes)) / 6000

    assert per_record(0) < 32
    assert per_record(1 << 30) > DIM * 4
