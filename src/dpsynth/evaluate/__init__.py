"""Utility, fidelity and privacy metrics for synthetic datasets."""
