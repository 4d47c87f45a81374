"""How a run stops: a backend that cannot answer fails fast with one line and no privacy
spend; Ctrl-C exits 130 saying where the run stopped and how to resume; a stopped run's spend
is in privacy.json, marked incomplete, and in its report; a finished run is not run again."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from dpsynth.backends.base import BackendError
from dpsynth.backends.config import OpenAIChatConfig, OpenAIEmbeddingsConfig
from dpsynth.backends.factory import build_generator
from dpsynth.backends.http.loopback import LoopbackServer
from dpsynth.cli import main
from dpsynth.run import run
from tests.methods.fakes import CANARY, HashEmbedder, RecordingGenerator, ticket_texts
from tests.methods.test_recipes import make_config

PE = {"iterations": 3, "n_output": 12, "label_fraction": 0.0,
      "length_fraction": 0.0}  # every release is a vote


@pytest.fixture
def tickets():
    return ticket_texts(160)


def journal_charges(folder):
    lines = (folder / "checkpoints" / "releases.jsonl").read_text().splitlines()
    return [json.loads(line)["charge"] for line in lines if '"charge"' in line]


def privacy(folder):
    return json.loads((folder / "privacy.json").read_text())


def openai(url, **http):
    return build_generator(OpenAIChatConfig(
        base_url=url, model="loopback", concurrency=4,
        http={"max_retries": 1, "backoff_s": 0.01, "max_backoff_s": 0.02, **http}))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_run_config(tmp_path, generator, out="out", embedder=None):
    texts, labels = ticket_texts(120)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "private.csv",
                                                          index=False)
    (tmp_path / "public.txt").write_text("\n".join(
        f"a public sentence about {w} and the weather" for w in
        ("billing", "parcels", "wifi", "passwords", "refunds", "couriers", "screens")) + "\n")
    config = {"data": {"path": "private.csv", "label_column": "label",
                       "labels": sorted(set(labels))},
              "budget": {"epsilon": 2.0}, "recipe": {"name": "pe", "params": PE},
              "backends": {"generator": generator,
                           "embedder": embedder or {"name": "tfidf", "fit_texts": "public.txt",
                                                    "dim": 8}},
              "output": {"dir": str(tmp_path / out)}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def one_line(err, prefix):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def test_a_dead_endpoint_fails_within_30_s_in_one_line_with_no_spend(tmp_path):
    port = free_port()  # nothing listens there
    config = write_run_config(tmp_path, {"name": "openai", "model": "m",
                                         "base_url": f"http://127.0.0.1:{port}/v1"})
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "dpsynth", "run", str(config),
                             "--log-level", "error"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "COLUMNS": "200"})
    elapsed = time.monotonic() - start
    assert result.returncode == 1, result.stderr
    assert elapsed < 30
    line = one_line(result.stderr, "error: ")
    assert f"backends.generator (openai, http://127.0.0.1:{port}/v1, model m)" in line
    assert "cannot answer: connection error" in line
    out = tmp_path / "out"
    assert journal_charges(out) == []
    spend = privacy(out)
    assert spend["complete"] is False and spend["stopped"] == "failed (BackendError)"
    assert spend["charges"] == [] and spend["spent"]["epsilon"] == 0


def test_a_server_answering_5xx_is_caught_before_any_release(tmp_path, tickets):
    with LoopbackServer(faults=["503", "503"]) as server:
        with pytest.raises(BackendError, match=r"backends\.generator \(openai, .*cannot "
                                               r"answer: HTTP 503"):
            run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
                generator=openai(server.url))
        assert len(server.records) == 2  # one tiny request and its retry, nothing more
    assert journal_charges(tmp_path / "out") == []
    assert privacy(tmp_path / "out")["complete"] is False


def test_generations_that_all_fail_stop_the_run_before_a_release(tmp_path, tickets):
    """The server answers the health check, then fails every request: the first batch stops
    the run with the last HTTP error, and nothing is charged for its empty population."""
    server = LoopbackServer()

    def answer_then_break(messages, body):
        server.inject(*["500"] * 1000)
        return "OK"

    server.responder = answer_then_break
    with server:
        with pytest.raises(BackendError) as info:
            run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
                generator=openai(server.url))
        prompts = "\n".join(server.user_prompts())
    message = str(info.value)
    assert "backends.generator (openai" in message
    assert "all 12 outputs of a generate call failed (last error: HTTP 500" in message
    assert "\n" not in message
    assert journal_charges(tmp_path / "out") == []
    assert privacy(tmp_path / "out")["stopped"] == "failed (BackendError)"
    assert CANARY not in prompts and CANARY not in message


def test_a_healthy_openai_backend_runs_through(tmp_path, tickets):
    with LoopbackServer() as server:
        outputs = run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
                      generator=openai(server.url))
    assert outputs.result.texts
    assert server.records[0].body["messages"][-1]["content"].startswith("Reply with")
    assert privacy(tmp_path / "out")["complete"] is True


class InterruptingGenerator(RecordingGenerator):
    def __init__(self, at_call):
        super().__init__()
        self.at_call = at_call

    def _record(self, *items):
        super()._record(*items)
        if self.calls == self.at_call:
            raise KeyboardInterrupt


@pytest.fixture
def local_backends(monkeypatch):
    """`dpsynth run` with the recipe tests' local fakes in place of the config's backends."""
    generators = []
    monkeypatch.setattr("dpsynth.run.models.build_embedder", lambda *a, **k: HashEmbedder())
    monkeypatch.setattr("dpsynth.run.models.build_generator",
                        lambda *a, **k: generators.pop(0))
    return generators


def cli(*argv):
    try:
        main(list(argv))
    except SystemExit as exc:
        return exc.code
    return 0


def test_ctrl_c_exits_130_saying_where_and_how_to_resume_and_the_spend_stays_visible(
        tmp_path, capsys, local_backends):
    from dpsynth.report import write_report

    config = write_run_config(tmp_path, {"name": "offline"})
    out = tmp_path / "out"
    local_backends.append(InterruptingGenerator(at_call=3))  # in iteration 2: 2 votes made
    assert cli("run", str(config), "--log-level", "error") == 130
    line = one_line(capsys.readouterr().err, "interrupted: the run stopped at checkpoint step")
    assert "after 2 release(s): ε = " in line and str(out / "privacy.json") in line
    assert f"`dpsynth run {config}` resumes it from {out}" in line

    spend = privacy(out)
    assert spend["complete"] is False and spend["stopped"] == "interrupted"
    assert spend["charges"] == journal_charges(out) and len(spend["charges"]) == 2
    assert 0 < spend["spent"]["epsilon"] < 2.0
    page = write_report(out).read_text()
    assert "no privacy.json" not in page and "Incomplete run (interrupted)" in page
    assert f"{spend['spent']['epsilon']:.4g}"[:4] in page

    local_backends.append(RecordingGenerator())  # resume: finishes, charging each vote once
    assert cli("run", str(config), "--log-level", "error") == 0
    assert [c["stage"] for c in journal_charges(out)] == ["voting"] * 3
    assert privacy(out)["complete"] is True and "stopped" not in privacy(out)


def test_rerunning_a_finished_run_says_it_is_complete_and_releases_nothing(
        tmp_path, capsys, local_backends):
    config = write_run_config(tmp_path, {"name": "offline"})
    out = tmp_path / "out"
    local_backends.append(RecordingGenerator())
    assert cli("run", str(config), "--log-level", "error") == 0
    journal = (out / "checkpoints" / "releases.jsonl").read_text()
    synthetic = (out / "synthetic.csv").read_text()
    capsys.readouterr()

    assert cli("run", str(config), "--log-level", "error") == 0  # no generator is built
    captured = capsys.readouterr()
    assert "this run is already complete" in captured.out and str(out) in captured.out
    assert captured.err == ""  # no "stay charged", no over-budget error
    assert (out / "checkpoints" / "releases.jsonl").read_text() == journal
    assert (out / "synthetic.csv").read_text() == synthetic
    assert privacy(out)["complete"] is True

    changed = yaml.safe_load(config.read_text())
    changed["recipe"]["params"]["iterations"] = 2
    config.write_text(yaml.safe_dump(changed))
    assert cli("run", str(config), "--log-level", "error") == 2
    one_line(capsys.readouterr().err, f"error: {out}: holds a finished run made with another "
                                      "config (it differs in recipe)")


def test_a_held_out_section_added_to_a_finished_run_scores_it_and_releases_nothing(
        tmp_path, capsys, local_backends):
    """held_out reads real records kept out of data.path and releases nothing: a finished
    run rerun with it scores the output it has; data, budget or recipe still count as
    another config."""
    config = write_run_config(tmp_path, {"name": "offline"})
    out = tmp_path / "out"
    local_backends.append(RecordingGenerator())
    assert cli("run", str(config), "--log-level", "error") == 0
    before = {name: (out / name).read_bytes() for name in
              ("privacy.json", "synthetic.csv", "checkpoints/releases.jsonl")}
    summary = " ".join(capsys.readouterr().out.split())
    synthetic = pd.read_csv(out / "synthetic.csv")
    counts = synthetic["label"].value_counts()
    assert f"({len(synthetic)} records: " in summary  # the summary counts each label
    assert all(f"{label} {n}" in summary for label, n in counts.items())

    marker = out / "checkpoints" / "complete.json"  # as an older dpsynth wrote it: without
    done = json.loads(marker.read_text())  # keys added since (None by default), with one
    del done["config"]["data"]["label_names"]  # removed since
    done["config"]["data"]["min_examples_per_label"] = 2
    # and, before per-backend configs, every backend's keys in each backend section
    done["config"]["backends"]["generator"] |= {"concurrency": 8, "max_texts": 10000,
                                                "http": {"timeout_s": 60.0}}
    done["config"]["backends"]["embedder"] |= {"batch_size": 64, "concurrency": 4}
    marker.write_text(json.dumps(done))
    texts, labels = ticket_texts(40, seed=9)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tmp_path / "held.csv", index=False)
    raw = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**raw, "held_out": {"path": "held.csv"}}))
    assert cli("run", str(config), "--log-level", "error") == 0  # no generator is built
    captured = capsys.readouterr()
    assert "this run is already complete" in captured.out
    assert "worth:" in captured.out and "held.csv" in captured.out
    assert captured.err == ""
    assert {name: (out / name).read_bytes() for name in before} == before  # no release
    assert (out / "eval" / "metrics.json").exists()
    assert json.loads((out / "config.json").read_text())["held_out"]["path"] == "held.csv"

    for section, change in [("budget", {"epsilon": 3.0}),
                            ("recipe", {"name": "pe", "params": {**PE, "iterations": 2}}),
                            ("data", {**raw["data"], "max_chars": 100})]:
        config.write_text(yaml.safe_dump({**raw, "held_out": {"path": "held.csv"},
                                          section: change}))
        assert cli("run", str(config), "--log-level", "error") == 2
        line = one_line(capsys.readouterr().err, f"error: {out}: ")
        assert line.endswith("use a new output folder")
        assert section == "budget" or f"(it differs in {section})" in line
    assert {name: (out / name).read_bytes() for name in before} == before


def test_the_api_returns_a_finished_runs_outputs(tmp_path, tickets):
    config = make_config(tmp_path, tickets, "pe", **PE)
    first = run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    again = run(config, embedder=HashEmbedder(), generator=RecordingGenerator())
    assert again.already_complete and not first.already_complete
    assert again.result.texts == first.result.texts
    assert again.result.labels == first.result.labels
    assert again.ledger.to_dict()["charges"] == first.ledger.to_dict()["charges"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; timeout, Slurm
def test_a_real_signal_mid_run_exits_130_in_one_line(tmp_path, signum):
    with LoopbackServer(latency_s=0.2) as server:  # seconds of work left after a vote
        config = write_run_config(tmp_path, {"name": "openai", "model": "m",
                                             "base_url": server.url, "concurrency": 1})
        process = subprocess.Popen([sys.executable, "-m", "dpsynth", "run", str(config),
                                    "--log-level", "error"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "COLUMNS": "200"})
        journal = tmp_path / "out" / "checkpoints" / "releases.jsonl"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            if journal.exists() and journal_charges(tmp_path / "out"):
                break
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be interrupted"
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    # 130, or death by SIGINT, which a shell also reports as 130 (128 + 2): under heavy load
    # CPython sometimes ends a process whose KeyboardInterrupt was handled that way (seen
    # in full-suite runs at load 4-5, never alone; cause not found)
    assert process.returncode in (130, -signal.SIGINT), err
    one_line(err, "interrupted: the run stopped ")
    spend = privacy(tmp_path / "out")
    assert spend["stopped"] == "interrupted"
    assert spend["charges"] == journal_charges(tmp_path / "out")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_whose_interrupt_was_lost_still_stops_the_next_release(signum):
    """Python drops a KeyboardInterrupt raised inside some callbacks; the ledger still
    refuses every release after the signal, and the handlers are restored afterwards."""
    from dp_accounting import dp_event

    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.stops import signals_stop_the_run

    before = signal.getsignal(signum)
    ledger = PrivacyLedger(2.0, 1e-5)
    with signals_stop_the_run():
        ledger.charge("vote", dp_event.GaussianDpEvent(10.0))
        try:
            os.kill(os.getpid(), signum)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt:
            pass  # swallowed, as a library callback would
        with pytest.raises(KeyboardInterrupt):
            ledger.charge("vote", dp_event.GaussianDpEvent(10.0))
        assert len(ledger.charges) == 1
    assert signal.getsignal(signum) is before
    ledger.charge("vote", dp_event.GaussianDpEvent(10.0))  # the request ends with the run
    assert len(ledger.charges) == 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_an_interrupt_turned_into_another_error_is_still_the_stop():
    """A signal that lands inside an import can leave as a RuntimeError (seen in a full-suite
    run: the CLI then called it an internal error and exited 1); after a stop was asked for,
    it leaves the run as the stop. Without one, an error stays an error."""
    from dpsynth.stops import signals_stop_the_run

    with pytest.raises(KeyboardInterrupt) as stopped, signals_stop_the_run():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
        except KeyboardInterrupt as exc:
            raise RuntimeError("an import cut short") from exc
    assert isinstance(stopped.value.__cause__, RuntimeError)
    with pytest.raises(RuntimeError), signals_stop_the_run():
        raise RuntimeError("a plain error")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_repeated_signal_does_not_cut_short_the_written_spend():
    """While a stopping run writes privacy.json a second Ctrl-C is held back (it would leave
    the file behind the journal); the stop stays asked for. Off the main thread the block
    installs nothing and still runs."""
    import threading

    from dp_accounting import dp_event

    from dpsynth.privacy.ledger import PrivacyLedger
    from dpsynth.stops import shielded, signals_stop_the_run

    ledger = PrivacyLedger(2.0, 1e-5)
    with signals_stop_the_run():
        with shielded():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # not raised here
            written = True
        with pytest.raises(KeyboardInterrupt):
            ledger.charge("vote", dp_event.GaussianDpEvent(10.0))
    assert written and ledger.charges == []
    ran = []

    def elsewhere():
        with signals_stop_the_run():
            ran.append(True)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert ran == [True]


class EmptyGenerator(RecordingGenerator):
    """A local generator that produces nothing usable (not remote: no health check)."""

    def generate(self, conditions):
        super().generate(conditions)
        return [""] * len(conditions)


def test_a_local_generator_with_no_usable_output_spends_nothing(tmp_path, tickets):
    from dpsynth.errors import DpsynthError

    with pytest.raises(DpsynthError, match="no candidates to vote on"):
        run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
            generator=EmptyGenerator())
    assert journal_charges(tmp_path / "out") == []
    assert privacy(tmp_path / "out")["spent"]["epsilon"] == 0


def test_a_refused_model_is_named_at_the_health_check(tmp_path, tickets):
    with LoopbackServer(faults=["404"]) as server:
        with pytest.raises(BackendError, match=r"cannot answer: http://127\.0\.0\.1:\d+/v1/"
                                               r"chat/completions answered HTTP 404"):
            run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
                generator=openai(server.url))
        assert len(server.records) == 1  # no retry fixes a wrong URL or model
    assert journal_charges(tmp_path / "out") == []


def test_a_dead_remote_embedder_is_caught_before_any_release(tmp_path, tickets):
    from dpsynth.backends.factory import build_embedder

    embedder = build_embedder(OpenAIEmbeddingsConfig(
        model="e", base_url=f"http://127.0.0.1:{free_port()}/v1",
        http={"max_retries": 1, "backoff_s": 0.01}))
    with pytest.raises(BackendError, match=r"backends\.embedder \(openai, .*cannot answer: "
                                           r"connection error"):
        run(make_config(tmp_path, tickets, "pe", **PE), embedder=embedder,
            generator=RecordingGenerator())
    assert journal_charges(tmp_path / "out") == []


def test_a_pools_dead_remote_editor_is_caught_before_any_release(tmp_path, tickets):
    from dpsynth.backends.pool.edit import EditedPool

    port = free_port()
    generator = EditedPool(RecordingGenerator(), openai(f"http://127.0.0.1:{port}/v1"), 0.3)
    with pytest.raises(BackendError, match=rf"backends\.generator \(openai, http://127\.0\.0\.1:"
                                           rf"{port}/v1, model loopback\) cannot answer"):
        run(make_config(tmp_path, tickets, "pe", **PE), embedder=HashEmbedder(),
            generator=generator)
    assert journal_charges(tmp_path / "out") == []


def test_a_dropped_keyboard_interrupt_prints_no_traceback_and_other_errors_still_do(
        monkeypatch):
    """A signal landing in a weakref callback during an import raises KeyboardInterrupt where
    Python can only drop it; its report printed "Exception ignored in ... Traceback" beside
    the stopped run's one line (seen in a full-suite run). Other dropped errors still reach
    the hook that was there before, which is back once the run ends."""
    import weakref

    from dpsynth.stops import signals_stop_the_run

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(type(u.exc_value)))

    class Target:
        pass

    def dropped(error):
        def callback(_):
            raise error
        target = Target()
        ref = weakref.ref(target, callback)  # noqa: F841 (the callback needs it alive)
        del target

    with signals_stop_the_run():
        dropped(KeyboardInterrupt())
        dropped(ValueError("a real bug"))
    assert reported == [ValueError]
    dropped(KeyboardInterrupt())  # outside a run: the previous hook's again
    assert reported == [ValueError, KeyboardInterrupt]
