"""A command run in a container to its end, for a probe or a hook (the CRI's ExecSync)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docker.errors import APIError, NotFound

from kubelet_sim import cri
from kubelet_sim.runtime.containers import explain

EXEC_OUTPUT_LIMIT = 10 * 1024  # the kubelet keeps the first 10 KiB of a probe's output


def exec_sync(
    api: Any, container_id: str, command: Sequence[str], timeout: float, limit: int
) -> cri.ExecResult:
    """Run `command` in the container: its exit code and first `limit` bytes of output.

    The whole run has one deadline, `timeout` (ExecSync's): the stream is read with
    select() against it (docker-py's own reader polls without a timeout, so a socket
    timeout never fires), and a command still running at the deadline is killed, as
    containerd kills an ExecSync past its timeout, so that slow probes do not pile up.
    """
    deadline = time.monotonic() + max(timeout, 0.0)
    try:
        exec_id = api.exec_create(container_id, list(command), stdout=True, stderr=True)
        sock = api.exec_start(exec_id, socket=True)
    except (NotFound, APIError) as exc:
        return cri.ExecResult(None, "", explain(exc) if isinstance(exc, APIError) else str(exc))
    raw = getattr(sock, "_sock", sock)
    try:
        output, finished = _read_exec_stream(raw, deadline, limit)
    except OSError:
        output, finished = bytearray(), False
    finally:
        sock.close()
    if not finished:
        _kill_exec(api, exec_id)
        return cri.ExecResult(None, output.decode(errors="replace"), "", timed_out=True)
    try:
        code = api.exec_inspect(exec_id).get("ExitCode")
    except (NotFound, APIError) as exc:
        return cri.ExecResult(None, output.decode(errors="replace"), str(exc))
    return cri.ExecResult(code, output.decode(errors="replace"))


def _kill_exec(api: Any, exec_id: str) -> None:
    """SIGKILL an exec'd process that outlived its deadline (Docker has no API for it): by
    the host pid exec inspect gives, only if that pid is ours to see and in the container's
    cgroup (an engine in another pid namespace, or a pid reused, is left alone). Otherwise
    the command is left to end, never waited on."""
    try:
        info = api.exec_inspect(exec_id)
    except (NotFound, APIError):
        return
    pid, container_id = int(info.get("Pid") or 0), str(info.get("ContainerID") or "")
    if not info.get("Running") or pid <= 0 or not container_id:
        return
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return
    if container_id not in cgroup:
        return
    with contextlib.suppress(OSError):  # gone already, or not ours to signal
        os.kill(pid, signal.SIGKILL)


def _read_exec_stream(raw: socket.socket, deadline: float, limit: int) -> tuple[bytearray, bool]:
    """Docker's multiplexed exec stream (8-byte headers: stream, 0, 0, 0, big-endian size),
    read until its end or `deadline`: the first `limit` bytes of stdout and stderr together,
    and whether the stream ended in time."""
    output, pending = bytearray(), bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return output, False
        ready, _, _ = select.select([raw], [], [], remaining)
        if not ready:
            return output, False
        chunk = raw.recv(65536)
        if not chunk:
            return output, True
        pending += chunk
        while len(pending) >= 8:
            _stream, size = struct.unpack(">BxxxL", pending[:8])
            if len(pending) < 8 + size:
                break
            if len(output) < limit:
                output += pending[8 : 8 + min(size, limit - len(output))]
            del pending[: 8 + size]
