"""TLS bootstrap as the kubelet does it: nodes of one process join with a bootstrap token, each
asks for its own client certificate (a CSR the real controller-manager approves and signs),
keeps it 0600, uses it, keeps it across a restart and rotates it before it expires.

Real API server only: the fake runs no controller-manager, so nothing approves or signs a CSR.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from kubelet_sim.controlplane.binaries import DEFAULT_KUBE_VERSION
from kubelet_sim.kube.client import connect
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.kube.tls_bootstrap import CURRENT, SIGNER
from kubelet_sim.runtime.local_images import PAUSE_IMAGE
from tests.agent_process import AgentProcess, remove_containers_of, run_command
from tests.cluster import CSR_CERTIFICATE_SECONDS, ApiUnderTest, wait_for
from tests.kubeenv import kube_version
from tests.mounts import remove_root
from tests.node_certs import CSRS, remove_joined


@contextlib.contextmanager
def _joining(
    cluster: ApiUnderTest, names: list[str], bootstrap: Path, root: Path
) -> Iterator[AgentProcess]:
    trust = cluster.session.kubelet_client_trust()
    args = [arg for name in names for arg in ("--node-name", name)]
    agent = AgentProcess(
        [
            *args,
            "--bootstrap-kubeconfig",
            str(bootstrap),
            "--log-format",
            "json",
            "--root-dir",
            str(root),
            "--port",
            "0",
        ],
        env={
            "KUBELET_SIM_POD_INFRA_IMAGE": PAUSE_IMAGE,
            "KUBELET_SIM_SANDBOX_POOL_SIZE": "0",
            **({"KUBELET_SIM_CLIENT_CA_FILE": trust} if trust else {}),
        },
    )
    try:
        yield agent
    finally:
        if agent.proc.poll() is None:
            agent.terminate()
        for name in names:
            remove_containers_of(name)


def _ready(cluster: ApiUnderTest, name: str) -> bool:
    try:
        node = request_json(cluster.api, "GET", f"/api/v1/nodes/{name}")
    except ApiError:
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _csrs_of(cluster: ApiUnderTest, username: str) -> list[dict[str, Any]]:
    items = request_json(cluster.api, "GET", CSRS).get("items") or []
    return [c for c in items if c["spec"].get("username") == username]


def _approval(csr: dict[str, Any]) -> str | None:
    """The reason of its Approved condition (the controller-manager's: AutoApproved)."""
    conditions = (csr.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c["type"] == "Approved"), None)


@pytest.fixture
def joined(cluster: ApiUnderTest, tmp_path: Path) -> Iterator[tuple[list[str], Path, str]]:
    """Two node names, the bootstrap kubeconfig and the token; Nodes, CSRs and the token's
    Secret removed afterwards."""
    cluster.require_csr_signer()
    admin = connect(cluster.kubeconfig)
    bootstrap = tmp_path / "bootstrap.kubeconfig"
    command = ["join-token", "-o", str(bootstrap), "--kubeconfig", cluster.kubeconfig]
    made = run_command(*command, "--ttl", "1h", timeout=60)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(bootstrap.stat().st_mode) == 0o600
    token = json.loads(bootstrap.read_text())["users"][0]["user"]["token"]
    assert made.stdout.startswith(f"bootstrap token {token.split('.')[0]} (valid 1h)")
    names = [f"{cluster.node_name}-j1", f"{cluster.node_name}-j2"]
    try:
        yield names, bootstrap, token
    finally:
        remove_joined(admin.api, names, token)
        admin.api.close()


def test_nodes_join_with_a_bootstrap_token_each_with_its_own_certificate(
    cluster: ApiUnderTest, joined: tuple[list[str], Path, str], tmp_path: Path
) -> None:
    names, bootstrap, token = joined
    root = tmp_path / "root"
    bootstrapper = f"system:bootstrap:{token.split('.')[0]}"
    try:
        with _joining(cluster, names, bootstrap, root) as agent:
            for name in names:
                wait_for(lambda n=name: _ready(cluster, n), 60, f"{name} Ready")  # type: ignore[misc]
            for name in names:
                pem = root / "pki" / name / CURRENT
                assert stat.S_IMODE(os.stat(pem).st_mode) == 0o600  # the pair it links to
                assert stat.S_IMODE(os.stat(root / "pki" / name / "kubeconfig").st_mode) == 0o600
                cert = x509.load_pem_x509_certificate(pem.read_bytes())
                assert cert.subject.rfc4514_string() == f"CN=system:node:{name},O=system:nodes"
            csrs = _csrs_of(cluster, bootstrapper)
            assert len(csrs) == 2, csrs
            for csr in csrs:
                assert csr["spec"]["signerName"] == SIGNER
                assert _approval(csr) == "AutoApproved"
                assert csr["status"].get("certificate")
            assert agent.terminate() == 0
        # Started again: the certificates are still valid, so no node asks again.
        with _joining(cluster, names, bootstrap, root) as agent:
            for name in names:
                wait_for(lambda n=name: _ready(cluster, n), 60, f"{name} Ready again")  # type: ignore[misc]
            kept = agent.wait_for_log(
                lambda r: r.get("event") == "client certificate kept", 10, "certificate kept"
            )
            assert kept["node"] in names
            assert len(_csrs_of(cluster, bootstrapper)) == 2
    finally:
        remove_root(root)


def test_a_node_rotates_its_certificate_before_it_expires(
    cluster: ApiUnderTest, joined: tuple[list[str], Path, str], tmp_path: Path
) -> None:
    if cluster.session.env is None or cluster.session.env.cluster_signing_duration is None:
        pytest.skip("needs the suite's own control plane, whose certificates live minutes")
    if kube_version() != DEFAULT_KUBE_VERSION:  # a minute of waiting, for CI's 45 minutes
        pytest.skip(
            "rotation is asked as the bootstrap is, whose CSR (usages by version) the test"
            " above checks on this version; the wait for it runs on the default version"
        )
    names, bootstrap, _ = joined
    root = tmp_path / "root"
    pem = root / "pki" / names[0] / CURRENT
    try:
        with _joining(cluster, names[:1], bootstrap, root) as agent:
            wait_for(lambda: _ready(cluster, names[0]), 60, "Ready")
            first = os.readlink(pem)
            life = CSR_CERTIFICATE_SECONDS + 300  # kcm backdates by 5 min
            agent.wait_for_log(
                lambda r: r.get("event") == "client certificate rotated",
                0.84 * life - 300 + 30,
                "the rotation",
            )
            assert os.readlink(pem) != first
            renewed = _csrs_of(cluster, f"system:node:{names[0]}")
            assert [c["spec"]["signerName"] for c in renewed] == [SIGNER]
            assert _approval(renewed[0]) == "AutoApproved"
            # It goes on with the new certificate: its Lease is renewed after the rotation.
            lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{names[0]}"
            before = request_json(cluster.api, "GET", lease)["spec"]["renewTime"]
            wait_for(
                lambda: request_json(cluster.api, "GET", lease)["spec"]["renewTime"] != before,
                30,
                "a Lease renewal with the new certificate",
            )
            assert _ready(cluster, names[0])
    finally:
        remove_root(root)
