"""The DP releases: each reads private data, charges the ledger and returns the noisy answer."""
