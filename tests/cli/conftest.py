"""The commands: the UI is reached from a Docker network of the test's own."""

from tests.networks import network  # noqa: F401 (a fixture)
