"""A small DNS server for the tests' cluster domain, standing in for CoreDNS (whose image
cannot be pulled here). It listens inside a pod's network namespace (entered by one thread:
setns applies to the calling thread only), so it is reached like kube-dns: through a Service.

dnslib (PyPI) parses and builds the packets: a DNS codec is not the tests' job.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any

from dnslib import QTYPE, RR, A
from dnslib.server import BaseResolver, DNSServer

CLONE_NEWNET = 0x40000000


class Records(BaseResolver):  # type: ignore[misc]
    """A records by name (lower case, no trailing dot); NXDOMAIN otherwise."""

    def __init__(self, records: dict[str, str]) -> None:
        self.records = records

    def resolve(self, request: Any, handler: Any) -> Any:
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        if request.q.qtype == QTYPE.A and name in self.records:
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(self.records[name]), ttl=5))
        elif name not in self.records:
            reply.header.rcode = 3  # NXDOMAIN
        return reply


def serve_in_netns(pid: int, records: dict[str, str]) -> list[DNSServer]:
    """UDP and TCP servers on port 53 of the namespace of `pid`; stop them with `.stop()`."""
    servers: list[DNSServer] = []
    failure: list[BaseException] = []

    def bind() -> None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            for tcp in (False, True):
                server = DNSServer(Records(records), address="0.0.0.0", port=53, tcp=tcp)
                server.start_thread()  # the socket is bound here, in the pod's namespace
                servers.append(server)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=bind, name="dns-fixture-bind")
    thread.start()
    thread.join(10)
    if failure:
        raise failure[0]
    return servers
