"""Self-contained HTML reports of a run: `write_report(run_dir)`."""

from dpsynth.report.html import REPORT_FILE, SECTIONS, render, write_report
from dpsynth.report.inputs import RunArtifacts, load_run

__all__ = ["REPORT_FILE", "SECTIONS", "RunArtifacts", "load_run", "render", "write_report"]
