"""One module per recipe, each composed from ops behind a common interface."""
