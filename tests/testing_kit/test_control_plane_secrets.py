"""The control plane keeps its secrets: etcd (every Secret of the cluster) takes only clients
with a certificate of the plane's CA, and each file with a key in it is 0600 from the start."""

from __future__ import annotations

import ssl
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kubelet_sim.controlplane.binaries import BinariesMissing, find_binaries
from kubelet_sim.controlplane.cluster import ControlPlane
from kubelet_sim.formats.pem import write_private
from tests.cluster import api_mode

pytestmark = [
    pytest.mark.own_control_plane,
    pytest.mark.skipif(api_mode() != "real", reason="starts its own control plane: real pass"),
]


def _get(url: str, cert: tuple[Path, Path] | None = None) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    with urllib.request.urlopen(url, context=context, timeout=5) as answer:
        return int(answer.status)


def test_etcd_refuses_a_client_without_the_planes_certificate(tmp_path: Path) -> None:
    try:
        binaries = find_binaries(require_controllers=False)
    except BinariesMissing as exc:
        pytest.skip(f"no control-plane binaries: {exc}")
    plane = ControlPlane(binaries, tmp_path / "plane", controllers=False)
    with plane:
        health = f"{plane.etcd_url}/health"
        assert health.startswith("https://127.0.0.1:")
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _get(health)  # TLS without a client certificate
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _get(health.replace("https://", "http://"))
        pki = tmp_path / "plane" / "pki"
        assert (
            _get(health, (pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key"))
            == 200
        )
        secrets = [*pki.glob("*.key"), *(tmp_path / "plane").glob("*.kubeconfig")]
        assert len(secrets) > 5
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in secrets} == {
            p.name: 0o600 for p in secrets
        }


def test_a_secret_file_is_never_looser_than_0600(tmp_path: Path) -> None:
    loose = tmp_path / "key"
    loose.write_text("old")
    loose.chmod(0o644)
    write_private(loose, b"new")
    assert (loose.read_bytes(), stat.S_IMODE(loose.stat().st_mode)) == (b"new", 0o600)
    assert [p.name for p in tmp_path.iterdir()] == ["key"], "no temporary file left"
