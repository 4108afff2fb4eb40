"""deploy/node-credentials.sh: real node credentials through the certificates API."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubelet_sim.kube.client import connect
from kubelet_sim.kube.rest import ApiError, request_json
from tests.cluster import ApiUnderTest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "node-credentials.sh"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _lease(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": name}}


def test_the_script_makes_credentials_of_exactly_that_node(
    cluster: ApiUnderTest, tmp_path: Path
) -> None:
    cluster.require_csr_signer()
    if shutil.which("kubectl") is None or shutil.which("openssl") is None:
        pytest.skip("the script needs kubectl and openssl")
    result = subprocess.run(
        [str(SCRIPT), cluster.node_name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBECONFIG": cluster.kubeconfig},
    )
    assert result.returncode == 0, result.stderr
    kubeconfig = tmp_path / "node.kubeconfig"
    kubeconfig.write_text(result.stdout)
    api = connect(str(kubeconfig)).api
    request_json(api, "POST", LEASES, _lease(cluster.node_name))  # its own Lease: allowed
    with pytest.raises(ApiError) as refused:
        request_json(api, "POST", LEASES, _lease(f"{cluster.node_name}-other"))
    assert refused.value.status == 403, "NodeRestriction: another node's Lease is refused"
    request_json(cluster.api, "DELETE", f"{LEASES}/{cluster.node_name}")
