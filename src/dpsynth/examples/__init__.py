"""The bundled example: a fictional private set and the config that runs it."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE_CONFIG = HERE / "support_tickets.yaml"
EXAMPLE_DATA = HERE / "support_tickets.csv"
"""400 fictional support tickets (text, label, user_id): a private set to try dpsynth on."""
EXAMPLE_LABELS = ["account", "billing", "shipping", "technical"]
EXAMPLE_POOL = HERE / "support_forum.txt"
"""Public posts of the same products' (fictional) help forum: a `pool` generator's corpus."""
