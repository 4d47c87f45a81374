"""The bundled example: a fictional private set and the config that runs it."""

from pathlib import Path

EXAMPLE_CONFIG = Path(__file__).resolve().parent / "support_tickets.yaml"
