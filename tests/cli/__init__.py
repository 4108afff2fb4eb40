"""The commands a user runs: the agent's CLI, the demo, the web view, watch, trace, the handoff
stream and compare."""
