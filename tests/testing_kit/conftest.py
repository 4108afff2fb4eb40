"""The pytest plugin, its Cluster and the reference node: joining a cluster that runs in a
container, as kind's does."""

from tests.kindlike import kindlike  # noqa: F401 (a fixture)
