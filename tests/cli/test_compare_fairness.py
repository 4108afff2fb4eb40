"""`kubelet-sim compare` refuses a comparison that cannot be fair before it runs anything: exit
code 2 and one line. The two nodes are Node objects written here (no kubelet needed: what is
judged is what their Nodes say), on the fake and the real API server alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE
from tests.cluster import ApiUnderTest, deadline_scale

PAUSE_ONLY = [["registry.k8s.io/pause:3.10"]]


def _put_node(cluster: ApiUnderTest, name: str, ready: str, images: list[list[str]]) -> None:
    request_json(cluster.api, "POST", "/api/v1/nodes", {"metadata": {"name": name}})
    status: Json = {
        "conditions": [
            {
                "type": "Ready",
                "status": ready,
                "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                "lastHeartbeatTime": "2026-11-28T00:00:00Z",
                "lastTransitionTime": "2026-11-28T00:00:00Z",
            }
        ],
        "images": [{"names": names, "sizeBytes": 1000} for names in images],
    }
    request_json(
        cluster.api,
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )


@pytest.fixture
def reference(cluster: ApiUnderTest) -> Iterator[str]:
    """The name of a second Node, removed after the test (the cluster removes its own)."""
    name = f"{cluster.node_name}-ref"
    yield name
    try:
        request_json(cluster.api, "DELETE", f"/api/v1/nodes/{name}")
    except ApiError as exc:
        if not exc.not_found:
            raise


def _compare(cluster: ApiUnderTest, reference: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "kubelet_sim", "compare", "--node", cluster.node_name,
            "--reference-node", reference, "--kubeconfig", cluster.kubeconfig,
            "--scenario", "exit-0-never",
        ],
        capture_output=True, text=True, env=os.environ.copy(), timeout=60 * deadline_scale(),
        check=False,
    )  # fmt: skip


# What reading a kubeconfig with `insecure-skip-tls-verify` (a cluster of the user's may hand
# out such a one) warns, first, as a log line: the kubeconfig's, not the comparison's.
_TLS_OFF = "TLS verification of the API server is off (insecure-skip-tls-verify)"


def _said(ran: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines of its stderr but the kubeconfig's TLS warning."""
    return [line for line in ran.stderr.splitlines() if not _is_tls_warning(line)]


def _is_tls_warning(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("event") == _TLS_OFF


def test_a_reference_node_not_ready_is_refused_with_exit_code_2(
    cluster: ApiUnderTest, reference: str
) -> None:
    _put_node(cluster, cluster.node_name, "True", [[BUSYBOX_IMAGE]])
    _put_node(cluster, reference, "False", [[BUSYBOX_IMAGE]])
    ran = _compare(cluster, reference)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert _said(ran) == [
        f"kubelet-sim: error: not a fair comparison: reference node {reference} is not Ready:"
        " it would not run the scenarios as it should"
    ]  # and nothing ran: no "compare: namespace ..." line


def test_an_image_missing_on_the_reference_is_refused_with_exit_code_2(
    cluster: ApiUnderTest, reference: str
) -> None:
    _put_node(cluster, cluster.node_name, "True", [[BUSYBOX_IMAGE]])
    _put_node(cluster, reference, "True", PAUSE_ONLY)
    ran = _compare(cluster, reference)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert _said(ran) == [
        f"kubelet-sim: error: not a fair comparison: image {BUSYBOX_IMAGE} is not on reference"
        f" node {reference} (not in its status.images): put it on both nodes, or give --image"
        " one that is"
    ]
