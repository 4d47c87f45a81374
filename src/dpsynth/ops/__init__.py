"""Reusable DP building blocks over text; each op that reads private data charges the ledger."""
