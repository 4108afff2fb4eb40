"""Where a demo keeps its things, and how the next demo finds what a killed one left.

A demo removes only what a demo made: a directory it claims is new or empty, or has its marker
(`.kubelet-sim-demo`, or the `demo.json` of a demo that did not exit); `data/` or `kubeconfig`
found without one belong to someone else, and the demo stops before touching them.

A running demo records its pid, its child processes and the label on its containers in
`demo.json`. A demo that starts and finds a record whose process is gone removes what that
one left (its children, its containers by label, its data) and says so. It never touches a
container without its label, nor a process that is not the recorded one (its start time, in
this boot and PID namespace), not ours (its uid) or whose command line is not the recorded one.

Whoever can write in the directory could plant that record, or a symlink where a file goes, and
the demo often runs as root: so the directory must be the user's own and writable by no one
else (linux/safe_paths.py), files in it are opened without following symlinks, and a `data`
that is a symlink is removed as a link, nothing below its target unmounted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kubelet_sim import cri
from kubelet_sim.linux.processes import ProcessMark, cmdline, signal_if
from kubelet_sim.linux.safe_paths import UnsafePath, open_nofollow, own_directory, remove_tree
from kubelet_sim.volumes.hostmount import mount_points_under, unmount

OWNER_LABEL = cri.LABEL_OWNER
MARKER = ".kubelet-sim-demo"
MARKER_TEXT = b"kubelet-sim demo's state: it removes data/ and kubeconfig here\n"


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


class DemoRunning(RuntimeError):
    """Another demo with this state directory is running (or the directory is not a demo's)."""


@dataclass(frozen=True)
class Leftovers:
    """What a dead demo left and the next one removed (for the message)."""

    pid: int
    processes: int


@dataclass(frozen=True)
class DemoState:
    """A demo's state directory, its symlinks resolved once: the checks and every later use
    then name the same directory."""

    directory: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(os.path.realpath(self.directory)))

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
        digest = hashlib.sha256(str(self.directory).encode()).hexdigest()[:16]
        return {OWNER_LABEL: digest}

    def prepare(self) -> None:
        """Make the directory if missing; DemoRunning when it is not the user's own, writable
        by no one else."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            own_directory(self.directory)
        except UnsafePath as exc:
            raise DemoRunning(
                f"--state-dir {self.directory} is not safe to use: {exc} (it must be a"
                " directory of the user who runs the demo, writable by no one else)"
            ) from None

    def open_log(self) -> TextIO:
        """`demo.log`, appended to; a symlink planted there is refused, never written through."""
        self.prepare()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        return os.fdopen(open_nofollow(self.log, flags), "a")

    def claim(self) -> Leftovers | None:
        """Make the directory ours: refuse if a live demo holds it; end a dead one's
        processes and remove its data (its containers are the caller's: by label)."""
        self.prepare()
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
            leftovers = Leftovers(pid, _end_children(found.get("children")))
        self.remove_data()
        self.write(children=[])
        return leftovers

    def _mark(self) -> None:
        """Refuse a directory whose data/ or kubeconfig no demo made; else mark it ours."""
        if not (self.marker.exists() or self.record.exists()):
            self._refuse_foreign()
        self._write(self.marker, MARKER_TEXT)

    def _refuse_foreign(self) -> None:
        foreign = [p.name for p in (self.data, self.kubeconfig) if p.exists() or p.is_symlink()]
        if foreign:
            raise DemoRunning(
                f"--state-dir {self.directory} holds {' and '.join(foreign)}, which no demo"
                " made (a demo removes them when it starts and ends): give it a new or empty"
                " directory"
            )

    def _write(self, path: Path, data: bytes) -> None:
        """A new file renamed into place: a symlink at `path` is replaced, never written
        through. (formats/pem.py holds `cryptography`, which `kubelet-sim --node-name` must not
        load: the CLI imports this module.)"""
        from kubelet_sim.formats.pem import write_private  # noqa: PLC0415

        write_private(path, data)

    def write(self, *, children: Iterable[tuple[int, Sequence[str]]] = ()) -> None:
        """The record: our pid, each child's pid, argv and mark, and our containers' label;
        written as a new file renamed into place (never through a symlink)."""
        entries = [
            {"pid": pid, "argv": list(argv), "mark": str(ProcessMark.of(pid) or "")}
            for pid, argv in children
        ]
        record = {"pid": os.getpid(), "children": entries, "labels": self.owner_labels}
        self._write(self.record, json.dumps(record).encode())

    def remove_data(self) -> None:
        """Pods' tmpfs and subPath mounts first (their nodes are gone and will not unmount
        them), deepest first, then the files. A `data` that is a symlink goes as a link:
        what is mounted below its target is not ours."""
        if self.data.is_dir() and not self.data.is_symlink():
            for point in mount_points_under(self.data):
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
            with os.fdopen(open_nofollow(self.record, os.O_RDONLY)) as record:
                found = json.load(record)
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None


def _end_children(children: Any) -> int:
    """SIGKILL each recorded child that is still the very process recorded; how many."""
    ended = 0
    for child in children if isinstance(children, list) else []:
        mark = ProcessMark.parse(str(child.get("mark") or "")) if isinstance(child, dict) else None
        if mark is not None and signal_if(mark, signal.SIGKILL, list(child.get("argv") or [])):
            ended += 1
    return ended


def _is_demo(pid: int) -> bool:
    """A live pid that is a kubelet-sim process (not one that reused the number)."""
    return any("kubelet-sim" in part or "kubelet_sim" in part for part in cmdline(pid))
