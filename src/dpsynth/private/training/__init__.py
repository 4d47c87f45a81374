"""DP training of a public LM on private sequences, and its checkpointed state."""
