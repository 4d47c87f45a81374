import pytest

from dpsynth.cli import main


def test_report_command_writes_the_page(run_dir, capsys):
    main(["report", str(run_dir), "--log-level", "warning"])
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert '<section id="privacy-diagnostics">' in page
    assert "report.html" in capsys.readouterr().out


def test_report_command_rejects_a_missing_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path / "absent")])
    assert done.value.code == 2
    assert "not a run folder" in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, "notes.txt"])
def test_report_command_rejects_a_folder_that_is_not_a_run(tmp_path, capsys, content):
    if content:
        (tmp_path / content).write_text("not a run")
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path)])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "not a run folder" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "report.html").exists()
