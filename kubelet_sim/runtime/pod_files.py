"""The runtime's host directory: per-container termination-log files that containers write to.

Layout as the kubelet's: `<root>/pods/<uid>/containers/<name>/<attempt>-termination-log`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

# kubecontainer.MaxContainerTerminationMessageLength: the kubelet keeps the file's last 4 KiB.
MAX_TERMINATION_MESSAGE_BYTES = 4096


def _safe(part: str) -> str:
    """Path parts come from the API (uid, container name): refuse anything that could escape."""
    if not part or part in (".", "..") or "/" in part or "\0" in part:
        raise ValueError(f"unsafe path component {part!r}")
    return part


class PodFiles:
    """Owns `<root>/pods`; safe to share between threads (only file-system calls)."""

    def __init__(self, root_dir: Path) -> None:
        self.root = root_dir.resolve()

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / "pods" / _safe(pod_uid)

    def termination_log(self, pod_uid: str, container: str, attempt: int) -> Path:
        return (
            self.pod_dir(pod_uid) / "containers" / _safe(container) / f"{attempt}-termination-log"
        )

    def create_termination_log(self, pod_uid: str, container: str, attempt: int) -> Path:
        """An empty file any user in the container can write (runAsUser may be anyone)."""
        path = self.termination_log(pod_uid, container, attempt)
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

    def journal(self, pod_uid: str) -> Path:
        """What only the node knows of a pod's start (when its watch delivered it, admission,
        status writes), a JSON object a line, for `kubelet-sim trace`; gone with the pod."""
        return self.pod_dir(pod_uid) / "journal.jsonl"

    def append_journal(self, pod_uid: str, entry: dict[str, Any]) -> None:
        path = self.journal(pod_uid)
        path.parent.mkdir(parents=True, exist_ok=True)
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
        shutil.rmtree(self.pod_dir(pod_uid), ignore_errors=True)
