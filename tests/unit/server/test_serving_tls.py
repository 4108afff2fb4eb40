"""A node's serving TLS checks a given client CA file at start, not at its first client, and
follows it when it changes."""

from __future__ import annotations

import ctypes
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubelet_sim.controlplane.pki import CertificateAuthority
from kubelet_sim.server import peer_chain
from kubelet_sim.server import tls as tls_module
from kubelet_sim.server.certs import self_signed
from kubelet_sim.server.http import client_certificates
from kubelet_sim.server.tls import ServingTls


def _no_files() -> tuple[Path, Path]:
    raise AssertionError("the serving pair is made at the first connection, not here")


def test_a_client_ca_file_that_is_not_pem_stops_the_start(tmp_path: Path) -> None:
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate\n")
    with pytest.raises(ssl.SSLError):
        ServingTls(_no_files, str(bad))


def test_a_missing_client_ca_file_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ServingTls(_no_files, str(tmp_path / "absent.crt"))


def test_without_a_client_ca_nothing_is_read_at_start() -> None:
    tls = ServingTls(_no_files, None)
    assert client_certificates(tls.client_ca_file).roots == []  # made on first use


def test_where_the_handshake_verifies_a_changed_ca_file_makes_a_new_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where this Python's ssl cannot defer the check, the context holds the CA: it is made
    again when the file changes, and one that no longer loads keeps the last context."""
    monkeypatch.setattr(tls_module, "_deferred_check_works", lambda: False)
    monkeypatch.setattr(tls_module, "_request_client_certificate", lambda _context: False)
    pair = self_signed(tmp_path / "pki", "n1", ["localhost"], ["127.0.0.1"])
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(CertificateAuthority(tmp_path / "a", "a").pair.cert.read_bytes())
    tls = ServingTls(lambda: pair, str(ca_file))
    assert tls.verified_in_handshake
    first = tls.context()
    assert tls.context() is first, "unchanged: the same context"
    replaced = tmp_path / "ca.new"
    replaced.write_bytes(CertificateAuthority(tmp_path / "b", "b").pair.cert.read_bytes())
    replaced.replace(ca_file)
    second = tls.context()
    assert second is not first
    assert second.verify_mode == ssl.CERT_OPTIONAL
    ca_file.write_text("not a certificate any more, and longer than the one before\n")
    assert tls.context() is second


@pytest.fixture
def fresh_lookups() -> Iterator[None]:
    """The libssl lookups are made once per process: made again for a test, and after it."""
    caches = (tls_module.libssl, tls_module._deferred_check_works, peer_chain._openssl_functions)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


@pytest.mark.usefixtures("fresh_lookups")
def test_on_another_python_than_cpython_nothing_is_read_at_an_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deferring the check and reading a client's intermediates read pointers laid out as
    CPython lays out its objects (issue 41, deliverable 11). On another Python (PyPy's id()
    is no address) the start checks the interpreter first and reads nothing: the handshake
    verifies, and only the client's own certificate is read."""
    monkeypatch.setattr(sys.implementation, "name", "pypy")

    def no_reads(*_args: object) -> None:
        raise AssertionError("memory read at an object's address")

    monkeypatch.setattr(ctypes.c_void_p, "from_address", no_reads)
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(CertificateAuthority(tmp_path / "a", "a").pair.cert.read_bytes())
    assert ServingTls(_no_files, str(ca_file)).verified_in_handshake
    assert hasattr(ssl.SSLSocket, "get_unverified_chain") or not peer_chain.intermediates_readable()
