"""Reading `--pod-manifest-path`: the pod manifests of a directory (or one file), as the
kubelet's file source reads them (`pkg/kubelet/config/file.go`).

Every regular file whose name does not start with a dot is a manifest, whatever its extension
(the kubelet's glob `[^.]*`): YAML or JSON (JSON is YAML), one pod per file. Subdirectories are
not entered. A file that is no valid pod is logged once per content and skipped; a path that
does not exist holds no pods.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.static import ManifestError, validate_manifest

MAX_MANIFEST_BYTES = 10 * 1024 * 1024  # a pod is a few KiB; a larger file is refused, not read


# YAML as the kubelet's converter reads it into JSON: a date stays a string.
_Loader: Any = type("_Loader", (yaml.SafeLoader,), {})
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class Manifest:
    """One file's pod, or why it has none."""

    path: str
    content: bytes
    manifest: Json | None
    error: str = ""


class ManifestReader:
    """Reads the manifests each pass; a file is parsed again only when its bytes changed."""

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self._log = get_logger("kubelet_sim.staticpods", node=node)
        self._cache: dict[str, Manifest] = {}
        self._missing_logged = False

    def read(self) -> list[Manifest]:
        """The valid manifests, in path order."""
        found: dict[str, Manifest] = {}
        for path in self._files():
            try:
                with open(path, "rb") as f:
                    content = f.read(MAX_MANIFEST_BYTES + 1)
            except OSError:
                continue  # removed between the listing and the read
            cached = self._cache.get(path)
            if cached is None or cached.content != content:
                cached = _parse(path, content)
                if cached.error:
                    self._log.warning(
                        "could not process manifest file", path=path, error=cached.error
                    )
            found[path] = cached
        self._cache = found
        return [m for _, m in sorted(found.items()) if m.manifest is not None]

    def _files(self) -> list[str]:
        if self.path.is_file():
            return [str(self.path)]
        try:
            entries = list(os.scandir(self.path))
        except OSError as exc:
            if not self._missing_logged:
                self._missing_logged = True
                self._log.warning(
                    "cannot read the manifest path", path=str(self.path), error=str(exc)
                )
            return []
        self._missing_logged = False
        return sorted(
            entry.path
            for entry in entries
            if not entry.name.startswith(".") and entry.is_file(follow_symlinks=True)
        )


def _parse(path: str, content: bytes) -> Manifest:
    if len(content) > MAX_MANIFEST_BYTES:
        return Manifest(path, content, None, f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        data: Any = yaml.load(content, Loader=_Loader)  # a SafeLoader
        manifest = validate_manifest(data)
    except yaml.YAMLError as exc:
        return Manifest(path, content, None, f"not YAML or JSON: {str(exc).splitlines()[0]}")
    except ManifestError as exc:
        return Manifest(path, content, None, str(exc))
    return Manifest(path, content, manifest)
