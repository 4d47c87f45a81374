"""One module per recipe behind a common interface, each composed from `ctx.private`'s
releases and the public parts in `methods/parts/`."""
