"""The project's shape: the layer order and thread list of docs/architecture.md held to the code,
and bench/'s Docker floor."""
