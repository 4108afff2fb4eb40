"""The runtime's host directory: per-container termination-log files that containers write to.

Layout as the kubelet's: `<root>/pods/<uid>/containers/<name>/<attempt>-termination-log`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kubelet_sim.linux.safe_paths import make_dir, remove_tree, safe_part

# kubecontainer.MaxContainerTerminationMessageLength: the kubelet keeps the file's last 4 KiB.
MAX_TERMINATION_MESSAGE_BYTES = 4096


class PodFiles:
    """Owns `<root>/pods`; safe to share between threads (only file-system calls).

    The root is 0700 and each pod's directory 0750 whatever the umask (secret volumes live
    there too); the files a container writes are mounted into it, which needs no access to
    their parents.
    """

    def __init__(self, root_dir: Path) -> None:
        self.root = root_dir.resolve()

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / "pods" / safe_part(pod_uid)

    def make_pod_dir(self, pod_uid: str) -> Path:
        self.root.parent.mkdir(parents=True, exist_ok=True)
        for path, mode in ((self.root, 0o700), (self.root / "pods", 0o750)):
            make_dir(path, mode)
        return make_dir(self.pod_dir(pod_uid), 0o750)

    def termination_log(self, pod_uid: str, container: str, attempt: int) -> Path:
        return (
            self.pod_dir(pod_uid)
            / "containers"
            / safe_part(container)
            / f"{attempt}-termination-log"
        )

    def create_termination_log(self, pod_uid: str, container: str, attempt: int) -> Path:
        """An empty file any user in the container can write (runAsUser may be anyone)."""
        path = self.termination_log(pod_uid, container, attempt)
        self.make_pod_dir(pod_uid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        os.chmod(path, 0o666)  # world-writable on purpose, like the kubelet's
        return path

    def read_termination_message(self, pod_uid: str, container: str, attempt: int) -> str:
        """The last 4 KiB of the file, as the kubelet reads it (tail.ReadAtMost); "" if absent."""
        try:
            path = self.termination_log(pod_uid, container, attempt)
            with path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - MAX_TERMINATION_MESSAGE_BYTES))
                data = f.read(MAX_TERMINATION_MESSAGE_BYTES)
        except (OSError, ValueError):
            return ""
        return data.decode("utf-8", errors="replace")

    def write_managed(self, pod_uid: str, name: str, text: str) -> Path:
        """A file the kubelet manages for the pod's containers (etc-hosts, resolv.conf): readable
        by any user in them, replaced whole so a container never reads half of it."""
        path = self.make_pod_dir(pod_uid) / name
        staged = path.with_name(f".{name}.new")
        staged.write_text(text)
        os.chmod(staged, 0o644)
        os.replace(staged, path)
        return path

    def journal(self, pod_uid: str) -> Path:
        """What only the node knows of a pod's start (when its watch delivered it, admission,
        status writes), a JSON object a line, for `kubelet-sim trace`; gone with the pod."""
        return self.pod_dir(pod_uid) / "journal.jsonl"

    def append_journal(self, pod_uid: str, entry: dict[str, Any]) -> None:
        path = self.journal(pod_uid)
        self.make_pod_dir(pod_uid)
        with path.open("a") as f:
            f.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def read_journal(self, pod_uid: str) -> list[dict[str, Any]]:
        try:
            lines = self.journal(pod_uid).read_text().splitlines()
        except (OSError, ValueError):
            return []
        entries = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a crash
        return entries

    def remove_pod_dir(self, pod_uid: str) -> None:
        """Only once nothing is mounted below (the volume manager unmounted it first)."""
        remove_tree(self.pod_dir(pod_uid))
