"""What the wheel must carry for controller authors (issue 42, deliverable 6): `py.typed`, so
that their type checker reads `kubelet_sim.testing`'s hints (PEP 561) instead of taking every
name of it as Any. Read from pyproject.toml's hatchling settings and .gitignore (hatchling
leaves out what git ignores), not by building a wheel."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = "kubelet_sim/py.typed"


def _covers(prefix: str, path: str) -> bool:
    """Whether a hatchling include entry (a file or a folder) takes `path`."""
    prefix = prefix.strip("/")
    return path == prefix or path.startswith(f"{prefix}/")


def _ignored(pattern: str, path: str) -> bool:
    """Whether an exclude or .gitignore pattern drops `path` (matched as git does: against the
    path, or against any of its parts for a pattern without a slash)."""
    pattern = pattern.strip().rstrip("/")
    if not pattern or pattern.startswith(("#", "!")):
        return False
    if "/" in pattern.lstrip("/"):
        return fnmatch.fnmatch(path, pattern.lstrip("/"))
    return any(fnmatch.fnmatch(part, pattern) for part in path.split("/"))


def _hatch_build() -> tuple[dict[str, Any], dict[str, Any]]:
    """pyproject.toml's [tool.hatch.build] and its wheel target's settings."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    build = tool["hatch"].get("build", {})
    return build, build.get("targets", {}).get("wheel", {})


def test_the_package_is_marked_typed_and_the_wheel_takes_the_marker() -> None:
    assert (ROOT / MARKER).is_file(), "PEP 561: kubelet_sim/py.typed marks the package typed"
    assert (ROOT / MARKER).read_text().strip() == "", "a 'partial' marker promises less"
    build, wheel = _hatch_build()
    only = wheel.get("only-include", build.get("only-include"))
    included = only if only is not None else wheel.get("packages", build.get("packages", []))
    assert any(_covers(entry, MARKER) for entry in included), f"{MARKER} not included"
    excluded = [*build.get("exclude", []), *wheel.get("exclude", [])]
    if not wheel.get("ignore-vcs", build.get("ignore-vcs", False)):
        excluded += (ROOT / ".gitignore").read_text().splitlines()
    assert [p for p in excluded if _ignored(p, MARKER)] == [], f"{MARKER} excluded"
