"""The certificates a TLS client sent (its leaf and the intermediates after it), on every
Python this package supports.

Python 3.13 reads them (`SSLSocket.get_unverified_chain`); 3.11 and 3.12 have no API for it,
but OpenSSL keeps them for the connection (`SSL_get_peer_cert_chain`, which on a server leaves
out the leaf). There they are read, on CPython only (`tls.libssl` checks the interpreter
first), through the `SSL *` of CPython's `_ssl._SSLSocket`, whose
layout (`PyObject_HEAD`, the socket's weakref, `SSL *ssl`, `PySSLContext *ctx`) is checked at
each use: the field after `ssl` must be the object's own context, and the `SSL *` must belong
to that context's `SSL_CTX`. Where a check fails (another layout, a libssl linked statically),
`intermediates_readable` is False and only the leaf is read: a chain that needs intermediates
then fails to verify, and the server says so once at start.
"""

from __future__ import annotations

import ctypes
import functools
import ssl
from dataclasses import dataclass

from kubelet_sim.server.tls import context_pointer, libssl

_POINTER = ctypes.sizeof(ctypes.c_void_p)


@dataclass(frozen=True)
class PeerChain:
    """DER certificates, the leaf first; `sent` counts them all, and `certificates` is empty
    when that is more than the limit asked for (nothing past it is read)."""

    sent: int
    certificates: tuple[bytes, ...]


def peer_chain(conn: ssl.SSLSocket, limit: int) -> PeerChain | None:
    """None when the client sent no certificate."""
    leaf = conn.getpeercert(binary_form=True)
    if not leaf:
        return None
    unverified = getattr(conn, "get_unverified_chain", None)  # Python 3.13
    if unverified is not None:
        chain = list(unverified() or ())  # DER bytes, the leaf first on a server
        if len(chain) > limit:
            return PeerChain(len(chain), ())
        return PeerChain(len(chain), (leaf, *(bytes(c) for c in chain[1:])))
    intermediates = _openssl_intermediates(conn, limit - 1)
    if intermediates is None:
        return PeerChain(1, (leaf,))  # this Python's ssl cannot be read: the leaf alone
    sent, ders = intermediates
    return PeerChain(sent + 1, (leaf, *ders) if sent + 1 <= limit else ())


def intermediates_readable() -> bool:
    """Whether this Python gives a client's intermediates (3.13, or the checks above hold)."""
    if hasattr(ssl.SSLSocket, "get_unverified_chain"):
        return True
    return _openssl_functions() is not None


def _openssl_intermediates(conn: ssl.SSLSocket, limit: int) -> tuple[int, list[bytes]] | None:
    """(how many intermediates the client sent, their DER if at most `limit`), or None."""
    lib = _openssl_functions()
    obj = getattr(conn, "_sslobj", None)
    if lib is None or obj is None:
        return None
    base = id(obj) + object.__basicsize__
    if ctypes.c_void_p.from_address(base + 2 * _POINTER).value != id(obj.context):
        return None
    ssl_pointer = ctypes.c_void_p.from_address(base + _POINTER).value
    ctx_pointer = context_pointer(obj.context)
    if not ssl_pointer or not ctx_pointer or lib.SSL_get_SSL_CTX(ssl_pointer) != ctx_pointer:
        return None
    stack = lib.SSL_get_peer_cert_chain(ssl_pointer)
    count = lib.OPENSSL_sk_num(stack) if stack else 0
    if count > limit:
        return count, []
    ders = []
    for i in range(count):
        x509 = lib.OPENSSL_sk_value(stack, i)
        size = lib.i2d_X509(x509, None)
        if size <= 0:
            return None
        buffer = (ctypes.c_ubyte * size)()
        cursor = ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ubyte))
        lib.i2d_X509(x509, ctypes.byref(cursor))
        ders.append(bytes(buffer))
    return count, ders


@functools.cache
def _openssl_functions() -> ctypes.CDLL | None:
    lib = libssl()
    if lib is None:
        return None
    try:
        for name, args, result in (
            ("SSL_get_SSL_CTX", [ctypes.c_void_p], ctypes.c_void_p),
            ("SSL_get_peer_cert_chain", [ctypes.c_void_p], ctypes.c_void_p),
            ("OPENSSL_sk_num", [ctypes.c_void_p], ctypes.c_int),
            ("OPENSSL_sk_value", [ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p),
            (
                "i2d_X509",
                [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte))],
                ctypes.c_int,
            ),
        ):
            function = getattr(lib, name)
            function.argtypes, function.restype = args, result
    except AttributeError:  # an OpenSSL without these names (1.0's sk_num): not read
        return None
    return lib
