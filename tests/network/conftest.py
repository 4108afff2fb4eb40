"""The pods' network: a Docker network of the test's own, and an API server in a container on
one, as on kind."""

from tests.kindlike import kindlike  # noqa: F401 (a fixture)
from tests.networks import network  # noqa: F401 (a fixture)
