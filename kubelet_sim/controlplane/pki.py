"""The control plane's certificates: one CA, client certificates for users and nodes, serving
certificates for kubelets, and the service-account key pair.

`cryptography` makes them (the package already depends on it), so starting a control plane
needs no `openssl` on the user's machine.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubelet_sim.formats.pem import write_private_key

VALID_FOR = datetime.timedelta(days=30)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


class CertificateAuthority:
    """A CA kept in `directory` (ca.crt, ca.key) that signs what the control plane needs."""

    def __init__(self, directory: Path, common_name: str = "kubelet-sim-ca") -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pair = CertPair(directory / "ca.crt", directory / "ca.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        write_private_key(self.pair.key, self._key)

    def issue(
        self,
        filename: str,
        common_name: str,
        *,
        groups: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool | None = None,
        directory: Path | None = None,
    ) -> CertPair:
        """<filename>.crt/.key in `directory` (the CA's own unless given): a client certificate
        (CN user, O groups, as the API server reads them) or, with `server`, a serving
        certificate for `dns_names` and `ips`; `client` (default: not `server`) lets a serving
        certificate be a client's too (etcd's peers dial each other with theirs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        if client if client is not None else not server:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns_names)]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        into = self.directory if directory is None else directory
        pair = CertPair(into / f"{filename}.crt", into / f"{filename}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_private_key(pair.key, key)
        return pair


def service_account_keys(directory: Path) -> CertPair:
    """sa.key (signs tokens) and sa.pub (verifies them): RSA, as the API server expects."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    write_private_key(pair.key, key)
    return pair
