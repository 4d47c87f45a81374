"""Self-contained HTML reports of a run."""
