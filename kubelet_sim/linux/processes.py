"""Which process a pid names, in one place. A pid is reused once its process is gone, and in
another PID namespace (a CI job's container sharing the Docker socket) the same number is
another process, or none we can see. So a process is marked by the boot, its PID namespace,
its pid and its start time, and only a mark of our own boot and namespace is judged: of any
other we cannot tell whether it still runs."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def boot_id() -> str:
    """This boot's random id: a start time counts clock ticks from the boot, so it is only
    comparable within one."""
    return _read(PROC / "sys/kernel/random/boot_id").strip()


def pid_namespace() -> str:
    """The inode number of this process's PID namespace ('' when the /proc we read is another
    namespace's: then no pid in it means what it says)."""
    try:
        if os.readlink(PROC / "self") != str(os.getpid()):
            return ""
        link = os.readlink(PROC / "self/ns/pid")
    except OSError:
        return ""
    return link.removeprefix("pid:[").removesuffix("]")


def start_time(pid: int) -> str:
    """When `pid` started, in clock ticks since boot (field 22 of its stat); '' when gone."""
    fields = _read(PROC / f"{pid}/stat").rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""  # counted after the command's ")"


def uids(pid: int) -> tuple[int, ...]:
    """The real, effective, saved and filesystem uid of `pid`; () when gone."""
    for line in _read(PROC / f"{pid}/status").splitlines():
        if line.startswith("Uid:"):
            return tuple(int(value) for value in line.split()[1:])
    return ()


def cmdline(pid: int) -> list[str]:
    """The argv of `pid`; [] when gone (or a kernel thread)."""
    try:
        raw = (PROC / f"{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


@dataclass(frozen=True)
class ProcessMark:
    """One process, for as long as this boot lasts: written as `boot:namespace:pid:start`."""

    boot: str
    namespace: str
    pid: int
    started: str

    @classmethod
    def of(cls, pid: int) -> ProcessMark | None:
        """`pid` of our own PID namespace, marked now; None when gone or /proc says nothing."""
        boot, namespace, started = boot_id(), pid_namespace(), start_time(pid)
        if not (boot and namespace and started):
            return None
        return cls(boot, namespace, pid, started)

    @classmethod
    def parse(cls, text: str) -> ProcessMark | None:
        """A mark as `str()` wrote it; None for anything else (an older format among them)."""
        parts = text.split(":")
        if len(parts) != 4 or not all(parts) or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])

    def __str__(self) -> str:
        return f"{self.boot}:{self.namespace}:{self.pid}:{self.started}"

    def ours(self) -> bool:
        """Made in this boot and this PID namespace: the only marks we can judge."""
        return self.boot == boot_id() and self.namespace == pid_namespace() != ""

    def running(self) -> bool:
        """Ours, and its pid is still the process that started then."""
        return self.ours() and start_time(self.pid) == self.started

    def gone(self) -> bool:
        """Ours, and its process has ended: never true of another namespace's."""
        return self.ours() and start_time(self.pid) != self.started


def signal_if(mark: ProcessMark, sig: signal.Signals, argv: list[str]) -> bool:
    """Send `sig` to the process `mark` names when it still runs, runs as this process's user
    and its command line starts with `argv`; whether it was sent. The process is held by a
    pidfd before it is checked, so the signal reaches the very process that passed the checks
    even if the pid is reused meanwhile."""
    if not argv:
        return False
    try:
        pidfd = os.pidfd_open(mark.pid)
    except OSError:
        return False
    try:
        if not mark.running() or set(uids(mark.pid)) != {os.geteuid()}:
            return False
        if cmdline(mark.pid)[: len(argv)] != argv:
            return False
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)
    return True
