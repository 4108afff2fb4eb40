"""Path safety, in one place: names from the API (uids, container and volume names, profile
file names) must never reach outside the directory they are joined to."""

from __future__ import annotations

import os
from pathlib import Path


class UnsafePath(ValueError):
    """A path part or a resolved path that would leave its base directory."""


def safe_part(part: str) -> str:
    """One path component: refuse anything that could escape (empty, `.`, `..`, a slash)."""
    if not part or part in (".", "..") or "/" in part or "\0" in part:
        raise UnsafePath(f"unsafe path component {part!r}")
    return part


def resolve_within(base: Path, path: Path, what: str = "path") -> Path:
    """`path` with its symlinks resolved, relative to `base` (itself resolved); UnsafePath when
    it lands outside. Symlinks that stay inside are fine (a configMap key is one)."""
    resolved = Path(os.path.realpath(path))
    if resolved != base and base not in resolved.parents:
        raise UnsafePath(f"{what} {str(resolved)!r} not within {str(base)!r}")
    return resolved.relative_to(base)
