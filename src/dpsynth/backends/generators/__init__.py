"""What prompted and local generators share: prompt sets, output cleaning, the local LM's
context and scores, the Hugging Face generator, and the wrappers that count outputs and name
labels."""
