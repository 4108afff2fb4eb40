"""Commands that show what a node sees, for people learning the handoff (`kubelet-sim watch`)."""
