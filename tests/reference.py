"""The `reference_node` fixture: the upstream kubelet on the suite's real control plane.

One per session (it takes about 10 s to be Ready), started the first time a test asks for it.
It skips, with one line saying why, on the fake API pass, on a cluster the suite did not start
(a kubeconfig's: no CA key to give the kubelet node credentials with), or where
`ReferenceNode.unavailable()` says it cannot run (not root, no containerd, no CNI plugins, no
kubelet binary, ...).

The node is registered with `REFERENCE_TAINT` (NoSchedule), as the virtual nodes are with
theirs: the session's scheduler places no other test's pod on it. Tests pin their pods to it
with `spec.nodeName` (the kubelet admits NoSchedule-tainted pods bound that way).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_sim.controlplane.reference_node import ReferenceNode, ReferenceNodeError
from tests.cluster import _Session, api_mode, deadline_scale
from tests.docker_env import DockerEnv

__all__ = ["REFERENCE_TAINT", "reference_node"]

REFERENCE_TAINT = "kubelet-sim.io/reference=true:NoSchedule"


@pytest.fixture(scope="session")
def reference_node(cluster_session: _Session, docker_session: DockerEnv) -> Iterator[ReferenceNode]:
    """A Ready upstream kubelet node `ks-ref-<random>` of the session's control plane."""
    if api_mode() != "real":
        pytest.skip("the reference node needs the real API server (KUBELET_SIM_TEST_API=real)")
    if cluster_session.env is None:
        pytest.skip("the reference node needs the control plane the suite starts (its CA)")
    kubelet = cluster_session.env.binaries.kubelet  # the control plane's version's
    why = ReferenceNode.unavailable(kubelet)
    if why and os.environ.get("KUBELET_SIM_REQUIRE_REFERENCE_NODE") == "1":
        pytest.fail(f"no reference node, and CI requires one: {why}", pytrace=False)
    if why:
        pytest.skip(f"no reference node: {why}")
    # Short: containerd's socket lives here (a unix socket path holds 108 bytes).
    workdir = Path(tempfile.mkdtemp(prefix="ksref-"))
    node = ReferenceNode(
        cluster_session.env,
        f"ks-ref-{secrets.token_hex(3)}",
        workdir,
        pause_image=docker_session.pause_image,
        busybox_image=docker_session.busybox_image,
        taints=(REFERENCE_TAINT,),
        static_pod_path=workdir / "manifests",
        kubelet=kubelet,
    )
    try:
        node.start(timeout=60 * deadline_scale())
    except ReferenceNodeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield node
    finally:
        node.stop()
