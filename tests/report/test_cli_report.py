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
