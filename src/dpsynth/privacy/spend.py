"""What a recorded ledger spent, recomputed from its events: for readers of a run's
privacy.json (the report), which must not trust a stored total and need the figures, not a
ledger that could spend."""

from __future__ import annotations

from typing import Any

from dpsynth.privacy.ledger import PrivacyLedger


def recomputed_spend(recorded: dict[str, Any]) -> tuple[float, dict[str, dict[str, Any]]]:
    """ε spent and the per-stage breakdown (`PrivacyLedger.breakdown`) of a ledger dict, each
    recomputed from its recorded charges."""
    ledger = PrivacyLedger.from_dict(recorded)
    return ledger.spent(), ledger.breakdown()
