"""Shared fixtures: the API cluster (fake or real) and the Docker engine with local images."""

import pytest

from tests.agent_fixture import *  # noqa: F403
from tests.cluster import *  # noqa: F403
from tests.cluster import api_mode
from tests.docker_env import *  # noqa: F403


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the real API server: run only tests that talk to one, skip those needing a fault hook."""
    if api_mode() != "real":
        return
    keep, drop = [], []
    for item in items:
        uses_api = "cluster_session" in getattr(item, "fixturenames", ())
        (keep if uses_api else drop).append(item)
        if uses_api and item.get_closest_marker("fake_only"):
            item.add_marker(pytest.mark.skip(reason="needs a fault hook of the fake API server"))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
