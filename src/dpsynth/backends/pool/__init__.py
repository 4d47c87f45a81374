"""The pool generator: DP selection among public texts, their index of embeddings, and an
optional LM that edits what it retrieves."""
