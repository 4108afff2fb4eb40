"""A node's client certificates after TLS bootstrap (kube/tls_bootstrap.py), without an API
server: the request it makes, where the pair is kept, which one is current, when it rotates.
The flow against the real controller-manager: tests/node/test_tls_bootstrap.py."""

from __future__ import annotations

import os
import random
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubelet_sim.kube.tls_bootstrap import (
    CURRENT,
    BootstrapError,
    Bootstrapped,
    CertificateRotation,
    CertificateStore,
    bootstrap,
    client_request,
    usages_for,
)
from kubelet_sim.loops.supervise import Supervisor

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _signed(key_pem: bytes, not_before: datetime, not_after: datetime) -> bytes:
    key = serialization.load_pem_private_key(key_pem, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n1")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_the_request_is_the_kubelets() -> None:
    key_pem, csr_pem = client_request("n1")
    csr = x509.load_pem_x509_csr(csr_pem)
    assert csr.subject.rfc4514_string() == "CN=system:node:n1,O=system:nodes"
    assert isinstance(csr.public_key(), ec.EllipticCurvePublicKey)
    assert csr.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    assert list(csr.extensions) == []  # no SANs: csrapproving refuses any
    assert b"PRIVATE KEY" in key_pem


def test_the_usages_are_those_of_the_kubelet_of_the_servers_version() -> None:
    assert usages_for(34) == ["digital signature", "client auth"]
    assert usages_for(27) == ["digital signature", "client auth"]
    assert usages_for(26) == ["digital signature", "key encipherment", "client auth"]
    assert usages_for(None) == ["digital signature", "client auth"]  # nothing known: today's


def test_the_store_keeps_each_pair_0600_and_links_the_newest(tmp_path: Path) -> None:
    store = CertificateStore(tmp_path / "n1")
    assert store.current(NOW) is None
    first_key, _ = client_request("n1")
    store.update(_signed(first_key, NOW, NOW + timedelta(hours=1)), first_key, NOW)
    second_key, _ = client_request("n1")
    later = NOW + timedelta(minutes=1)
    issued = store.update(_signed(second_key, NOW, NOW + timedelta(hours=2)), second_key, later)
    pairs = sorted(p for p in (tmp_path / "n1").iterdir() if not p.is_symlink())
    assert len(pairs) == 2
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pairs)
    assert os.readlink(tmp_path / "n1" / CURRENT) == pairs[1].name
    assert issued.not_after == NOW + timedelta(hours=2)
    assert store.current(later) == issued


def test_an_expired_or_broken_certificate_is_no_current_one(tmp_path: Path) -> None:
    store = CertificateStore(tmp_path)
    key, _ = client_request("n1")
    store.update(_signed(key, NOW - timedelta(hours=2), NOW - timedelta(hours=1)), key, NOW)
    assert store.current(NOW) is None
    store.current_path.unlink()
    store.current_path.write_bytes(b"not a certificate")
    assert store.current(NOW) is None


def test_rotation_comes_at_70_to_84_percent_of_the_life(tmp_path: Path) -> None:
    store = CertificateStore(tmp_path)
    key, _ = client_request("n1")
    start, life = NOW, timedelta(hours=10)
    issued = store.update(_signed(key, start, start + life), key, NOW)
    deadlines = [issued.rotation_deadline(random.Random(seed)) for seed in range(200)]
    shares = [(d - start) / life for d in deadlines]
    assert 0.7 <= min(shares) < 0.72
    assert 0.82 < max(shares) <= 0.84


def test_a_node_without_a_valid_certificate_rotates_at_once(tmp_path: Path) -> None:
    node = Bootstrapped("n1", tmp_path / "kubeconfig", CertificateStore(tmp_path))
    rotation = CertificateRotation([node], lambda name: None, supervisor=Supervisor())
    assert rotation.deadline(node, NOW) == NOW


def test_a_kubeconfig_it_did_not_write_is_never_overwritten(tmp_path: Path) -> None:
    """`--kubeconfig` names where the kubeconfig goes: a user's own file there (an admin's)
    is refused in one line before any request, not replaced."""
    theirs = tmp_path / "admin.kubeconfig"
    theirs.write_text("apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: t}}]\n")
    with pytest.raises(BootstrapError, match="not overwritten"):
        bootstrap(
            "n1",
            str(tmp_path / "no-such-bootstrap.kubeconfig"),
            tmp_path / "pki",
            kubeconfig=theirs,
            stop=threading.Event(),
        )
    assert "token: t" in theirs.read_text()
