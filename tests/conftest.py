"""Shared fixtures: the API cluster (fake or real) and the Docker engine with local images."""

from tests.agent_fixture import *  # noqa: F403
from tests.cluster import *  # noqa: F403
from tests.docker_env import *  # noqa: F403
