"""Pods from start to end on one node: pods the cluster binds there itself (a real control
plane's DaemonSets) are told apart from the test's own."""

from tests.others import others_on_node  # noqa: F401 (a fixture)
