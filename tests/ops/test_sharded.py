"""Voters and PATE teachers sharded over Ray actors (`backends.executor: ray`) on a two-CPU
cluster this module starts on the loopback: the same histograms, topics, teacher votes and
seeded releases as the local engine, a ctcl run stopped after a checkpoint resuming on Ray to
the unbroken run, nothing private in Ray's object store or its logs, and actors that die with
the run."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpsynth.backends import build_embedder
from dpsynth.backends.config import EmbedderConfig, ExecutorConfig, TfidfConfig
from dpsynth.backends.ray_cluster import init_options, ray_session
from dpsynth.checkpoint import CheckpointStore
from dpsynth.cli import main
from dpsynth.data import Access, PrivateDataset
from dpsynth.errors import DpsynthError
from dpsynth.methods.base import RunContext
from dpsynth.methods.ctcl import Ctcl
from dpsynth.methods.parts.topics import TopicModel
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import SubsampledGaussianHistogram
from dpsynth.privacy.noise import NoiseSource, make_rng
from dpsynth.private import Private
from dpsynth.private.engine import ray as sharded
from dpsynth.private.engine.local import LocalEngine
from dpsynth.private.engine.nearest import private_voters
from dpsynth.private.engine.ray import RayEngine, ShardError
from dpsynth.private.engine.teachers import Teachers, train_teachers
from dpsynth.private.releases.voting import dp_nearest_votes
from tests.methods.fakes import CANARY, VOCAB, RecordingGenerator, ticket_texts
from tests.tiny_lm import one_torch_thread

ray = pytest.importorskip("ray")
EXECUTOR = ExecutorConfig(name="ray", workers=2, cpus_per_worker=0.5)
LABELS = list(VOCAB)


def on_ray(embedder_cfg: EmbedderConfig, executor: ExecutorConfig = EXECUTOR) -> RayEngine:
    return RayEngine(embedder_cfg, None, executor, allow_remote=False)


@pytest.fixture(scope="module")
def cluster():
    with ray_session(EXECUTOR.model_copy(update={"workers": 4})):  # two CPUs: two shardings
        yield ray


@pytest.fixture(scope="module")
def public_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("public") / "public.txt"
    path.write_text("\n".join(" ".join(words) for words in VOCAB.values()) + "\n"
                    + "\n".join(ticket_texts(40, seed=7)[0][1:]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def embedder_cfg(public_file) -> EmbedderConfig:
    return TfidfConfig(fit_texts=public_file, dim=16)


@pytest.fixture(scope="module")
def private() -> PrivateDataset:
    texts, labels = ticket_texts(101)
    return PrivateDataset(texts, labels=labels, label_names=LABELS)


@pytest.fixture(scope="module")
def both(cluster, private, embedder_cfg):
    """The local voters and sharded ones over the same records."""
    local = private_voters(private, private.embed(build_embedder(embedder_cfg)))
    remote = on_ray(embedder_cfg).voters(private)
    yield local, remote
    remote.close()


@pytest.fixture(scope="module")
def candidates(embedder_cfg):
    texts, labels = ticket_texts(30, seed=3)
    codes = np.array([LABELS.index(y) for y in labels])
    return build_embedder(embedder_cfg).encode(texts), codes


def _in_object_store() -> list:
    """The driver's objects Ray holds in its (spillable) object store rather than inline."""
    core = ray._private.worker.global_worker.core_worker
    # ids come as bytes, and as hex while a task's return is still pending
    refs = [ray.ObjectRef(bytes.fromhex(key if isinstance(key, str) else key.decode())
                          if len(key) == 56 else key)
            for key in core.get_all_reference_counts()]
    located = ray.experimental.get_object_locations(refs) if refs else {}
    return [ref for ref, where in located.items() if where["node_ids"]]


def test_a_cluster_of_the_runs_own_listens_on_the_loopback_and_does_not_spill(cluster):
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    options = init_options(EXECUTOR)
    assert options["_system_config"] == {"automatic_object_spilling_enabled": False}
    assert options["num_cpus"] == 1
    assert options["log_to_driver"] is False and options["include_dashboard"] is False
    spill = init_options(ExecutorConfig(name="ray", allow_object_spilling=True,
                                        spill_dir=Path("/secure/spill")))
    assert "/secure/spill" in spill["_system_config"]["object_spilling_config"]


def test_sharded_counts_are_the_local_histogram(both, candidates):
    local, remote = both
    embeddings, groups = candidates
    for search_groups in (groups, None):
        np.testing.assert_array_equal(remote.counts(embeddings, search_groups),
                                      local.counts(embeddings, search_groups))
    np.testing.assert_array_equal(remote.counts(embeddings, n_labels=len(LABELS)),
                                  local.counts(embeddings, n_labels=len(LABELS)))
    assert len(remote.votes(embeddings, groups)) == len(local.votes(embeddings, groups))


def test_a_seeded_subsampled_release_is_the_local_one(both, candidates):
    embeddings, groups = candidates
    answers = []
    for voters in both:
        ledger = PrivacyLedger(10.0, 1e-5)
        answers.append(dp_nearest_votes(voters, embeddings, groups,
                                        SubsampledGaussianHistogram(2.0, 0.5), ledger,
                                        make_rng(5), "voting"))
    np.testing.assert_array_equal(*answers)


def test_rows_come_from_the_shard_that_holds_them(both):
    local, remote = both
    for index in (0, 50, 51, 100):
        np.testing.assert_allclose(remote.embeddings[index], local.embeddings[index],
                                   rtol=1e-6)


def test_sharded_nearest_is_the_local_nearest(both, candidates):
    local, remote = both
    np.testing.assert_array_equal(remote.nearest(candidates[0]), local.nearest(candidates[0]))


def _driver_embeds(*args, **kwargs):
    raise AssertionError("the driver embedded private records")


def test_ctcl_topics_and_conditions_on_ray_are_the_local_ones(cluster, private, embedder_cfg,
                                                              candidates, tmp_path,
                                                              monkeypatch):
    """The shards send back each record's topic: the same topics and the same seeded (label,
    topic) histogram as a local run, and the driver embeds no private record."""
    model = TopicModel(candidates[0][:6], [[f"topic{i}"] for i in range(6)])
    recipe = Ctcl.from_config({"topic_model": str(model.save(tmp_path / "topics"))})
    plan = recipe.budget_plan(private, 4.0, 1e-5)
    answers = []
    embedder = build_embedder(embedder_cfg)
    for engine in (LocalEngine(embedder), on_ray(embedder_cfg)):
        if isinstance(engine, RayEngine):  # the shards embed, in processes of their own
            monkeypatch.setattr(PrivateDataset, "embed", _driver_embeds)
        side = Private(private, PrivacyLedger(4.0, 1e-5), NoiseSource(3), engine)
        ctx = RunContext(side, embedder, RecordingGenerator(),
                         CheckpointStore(tmp_path / type(engine).__name__), seed=0, plan=plan)
        try:
            cells = recipe.condition_distribution(ctx, plan)
            answers.append((side._voters().nearest(model.centroids), cells))
        finally:
            side.close()
    (topics, cells), (ray_topics, ray_cells) = answers
    assert len(np.unique(topics)) > 2 and np.shape(cells) == (len(LABELS), 6)
    np.testing.assert_array_equal(ray_topics, topics)
    assert ray_cells == cells


@pytest.mark.parametrize("soft_key", [None, b"s" * 16])
@pytest.mark.parametrize("n_records", [101, 2])
def test_sharded_teachers_vote_as_the_local_ones(cluster, private, embedder_cfg, candidates,
                                                 n_records, soft_key, monkeypatch):
    """The voters' actors become the teachers, each fit from the same rows as locally,
    relayed from the actors that embedded them: the same votes, hard or sampled soft (each
    teacher's draw keyed by its global id, not its place on an actor), and no actor started
    and nothing embedded after the voters (the first release may come before the teachers).
    With two records of one block the other block's actor holds none, yet is there (so where
    a teacher is fit follows from the config), and most teachers vote public."""
    one_block = sharded.shard_blocks(private.texts(Access.LEDGERED_OP), EXECUTOR.workers)[0]
    data = private.subset(range(n_records) if n_records > 2 else one_block[:2])
    negatives, queries = candidates[0][:12], candidates[0][12:]
    embedder = build_embedder(embedder_cfg)
    local = Teachers(train_teachers(data, lambda d: d.embed(embedder), negatives, 7,
                                    b"k" * 16, 0, labelled=True))
    engine = on_ray(embedder_cfg)
    voters = engine.voters(data)
    actors = list(voters._actors)
    monkeypatch.setattr(RayEngine, "_start", _driver_embeds)
    monkeypatch.setattr(PrivateDataset, "embed", _driver_embeds)
    remote = engine.teachers(data, voters, negatives, 7, b"k" * 16, 0, labelled=True)
    try:
        assert len(remote) == 7 and remote._actors == actors and voters._actors == []
        assert len(actors) == EXECUTOR.workers
        assert n_records > 2 or not all(len(b) for b in voters._blocks)
        votes = remote.votes(queries, 1 + len(LABELS), soft_key)
        np.testing.assert_array_equal(votes, local.votes(queries, 1 + len(LABELS), soft_key))
        assert votes.dtype == np.int64
        assert (votes.sum(axis=1) == 7).all() and (votes[:, 1:].any() or n_records < 101)
    finally:
        remote.close()


def test_nothing_private_is_stored_as_an_object(cluster, private, embedder_cfg, candidates,
                                                monkeypatch):
    monkeypatch.setattr(sharded, "INLINE_BYTES", 512)  # many pieces each way
    voters = on_ray(embedder_cfg).voters(private)
    try:
        assert _in_object_store() == []
        counts = voters.counts(np.repeat(candidates[0], 10, axis=0))  # 300 bins: 5 parts
        assert counts.sum() == private.n_records
        assert len(_in_object_store()) <= 1  # the public candidates at most
    finally:
        voters.close()
    engine = on_ray(embedder_cfg)
    voters, put = engine.voters(private), ray.put
    stored = []
    monkeypatch.setattr(ray, "put", lambda value, **kw: stored.append(value) or put(value, **kw))
    teachers = engine.teachers(private, voters, candidates[0][:12], 7, b"k" * 16, 0,
                               labelled=True)
    monkeypatch.setattr(ray, "put", put)
    try:
        assert len(stored) == 1 and np.array_equal(stored[0], candidates[0][:12])  # relay: none
        assert len(_in_object_store()) <= 1  # the public negatives at most
        votes = teachers.votes(np.repeat(candidates[0], 4, axis=0), 5)  # 600 cells: 10 parts
        assert (votes.sum(axis=1) == 7).all()
        assert len(_in_object_store()) <= 2  # and the public queries
    finally:
        teachers.close()


def _teachers(engine: RayEngine, private: PrivateDataset, negatives: np.ndarray):
    return engine.teachers(private, engine.voters(private), negatives, 3, b"k" * 16, 0)


@pytest.mark.parametrize("held", ["voters", "teachers"])
def test_actors_die_with_the_run(cluster, private, embedder_cfg, candidates, held):
    """`ray.kill` is asynchronous: on a loaded machine a call sent just after `close` may
    still be answered, but within seconds the actor, and the embeddings or teachers it held,
    are gone."""
    shards = (on_ray(embedder_cfg).voters(private) if held == "voters" else
              _teachers(on_ray(embedder_cfg), private, candidates[0][:12]))
    actor = shards._actors[0]
    shards.close()
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get(actor.kept.remote(1), timeout=30)
        except ray.exceptions.RayActorError:
            break
        assert time.monotonic() < deadline, "the actor still answers 30 s after close"
        time.sleep(0.5)


def test_an_actor_error_names_its_type_not_its_message():
    @sharded._quiet
    def fails():
        raise ValueError(CANARY)

    with pytest.raises(ShardError, match="ValueError") as caught:
        fails()
    assert CANARY not in str(caught.value)


RUNS = {"pe": {"iterations": 2, "n_output": 12},
        "kd_tutor": {"n_output": 12, "n_negatives": 24, "teachers": 5, "n_queries": 16,
                     "query_batch": 8},
        "ctcl": {"n_output": 12, "steps": 2, "batch_size": 16, "max_length": 32}}


@pytest.mark.parametrize("recipe", ["pe", "kd_tutor",
                                    pytest.param("ctcl", marks=pytest.mark.slow)])
def test_a_run_on_ray_is_the_local_run_and_logs_no_private_text(cluster, tmp_path, public_file,
                                                                embedder_cfg, monkeypatch,
                                                                request, recipe):
    """Same data, seed and seeded noise: the same synthetic set and spend; the driver embeds
    no private record, and no worker log holds a private text."""
    params = dict(RUNS[recipe])
    if recipe == "ctcl":  # the tiny LM, and a topic per label's words
        pytest.importorskip("opacus")
        params["model"] = str(request.getfixturevalue("tiny_lm"))
        topics = [" ".join(words) for words in VOCAB.values()]
        params["topic_model"] = str(TopicModel(
            build_embedder(embedder_cfg).encode(topics), [t.split()[:2] for t in topics]
        ).save(tmp_path / "topics"))
    texts, labels = ticket_texts(120)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    monkeypatch.setattr("dpsynth.run.models.build_generator",
                        lambda *a, **k: RecordingGenerator())
    outputs = {}
    for name in ("local", "ray"):
        if name == "ray":
            monkeypatch.setattr(PrivateDataset, "embed", _driver_embeds)
        raw = {"data": {"path": "private.csv", "label_column": "label", "labels": LABELS},
               "budget": {"epsilon": 2.0, "noise": "seeded_not_private"},
               "recipe": {"name": recipe, "params": params},
               "backends": {"embedder": {"name": "tfidf", "fit_texts": str(public_file),
                                         "dim": 16},
                            "executor": {"name": name, "cpus_per_worker": 0.5}},
               "output": {"dir": str(tmp_path / name)}, "seed": 11}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw))
        with one_torch_thread() if recipe == "ctcl" else contextlib.nullcontext():
            main(["run", str(tmp_path / f"{name}.yaml")])
        outputs[name] = pd.read_csv(tmp_path / name / "synthetic.csv")
    pd.testing.assert_frame_equal(outputs["local"], outputs["ray"])
    spent = [json.loads((tmp_path / n / "privacy.json").read_text())["spent"]["epsilon"]
             for n in outputs]
    assert spent[0] == pytest.approx(spent[1])
    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    for path in logs.rglob("*"):
        if path.is_file():
            content = path.read_text(errors="ignore")
            assert CANARY not in content and texts[5] not in content, path


def _ctcl_config(folder: Path, executor: str, tiny_lm: Path, embedder_cfg: EmbedderConfig,
                 public_file: Path) -> Path:
    """A seeded ctcl run of `RUNS`' sizes over 4 training steps, checkpointed every 2, on
    `executor`, writing to folder/executor; the config file's path."""
    topics = [" ".join(words) for words in VOCAB.values()]
    model = folder / "topics"
    if not model.exists():
        TopicModel(build_embedder(embedder_cfg).encode(topics),
                   [t.split()[:2] for t in topics]).save(model)
    params = {**RUNS["ctcl"], "steps": 4, "checkpoint_every": 2, "model": str(tiny_lm),
              "topic_model": str(model)}
    raw = {"data": {"path": "private.csv", "label_column": "label", "labels": LABELS},
           "budget": {"epsilon": 2.0, "noise": "seeded_not_private"},
           "recipe": {"name": "ctcl", "params": params},
           "backends": {"embedder": {"name": "tfidf", "fit_texts": str(public_file), "dim": 16},
                        "executor": {"name": executor, "cpus_per_worker": 0.5}},
           "output": {"dir": str(folder / executor)}, "seed": 11}
    path = folder / f"{executor}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _cli(config: Path) -> int:
    try:
        with one_torch_thread():
            main(["run", str(config)])
    except SystemExit as exc:
        return exc.code
    return 0


def _journal(folder: Path) -> list[dict]:
    """The output folder's release journal: header, charges and noisy answers, in order; the
    header without the data file's path (each run reads its own copy)."""
    lines = [json.loads(line) for line in
             (folder / "checkpoints" / "releases.jsonl").read_text().splitlines()]
    assert Path(lines[0]["header"]["data"].pop("path")).name == "private.csv"
    return lines


@pytest.fixture(scope="module")
def ctcl_unbroken(cluster, tmp_path_factory, tiny_lm, embedder_cfg, public_file):
    """An uninterrupted seeded local ctcl run over the private CSV (its folder, its texts)."""
    pytest.importorskip("opacus")
    folder = tmp_path_factory.mktemp("ctcl_unbroken")
    texts, labels = ticket_texts(120)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(folder / "private.csv", index=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("dpsynth.run.models.build_generator", lambda *a, **k: RecordingGenerator())
        assert _cli(_ctcl_config(folder, "local", tiny_lm, embedder_cfg, public_file)) == 0
    return folder / "local", texts


@pytest.mark.slow
@pytest.mark.parametrize("stop_after", [0, 2], ids=["conditions", "training-step-2"])
def test_ctcl_stopped_on_ray_resumes_on_ray_to_the_unbroken_run(
        cluster, tmp_path, tiny_lm, embedder_cfg, public_file, ctcl_unbroken, monkeypatch,
        capsys, stop_after):
    """Ctrl-C right after a checkpoint (step 0: the (label, topic) histogram is released;
    step 2: and two DP-Adam steps), then the same config again, both on Ray: the resumed run
    finds each record's topic again on the shards (the driver embeds nothing), replays the
    journal instead of releasing again, and ends with the unbroken local run's synthetic set,
    journal and spend; no private text in the output folder, the driver's output, or a Ray
    log."""
    unbroken, texts = ctcl_unbroken
    (tmp_path / "private.csv").write_bytes((unbroken.parent / "private.csv").read_bytes())
    config = _ctcl_config(tmp_path, "ray", tiny_lm, embedder_cfg, public_file)
    out = tmp_path / "ray"
    monkeypatch.setattr("dpsynth.run.models.build_generator",
                        lambda *a, **k: RecordingGenerator())
    monkeypatch.setattr(PrivateDataset, "embed", _driver_embeds)
    sharded_voters = []
    voters = RayEngine.voters
    monkeypatch.setattr(RayEngine, "voters",
                        lambda self, private: sharded_voters.append(voters(self, private))
                        or sharded_voters[-1])
    save = CheckpointStore.save

    def save_then_stop(self, step, state):
        path = save(self, step, state)
        if step == stop_after:
            raise KeyboardInterrupt
        return path

    with monkeypatch.context() as patch:
        patch.setattr(CheckpointStore, "save", save_then_stop)
        assert _cli(config) == 130
    stopped = json.loads((out / "privacy.json").read_text())
    assert stopped["complete"] is False and stopped["stopped"] == "interrupted"
    assert ([c["stage"] for c in stopped["charges"]]
            == ["topic_histogram"] + ["training"] * stop_after)
    assert CheckpointStore(out / "checkpoints").latest()[0] == stop_after
    assert len(sharded_voters) == 1 and sharded_voters[0]._actors == []  # closed at the stop

    assert _cli(config) == 0
    assert len(sharded_voters) == 2  # the topics again, from the shards
    journal, whole = _journal(out), _journal(unbroken)
    stages = [line["charge"]["stage"] for line in journal if "charge" in line]
    assert stages == ["topic_histogram"] + ["training"] * 4  # each release once
    assert journal == whole
    privacy = json.loads((out / "privacy.json").read_text())
    spent = json.loads((unbroken / "privacy.json").read_text())
    assert privacy["complete"] is True and privacy["charges"] == spent["charges"]
    assert privacy["spent"] == pytest.approx(spent["spent"])
    pd.testing.assert_frame_equal(pd.read_csv(out / "synthetic.csv"),
                                  pd.read_csv(unbroken / "synthetic.csv"))

    private = [t.encode() for t in texts]  # the canary first
    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    files = [p for p in [*out.rglob("*"), *logs.rglob("*")] if p.is_file()]
    assert out / "run.log" in files and out / "checkpoints" / "releases.jsonl" in files
    for path in files:
        content = path.read_bytes()
        assert not any(text in content for text in private), path
    printed = "".join(capsys.readouterr())
    assert "resumes it from" in printed and not any(t in printed for t in texts)


def test_shards_the_cluster_cannot_hold_are_refused_not_awaited(cluster, private,
                                                                  embedder_cfg):
    with pytest.raises(DpsynthError, match="workers"):
        on_ray(embedder_cfg).voters(private.subset([0]))
    with pytest.raises(DpsynthError, match="need 9 CPUs"):
        on_ray(embedder_cfg, EXECUTOR.model_copy(update={"workers": 9, "cpus_per_worker": 1.0})
               ).voters(private)
