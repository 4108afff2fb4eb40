"""Reading `--pod-manifest-path`: the pod manifests of a directory (or one file), as the
kubelet's file source reads them (`pkg/kubelet/config/file.go`).

Every regular file whose name does not start with a dot is a manifest, whatever its extension
(the kubelet's glob `[^.]*`): YAML or JSON (JSON is YAML), one pod per file. Subdirectories are
not entered. A file that is no valid pod is logged once per content and skipped; a path that
does not exist holds no pods.

The node runs what these files say, as root, so it reads them only where nobody else can write
(unlike the kubelet): a path another user could change is not read at all (what runs is kept),
a symlink in the directory is not followed, a file another user could write is skipped. YAML
aliases are refused (formats/yaml_text.py).
"""

from __future__ import annotations

import copy
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubelet_sim.formats import yaml_text
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.linux.safe_paths import open_to_others, others_may_change
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.static import CONFIG_SEEN, ManifestError, static_pod, validate_manifest

MAX_MANIFEST_BYTES = 10 * 1024 * 1024  # the kubelet's maxConfigLength: larger is refused
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Manifest:
    """One file's pod (made once per content: the node's pod, without its seen time), or why
    it has none."""

    path: str
    pod: Json | None
    error: str = ""

    def pod_seen(self, seen: str) -> Json:
        """A copy of the pod, first read at `seen` (kubernetes.io/config.seen)."""
        assert self.pod is not None
        pod = copy.deepcopy(self.pod)
        pod["metadata"]["annotations"][CONFIG_SEEN] = seen
        return pod


class ManifestReader:
    """Reads the manifests each pass; a file is parsed again only when its bytes changed."""

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.node = node
        self._log = get_logger("kubelet_sim.staticpods", node=node)
        self._cache: dict[str, tuple[tuple[bytes, str], Manifest]] = {}  # by what was read
        self._path_problem: str | None = None  # told once while it lasts

    def read(self) -> list[Manifest] | None:
        """The valid manifests, in path order; None while the path is not to be trusted (the
        caller keeps what runs)."""
        files = self._files()
        if files is None:
            return None
        found: dict[str, tuple[tuple[bytes, str], Manifest]] = {}
        for path in files:
            read = _read(path)
            if read is None:
                continue  # removed between the listing and the read
            cached = self._cache.get(path)
            if cached is None or cached[0] != read:
                cached = read, self._parse(path, read)
                if cached[1].error:
                    self._log.warning(
                        "could not process manifest file", path=path, error=cached[1].error
                    )
            found[path] = cached
        self._cache = found
        return [m for _, (_, m) in sorted(found.items()) if m.pod is not None]

    def _files(self) -> list[str] | None:
        """The files to read, [] for a path that does not exist, None for one that others
        may change."""
        try:
            problem = others_may_change(self.path)
            single = self.path.is_file()
            entries = [] if single else list(os.scandir(self.path))
        except OSError as exc:
            self._tell_path_problem(f"cannot read the manifest path: {exc.strerror}")
            return []
        if problem is not None:
            self._tell_path_problem(f"not read: {problem}, so others could run pods as root")
            return None
        self._path_problem = None
        if single:
            return [os.path.realpath(self.path)]
        return sorted(
            entry.path
            for entry in entries
            if not entry.name.startswith(".") and not entry.is_dir(follow_symlinks=False)
        )

    def _tell_path_problem(self, problem: str) -> None:
        if problem != self._path_problem:
            self._path_problem = problem
            self._log.warning("manifest path refused", path=str(self.path), problem=problem)

    def _parse(self, path: str, read: tuple[bytes, str]) -> Manifest:
        content, refused = read
        if refused:
            return Manifest(path, None, refused)
        if len(content) > MAX_MANIFEST_BYTES:
            return Manifest(path, None, f"larger than {MAX_MANIFEST_BYTES} bytes")
        try:
            data: Any = yaml_text.load(content)
            pod = static_pod(validate_manifest(data), self.node, path, "")
        except yaml_text.YAMLError as exc:
            return Manifest(path, None, f"not YAML or JSON: {yaml_text.error_line(exc)}")
        except RecursionError:
            return Manifest(path, None, "nested too deeply")
        except ManifestError as exc:
            return Manifest(path, None, str(exc))
        return Manifest(path, pod)


def _read(path: str) -> tuple[bytes, str] | None:
    """A file's bytes (at most one more than allowed), or why it is not read: a symlink (not
    followed), not a regular file, or a file others may write. None if it is gone."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return b"", "a symlink: not followed"
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", "not a regular file"
        problem = open_to_others(st)
        if problem is not None:
            return b"", f"{problem}: not read"
        return f.read(MAX_MANIFEST_BYTES + 1), ""
