"""The kubelet API's TLS: the serving context, and client certificates checked as the kubelet
checks them.

Go's kubelet asks for a client certificate without checking it in the handshake
(`tls.RequestClientCert`); k8s.io/apiserver's x509 authenticator verifies it afterwards, and a
certificate that does not verify is an authentication error like any other: the request goes
on to a bearer token, and ends in 401 if nothing vouches for it. Python's ssl has no such mode:
it fails the handshake. So the context is given, through OpenSSL's own API, a certificate
verification callback that accepts every chain without building it
(`SSL_CTX_set_cert_verify_callback`: no signature is checked in the handshake, whatever the
client sends; OpenSSL still keeps the certificates), and `x509auth.X509Authenticator`
verifies them per connection with `cryptography`'s path verifier. The client CA file is read
again when it changes (`x509auth.ClientCa`), as the kubelet's dynamic CA content.

Reaching the SSL_CTX behind an `ssl.SSLContext` relies on CPython's layout (the pointer is the
object's first field) and on `_ssl` reaching libssl as a shared library: the interpreter is
checked first (on another Python, nothing is read at an object's address), then the rest
before use (the verify mode read through the pointer must follow the one set from Python),
and where they do not hold the context keeps verifying in the handshake, as before, and the
node says so at start.
"""

from __future__ import annotations

import _ssl
import ctypes
import functools
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubelet_sim.kube.reviews import User

_SSL_VERIFY_NONE, _SSL_VERIFY_PEER = 0, 1
_CERT_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _accept(_store: int | None, _arg: int | None) -> int:
    return 1  # the authenticator decides, per connection


_accept_any = _CERT_VERIFY_CALLBACK(_accept)  # kept alive here: OpenSSL holds a pointer to it


@functools.cache
def libssl() -> ctypes.CDLL | None:
    """The libssl this process's `_ssl` uses, its symbols looked up through `_ssl`'s own
    shared library (dlopen of a loaded library gives it back; dlsym searches it and the
    libraries it was linked with), never a path: after an upgrade /proc/self/maps names the
    old file `(deleted)`, and another library may bring a libssl of its own. None on a Python
    other than CPython (the pointers read here follow CPython's object layout) or where `_ssl`
    reaches no such symbols (built in, or libssl linked statically)."""
    path = getattr(_ssl, "__file__", None)
    if sys.implementation.name != "cpython" or not path:
        return None
    try:
        lib = ctypes.CDLL(path)
        lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
        lib.SSL_CTX_set_cert_verify_callback.argtypes = [
            ctypes.c_void_p, _CERT_VERIFY_CALLBACK, ctypes.c_void_p
        ]  # fmt: skip
    except (OSError, AttributeError):
        return None
    lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    lib.SSL_CTX_set_cert_verify_callback.restype = None
    return lib


def context_pointer(context: ssl.SSLContext) -> int | None:
    """The SSL_CTX behind `context` (CPython keeps it as the object's first field)."""
    return ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value


def _request_client_certificate(context: ssl.SSLContext) -> bool:
    """Ask for a client certificate and accept any in the handshake (Go's RequestClientCert).
    False if this Python's ssl cannot be reached that way (the handshake then verifies)."""
    lib = libssl()
    if lib is None:
        return False
    pointer = context_pointer(context)
    if not pointer:
        return False
    context.verify_mode = ssl.CERT_NONE
    if lib.SSL_CTX_get_verify_mode(pointer) != _SSL_VERIFY_NONE:
        return False
    context.verify_mode = ssl.CERT_OPTIONAL
    if lib.SSL_CTX_get_verify_mode(pointer) != _SSL_VERIFY_PEER:
        return False
    lib.SSL_CTX_set_cert_verify_callback(pointer, _accept_any, None)
    return True


@dataclass(frozen=True)
class PeerCertificate:
    """What the x509 authenticator made of the client's certificate: its user, or why not."""

    user: User | None
    error: str = ""


class ServingTls:
    """A node's serving TLS: the context, made at its first connection (the client
    certificate is checked above it, by `x509auth`).

    OpenSSL 3 takes 5-10 ms to load a key into a context, each context holds tens of kilobytes
    and signing a self-signed certificate takes milliseconds more: a thousand nodes would pay
    seconds at start and tens of MiB for contexts few of them ever use. Given files are checked
    at once (`serving_tls`), so a bad one still stops the start in one line; a self-signed pair
    is made (or an earlier start's kept) by `files` at the first connection.
    """

    def __init__(self, files: Callable[[], tuple[Path, Path]], client_ca_file: str | None) -> None:
        self.files, self.client_ca_file = files, client_ca_file
        if client_ca_file:  # a bad file stops the start; OpenSSL reads it without cryptography
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(client_ca_file)
        self.verified_in_handshake = bool(client_ca_file) and not _deferred_check_works()
        self._context: ssl.SSLContext | None = None
        self._context_ca: tuple[int, ...] | None = None  # the CA file a handshake check read
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        """Raises OSError or ssl.SSLError if the files went bad since the check. Where the
        handshake verifies, a changed client CA file makes a new context (what it reads)."""
        with self._lock:
            stale = (
                self.verified_in_handshake
                and self.client_ca_file
                and file_stamp(self.client_ca_file) != self._context_ca
            )
            if self._context is None:
                self._context = self._make_context()
            elif stale:
                try:
                    self._context = self._make_context()
                except (OSError, ssl.SSLError):  # the last good CA stays (x509auth.ClientCa)
                    self._context_ca = file_stamp(self.client_ca_file or "")
            return self._context

    def _make_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self.files())
        if self.client_ca_file and not _request_client_certificate(context):
            self._context_ca = file_stamp(self.client_ca_file)
            context.load_verify_locations(self.client_ca_file)  # what a handshake check uses
            context.verify_mode = ssl.CERT_OPTIONAL
            self.verified_in_handshake = True
        return context


def file_stamp(path: str) -> tuple[int, ...] | None:
    """What changes when a file is replaced or written (device, inode, mtime, size), as the
    kubelet's dynamic CA content watches its file; None if it cannot be read."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size


def serving_tls(cert_file: Path, key_file: Path, client_ca_file: str | None) -> ServingTls:
    """Raises OSError, or ValueError for a certificate, key or CA file that is unreadable, or
    a key that is not the certificate's."""
    from cryptography import x509  # noqa: PLC0415 (given files only: see ServingTls)
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    cert = x509.load_pem_x509_certificate(Path(cert_file).read_bytes())
    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), None)
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise ValueError(f"the private key {key_file} is not the key of {cert_file}")
    return ServingTls(lambda: (cert_file, key_file), client_ca_file)


@functools.cache
def _deferred_check_works() -> bool:
    """Whether this Python's ssl can be asked to defer the check (tried once, on a context)."""
    return _request_client_certificate(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
