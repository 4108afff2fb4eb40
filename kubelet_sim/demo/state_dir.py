"""Where a demo keeps its things, and how the next demo finds what a killed one left.

A demo removes only what a demo made: a directory it claims is new or empty, or has its marker
(`.kubelet-sim-demo`, or the `demo.json` of a demo that did not exit); `data/` or `kubeconfig`
found without one belong to someone else, and the demo stops before touching them.

A running demo records its pid, its child processes and the label on its containers in
`demo.json`. A demo that starts and finds a record whose process is gone removes what that
one left (its children, its containers by label, its data) and says so. It never touches a
container without its label, nor a process whose command line is not the recorded one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelet_sim import cri
from kubelet_sim.linux.safe_paths import remove_tree
from kubelet_sim.volumes.hostmount import mount_points_under, unmount

OWNER_LABEL = cri.LABEL_OWNER
MARKER = ".kubelet-sim-demo"


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/kubelet-sim/demo, i.e. ~/.local/state/kubelet-sim/demo."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local/state")
    return Path(base) / "kubelet-sim" / "demo"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


class DemoRunning(RuntimeError):
    """Another demo with this state directory is running (or the directory is not a demo's)."""


@dataclass(frozen=True)
class Leftovers:
    """What a dead demo left and the next one removed (for the message)."""

    pid: int
    processes: int


@dataclass(frozen=True)
class DemoState:
    directory: Path

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "demo.log"

    @property
    def record(self) -> Path:
        return self.directory / "demo.json"

    @property
    def marker(self) -> Path:
        return self.directory / MARKER

    @property
    def owner_labels(self) -> dict[str, str]:
        """Stable for a state directory, so the next demo finds a dead one's containers."""
        digest = hashlib.sha256(str(self.directory.resolve()).encode()).hexdigest()[:16]
        return {OWNER_LABEL: digest}

    def claim(self) -> Leftovers | None:
        """Make the directory ours: refuse if a live demo holds it; end a dead one's
        processes and remove its data (its containers are the caller's: by label)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._mark()
        found = self._read()
        leftovers = None
        if found is not None:
            pid = int(found.get("pid") or 0)
            if pid and pid != os.getpid() and _alive(pid) and _is_demo(pid):
                raise DemoRunning(
                    f"another demo (pid {pid}) uses {self.directory}: stop it first, or give"
                    " this one its own --state-dir"
                )
            ended = 0
            for child in found.get("children") or []:
                child_pid, argv = int(child.get("pid") or 0), list(child.get("argv") or [])
                if child_pid and argv and _cmdline(child_pid)[: len(argv)] == argv:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child_pid, signal.SIGKILL)
                        ended += 1
            leftovers = Leftovers(pid, ended)
        self.remove_data()
        self.write(children=[])
        return leftovers

    def _mark(self) -> None:
        """Refuse a directory whose data/ or kubeconfig no demo made; else mark it ours."""
        if self.marker.exists() or self.record.exists():
            self.marker.touch()
            return
        foreign = [p.name for p in (self.data, self.kubeconfig) if p.exists() or p.is_symlink()]
        if foreign:
            raise DemoRunning(
                f"--state-dir {self.directory} holds {' and '.join(foreign)}, which no demo"
                " made (a demo removes them when it starts and ends): give it a new or empty"
                " directory"
            )
        self.marker.write_text("kubelet-sim demo's state: it removes data/ and kubeconfig here\n")

    def write(self, *, children: list[dict[str, Any]]) -> None:
        record = {"pid": os.getpid(), "children": children, "labels": self.owner_labels}
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self.record)

    def remove_data(self) -> None:
        """Pods' tmpfs and subPath mounts first (their nodes are gone and will not unmount
        them), deepest first, then the files."""
        if self.data.exists():
            for point in mount_points_under(self.data.resolve()):
                with contextlib.suppress(OSError):
                    unmount(point)
        remove_tree(self.data)
        self.kubeconfig.unlink(missing_ok=True)

    def release(self, *, keep: bool) -> None:
        if not keep:
            self.remove_data()
            self.log.unlink(missing_ok=True)
        self.record.unlink(missing_ok=True)
        if not keep:
            self.marker.unlink(missing_ok=True)

    def _read(self) -> dict[str, Any] | None:
        try:
            found = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None


def _is_demo(pid: int) -> bool:
    """A live pid that is a kubelet-sim process (not one that reused the number)."""
    return any("kubelet-sim" in part or "kubelet_sim" in part for part in _cmdline(pid))
