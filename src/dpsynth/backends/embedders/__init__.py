"""Embedders by name: MiniLM and other sentence-transformers folders, TF-IDF/LSA fitted on
public text, and an OpenAI-compatible embeddings endpoint."""
