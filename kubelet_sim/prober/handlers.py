"""One probe attempt per handler kind (pkg/probe/{exec,http,tcp}), answering as the kubelet does.

Each returns an Outcome and the text the kubelet puts in its `Unhealthy` event: the command's
output, `HTTP probe failed with statuscode: 503`, or the dial error in Go's words.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urljoin, urlsplit

from kubelet_sim import cri
from kubelet_sim.pod.probes import (
    Action,
    ExecAction,
    GrpcAction,
    HttpGetAction,
    Outcome,
    TcpSocketAction,
)
from kubelet_sim.prober.grpc_health import run_grpc
from kubelet_sim.validation import KUBELET_COMPAT_VERSION

_MAJOR_MINOR = ".".join(KUBELET_COMPAT_VERSION.lstrip("v").split(".")[:2])
USER_AGENT = f"kube-probe/{_MAJOR_MINOR}"
HOOK_USER_AGENT = f"kube-lifecycle/{_MAJOR_MINOR}"  # lifecycle/handlers.go
BODY_LIMIT = 10 * 1024  # http.go reads at most 10 KiB of a body
MAX_REDIRECTS = 10  # Go's http.Client


class ExecRuntime(Protocol):
    """The one runtime call a probe needs (the node's runtime has it; tests give a fake)."""

    def exec_probe(
        self, container_id: str, command: Sequence[str], timeout: float
    ) -> cri.ExecResult: ...


def run_probe(
    action: Action, runtime: ExecRuntime, container_id: str, pod_ip: str, timeout: float
) -> tuple[Outcome, str]:
    if isinstance(action, ExecAction):
        return run_exec(runtime, container_id, action, timeout)
    if isinstance(action, HttpGetAction):
        return run_http(action, pod_ip, timeout)
    if isinstance(action, TcpSocketAction):
        return run_tcp(action.host or pod_ip, action.port, timeout)
    if isinstance(action, GrpcAction):
        return run_grpc(action, pod_ip, timeout, USER_AGENT)
    return Outcome.UNKNOWN, f"unknown probe action {action!r}"


def run_exec(
    runtime: ExecRuntime, container_id: str, action: ExecAction, timeout: float
) -> tuple[Outcome, str]:
    result = runtime.exec_probe(container_id, action.command, timeout)
    if result.timed_out:  # exec.go: a timeout is a failure, its error the output (Go's %q)
        return Outcome.FAILURE, f"command {json.dumps(' '.join(action.command))} timed out"
    if result.exit_code is None:
        return Outcome.UNKNOWN, result.error or "the command could not be run"
    return (Outcome.SUCCESS if result.exit_code == 0 else Outcome.FAILURE), result.output


def run_tcp(host: str, port: int, timeout: float) -> tuple[Outcome, str]:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return Outcome.SUCCESS, ""
    except OSError as exc:
        return Outcome.FAILURE, f"dial tcp {_host_port(host, port)}: {_dial_error(exc)}"


def run_http(action: HttpGetAction, pod_ip: str, timeout: float) -> tuple[Outcome, str]:
    """GET with the kubelet's headers; 200-399 is success, a redirect off the host a warning."""
    url, headers = _request(action, pod_ip)
    for _ in range(MAX_REDIRECTS + 1):
        try:
            status, location, body = _get(url, headers, timeout)
        except OSError as exc:
            return Outcome.FAILURE, f'Get "{url}": {_dial_error(exc)}'
        if status in (301, 302, 303, 307, 308) and location:
            target = urljoin(url, location)
            if urlsplit(target).hostname != urlsplit(url).hostname:
                return Outcome.WARNING, f"Probe terminated redirects, Response body: {body}"
            url = target
            continue
        if 200 <= status < 400:
            return Outcome.SUCCESS, body
        return Outcome.FAILURE, f"HTTP probe failed with statuscode: {status}"
    return Outcome.FAILURE, f'Get "{url}": stopped after {MAX_REDIRECTS} redirects'


def http_get(action: HttpGetAction, host_default: str, timeout: float) -> str | None:
    """A lifecycle hook's GET (handlers.go): only a failed request is an error, not its code."""
    url, headers = _request(action, host_default, HOOK_USER_AGENT)
    try:
        _get(url, headers, timeout)
    except OSError as exc:
        return f'Get "{url}": {_dial_error(exc)}'
    return None


def _request(
    action: HttpGetAction, host_default: str, user_agent: str = USER_AGENT
) -> tuple[str, dict[str, str]]:
    host = action.host or host_default
    scheme = "https" if action.scheme == "HTTPS" else "http"
    path = action.path if action.path.startswith("/") else "/" + action.path
    headers = {"User-Agent": user_agent, "Accept": "*/*"}
    for name, value in action.headers:  # the spec's headers win, as http.go's
        headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
        headers[name] = value
    return f"{scheme}://{_host_port(host, action.port)}{path}", headers


def _get(url: str, headers: dict[str, str], timeout: float) -> tuple[int, str, str]:
    parts = urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":  # the kubelet does not verify a probe's certificate
        context = ssl._create_unverified_context()
        conn = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout, context=context
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target or "/", headers=headers)
        response = conn.getresponse()
        body = response.read(BODY_LIMIT).decode(errors="replace")
        return response.status, response.getheader("Location") or "", body
    finally:
        conn.close()


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _dial_error(exc: OSError) -> str:
    """Go's net error text for the usual cases, so events read as the kubelet's."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return "i/o timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "connect: connection refused"
    if isinstance(exc, ConnectionResetError):
        return "read: connection reset by peer"
    return str(exc.strerror or exc).lower()
