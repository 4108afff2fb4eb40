"""Shared fixtures: the API cluster (fake or real) and the Docker engine with local images."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_fixture import *  # noqa: F403
from tests.cluster import *  # noqa: F403
from tests.cluster import api_mode
from tests.docker_env import *  # noqa: F403
from tests.mounts import unmount_all_under
from tests.reference import reference_node  # noqa: F401 (a fixture: the upstream kubelet's node)
from tests.server_probes import KUBELET_CLIENT_CA_ENV

# Many agents run at once (both passes, subprocess agents among them): each one's kubelet API
# takes a free port (advertised in its Node) rather than all asking for 10250.
os.environ.setdefault("KUBELET_SIM_PORT", "0")


def pytest_configure(config: pytest.Config) -> None:
    """A given kubelet-client CA that is no file stops the session at once, in one line."""
    given = os.environ.get(KUBELET_CLIENT_CA_ENV)
    if given and not Path(given).is_file():
        raise pytest.UsageError(f"{KUBELET_CLIENT_CA_ENV}={given}: no such file")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the real API server: run only tests that talk to one (or start their own control
    plane, as kubelet_sim.testing does: the pass where its binaries are known to be), skip
    those needing a fault hook."""
    if api_mode() != "real":
        return
    keep, drop = [], []
    for item in items:
        uses_api = "cluster_session" in getattr(item, "fixturenames", ())
        own_plane = item.get_closest_marker("own_control_plane") is not None
        (keep if uses_api or own_plane else drop).append(item)
        if uses_api and item.get_closest_marker("fake_only"):
            item.add_marker(pytest.mark.skip(reason="needs a fault hook of the fake API server"))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _through_api_server(request: pytest.FixtureRequest) -> None:
    """A test marked `through_api_server` skips first, with one line, where the API server's
    kubelet-client certificate is one the tests' nodes cannot verify (a cluster of the user's
    whose signer the kubeconfig does not name and KUBELET_SIM_TEST_KUBELET_CLIENT_CA does not
    give: `ApiUnderTest.require_kubelet_client_ca`)."""
    if request.node.get_closest_marker("through_api_server") is None:
        return
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").require_kubelet_client_ca()


@pytest.fixture(autouse=True)
def _no_mounts_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """The agent leaves running pods alone when it stops, as the kubelet does, and with them
    their tmpfs and subPath mounts: a test's directory must not keep them once it is over."""
    used = "tmp_path" in request.fixturenames
    tmp_path = request.getfixturevalue("tmp_path") if used else None  # torn down after this
    yield
    if tmp_path is not None:
        unmount_all_under(tmp_path)
