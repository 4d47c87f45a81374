"""Canary records planted in a private set never reach stdout, stderr or run.log."""


import pandas as pd
import pytest
import yaml

from dpsynth.cli import main

CANARIES = [f"canary-{i:02d}-zq{i * 7919} my secret account number is {i * 104729}"
            for i in range(5)]


@pytest.fixture
def private_config(tmp_path):
    texts = CANARIES + [f"ordinary support ticket number {i}" for i in range(40)]
    frame = pd.DataFrame({"text": texts, "label": ["a", "b"] * (len(texts) // 2) + ["a"],
                          "user": [f"u{i % 20}" for i in range(len(texts))]})
    frame.to_csv(tmp_path / "private.csv", index=False)
    config = {"data": {"path": "private.csv", "label_column": "label", "labels": ["a", "b"],
                       "user_column": "user", "max_records_per_user": 1},
              "budget": {"epsilon": 1.0},
              # the small LM keeps this fast; what is checked does not depend on the generator
              "backends": {"generator": {"name": "offline"}},
              "recipe": {"name": "dpga", "params": {
                  "iterations": 2, "n_init": 16, "n_output": 6, "n_rewrite": 4, "n_fill": 4,
                  "n_crossover": 4, "n_generate": 4, "max_words": 40, "length_bins": 5,
                  "keyword_probe_samples": 3}},
              "output": {"dir": str(tmp_path / "out")}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


@pytest.mark.parametrize("command", ["plan", "run"])
def test_no_canary_in_any_output(private_config, command, capsys):
    try:
        main([command, str(private_config / "run.yaml"), "--log-level", "debug"])
    except SystemExit as done:  # the command must finish, or its outputs prove nothing
        assert done.code in (0, None)
    captured = capsys.readouterr()
    if command == "run":
        assert (private_config / "out" / "synthetic.csv").is_file()
    logs = [p.read_text() for p in (private_config / "out").glob("*.log")]
    if command == "run":
        assert logs and "private data" in logs[0]
    for text in [captured.out, captured.err, *logs]:
        for canary in CANARIES:
            assert canary not in text
            assert canary.split()[0] not in text


def test_an_unexpected_error_says_where_it_arose_not_what_it_quoted(private_config, capsys,
                                                                    monkeypatch):
    """A library's message may quote the private value it failed on: the CLI shows the
    exception types and code locations only, unless DPSYNTH_TRACEBACK=1 asks for more."""
    from dpsynth.methods.registry import RECIPES

    def crash(self, ctx):
        try:
            float(CANARIES[0])
        except ValueError as exc:
            raise RuntimeError(f"no such record: {CANARIES[1]}") from exc

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")  # its context is the crash above

    monkeypatch.setattr(RECIPES["dpga"], "run", crash)
    argv = ["run", str(private_config / "run.yaml"), "--log-level", "debug"]
    with monkeypatch.context() as patched, pytest.raises(SystemExit) as done:
        patched.setattr("dpsynth.run.outputs._write_privacy", disk_full)
        main(argv)
    assert done.value.code == 1
    err = capsys.readouterr().err
    assert "internal error" in err and "builtins.RuntimeError" in err
    assert "builtins.ValueError" in err and "test_no_leaks.py" in err
    logs = [p.read_text() for p in (private_config / "out").glob("*.log")]
    assert "could not write privacy.json" in logs[0] and "builtins.OSError" in logs[0]
    for text in [err, *logs]:
        assert not any(canary.split()[0] in text for canary in CANARIES)
    monkeypatch.setenv("DPSYNTH_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match=CANARIES[1].split()[0]):
        main(argv)


def test_an_error_outside_exception_is_shown_without_its_message_too(private_config, capsys,
                                                                      monkeypatch):
    """BaseException subclasses other than Ctrl-C and exit (asyncio's CancelledError, say)
    would reach Python's default hook, which prints their message."""
    import asyncio

    from dpsynth.methods.registry import RECIPES

    def cancelled(self, ctx):
        raise asyncio.CancelledError(CANARIES[2])

    monkeypatch.setattr(RECIPES["dpga"], "run", cancelled)
    with pytest.raises(SystemExit) as done:
        main(["run", str(private_config / "run.yaml")])
    assert done.value.code == 1
    err = capsys.readouterr().err
    assert "CancelledError" in err and CANARIES[2].split()[0] not in err


def test_dp_decoding_puts_the_canaries_in_the_local_lms_context_only(private_config, capsys,
                                                                    monkeypatch):
    """DP decoding reads private records into the local LM's context (a tiny GPT-2 through
    the hf generator): no canary reaches stdout, stderr, the log, any file of the run
    folder (journal, checkpoints, metrics, privacy.json, the synthetic set), the model
    folder, the generator's cache or the temporary folder."""
    import tempfile

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.methods.fakes import tiny_context_lm
    from tests.tiny_lm import one_torch_thread

    lm = tiny_context_lm()
    folder = private_config / "tiny-gpt2"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    config = yaml.safe_load((private_config / "run.yaml").read_text())
    config["backends"]["generator"] = {"name": "hf", "model": str(folder),
                                       "cache": str(private_config / "cache" / "gen.sqlite")}
    scratch = private_config / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    config["recipe"] = {"name": "dp_decoding", "params": {
        "n_output": 6, "batch_size": 4, "max_tokens": 6, "forward_batch": 4}}
    (private_config / "run.yaml").write_text(yaml.safe_dump(config))
    with one_torch_thread():
        try:
            main(["run", str(private_config / "run.yaml"), "--log-level", "debug"])
        except SystemExit as done:
            assert done.code in (0, None)
    captured = capsys.readouterr()
    files = [p for p in (private_config / "out").rglob("*") if p.is_file()]
    assert any(p.name == "synthetic.csv" for p in files)
    files += [p for where in (folder, private_config / "cache", scratch)
              for p in where.rglob("*") if p.is_file()]
    texts = [captured.out, captured.err, *(p.read_text(errors="ignore") for p in files)]
    for text in texts:
        for canary in CANARIES:
            assert canary.split()[0] not in text
