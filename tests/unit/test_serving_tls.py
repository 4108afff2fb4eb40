"""A node's serving TLS checks a given client CA file at start, not at its first client."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

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
    assert tls.authenticator.roots == []  # made on first use
