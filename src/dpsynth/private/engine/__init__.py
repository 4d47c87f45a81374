"""Where the private embeddings live and are searched: here, or on a Ray cluster's workers."""
