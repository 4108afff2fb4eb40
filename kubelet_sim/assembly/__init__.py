"""Putting nodes together: the process's shared parts, one node's parts, a set of nodes."""
