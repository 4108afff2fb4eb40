"""`kubectl logs` and `kubectl exec` reach a pod on a virtual node whatever the API server's
--kubelet-preferred-address-types: the upstream default (Hostname first, the flag left out)
and kubeadm's (InternalIP first, as kind runs it).

The Node advertises a Hostname address only when its name leads to the node IP
(`node_object.addresses`); a test node's random name resolves nowhere, so the Hostname-first
server must fall through to InternalIP, where it used to fail with `lookup <node>: no such
host`. A node named `localhost` (which resolves to its node IP, 127.0.0.1) keeps its Hostname
address, and the Hostname-first server dials it by that name.

These tests start a control plane of their own per preference (module-scoped, one at a time)
and override the suite's `cluster` fixture with a namespace on it; they use no API server of
the suite's, so they run in the pass that runs tests without one (the fake pass: on the real
pass `conftest.pytest_collection_modifyitems` keeps only tests on `cluster_session`). Without
the control-plane binaries or kubectl they skip and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim.controlplane.cluster import UPSTREAM_ADDRESS_TYPES
from kubelet_sim.node.host import resolve_name
from tests.cluster import ApiUnderTest, control_plane_session, new_cluster, wait_for
from tests.kubectl import KUBECTL
from tests.kubectl import kubectl as run_kubectl
from tests.kubeenv import KubeEnv, KubeEnvError, find_binaries
from tests.kubelet_api import Node, node
from tests.pods import container, make_pod, running_ready, wait_status

__all__ = ["node"]  # the fixture

pytestmark = pytest.mark.docker

KUBEADM_ADDRESS_TYPES = "InternalIP,ExternalIP,Hostname"  # kubeadm's, so kind's
# None: the flag left out, so kube-apiserver's own default (UPSTREAM_ADDRESS_TYPES) applies
PREFERENCES = {"hostname-first": None, "internalip-first": KUBEADM_ADDRESS_TYPES}
GREETING = "hello from the virtual node"


@pytest.fixture(scope="module", params=list(PREFERENCES.values()), ids=list(PREFERENCES))
def plane(request: pytest.FixtureRequest) -> Iterator[KubeEnv]:
    """A control plane whose API server prefers the address types of the parameter."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed here")
    try:
        binaries = find_binaries()
    except KubeEnvError as exc:
        pytest.skip(f"needs control-plane binaries: {exc}".splitlines()[0])
    env = KubeEnv(binaries, preferred_address_types=request.param).start()
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture
def cluster(plane: KubeEnv, request: pytest.FixtureRequest) -> Iterator[ApiUnderTest]:
    """The suite's `cluster`, but on this module's control plane; parametrized indirectly,
    the node gets that name instead of a random one."""
    with new_cluster(control_plane_session(plane), getattr(request, "param", None)) as c:
        yield c


def kubectl(cluster: ApiUnderTest, *args: str) -> Any:
    return run_kubectl(cluster.kubeconfig, *args, namespace=cluster.namespace)


def _addresses(cluster: ApiUnderTest) -> list[dict[str, str]]:
    node = cluster.core.read_node(cluster.node_name)
    return [{"type": a.type, "address": a.address} for a in node.status.addresses or []]


def _logs_and_exec(cluster: ApiUnderTest) -> None:
    talker = ["sh", "-c", f"echo {GREETING}; exec sleep 3600"]
    make_pod(cluster, "talker", container(command=talker))
    wait_status(cluster, "talker", running_ready, 30, "running and ready")
    logs = kubectl(cluster, "logs", "talker")
    assert (logs.returncode, logs.stdout) == (0, f"{GREETING}\n".encode()), logs.stderr
    done = kubectl(cluster, "exec", "talker", "--", "sh", "-c", "echo $((6 * 7)); exit 3")
    assert (done.returncode, done.stdout) == (3, b"42\n"), done.stderr


def test_logs_and_exec_reach_a_node_whose_name_resolves_nowhere(
    plane: KubeEnv, cluster: ApiUnderTest, node: Node
) -> None:
    assert resolve_name(cluster.node_name) == ()
    wait_for(lambda: _addresses(cluster), 10, "the Node's addresses")
    # no Hostname: the Hostname-first server falls through (InternalDNS neither) to InternalIP
    assert _addresses(cluster) == [{"type": "InternalIP", "address": "127.0.0.1"}]
    _logs_and_exec(cluster)


@pytest.mark.parametrize("plane", [None], indirect=True, ids=["hostname-first"])
@pytest.mark.parametrize("cluster", ["localhost"], indirect=True, ids=["localhost"])
def test_a_name_that_leads_to_the_node_ip_is_advertised_and_dialled(
    plane: KubeEnv, cluster: ApiUnderTest, node: Node
) -> None:
    """Hostname `localhost` comes first in the Node's addresses the server prefers, so the
    server dials the node by that name (resolved where it runs: here, 127.0.0.1)."""
    if "127.0.0.1" not in resolve_name("localhost"):
        pytest.skip("localhost does not resolve to 127.0.0.1 on this machine")
    assert plane.preferred_address_types is None  # UPSTREAM_ADDRESS_TYPES: Hostname first
    assert UPSTREAM_ADDRESS_TYPES.startswith("Hostname,")
    wait_for(lambda: _addresses(cluster), 10, "the Node's addresses")
    assert _addresses(cluster) == [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "Hostname", "address": "localhost"},
    ]
    _logs_and_exec(cluster)
