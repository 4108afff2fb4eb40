"""A pod's life on the node, from the scheduler's handoff to its ending: status, probes, hooks,
sidecars, restarts, volumes and the downward API, static pods, the warm sandbox pool."""
