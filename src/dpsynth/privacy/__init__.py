"""Privacy core: mechanisms, calibration and the ledger. No text knowledge here."""
