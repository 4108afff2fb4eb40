"""The suite's own probes of a user's cluster (tests/server_probes.py), judged without one."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kubelet_sim.controlplane.pki import CertificateAuthority
from tests import server_probes
from tests.server_probes import KUBELET_CLIENT_CA_ENV, ask_kubelet_client_ca


def test_the_kubelet_client_ca_probe_names_what_to_set_where_no_ca_is_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's kubeconfig may name no CA (insecure-skip-tls-verify): the probe that decides
    whether logs and exec can be tested then says which variable to set; it raised a
    TypeError, and 13 tests errored on such a cluster (issue 42)."""
    ca = CertificateAuthority(tmp_path / "ca")
    shown = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client")
    der = x509.load_pem_x509_certificate(shown.cert.read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    monkeypatch.setattr(server_probes, "kubelet_client_certificate", lambda *_: der)
    monkeypatch.delenv(KUBELET_CLIENT_CA_ENV, raising=False)
    assert ask_kubelet_client_ca(None, str(ca.pair.cert)) is None, "its CA verifies it"
    unknown = ask_kubelet_client_ca(None, None)
    assert unknown is not None
    assert unknown.startswith(f"needs {KUBELET_CLIENT_CA_ENV}")
    other = CertificateAuthority(tmp_path / "other")
    assert ask_kubelet_client_ca(None, str(other.pair.cert)) == unknown
