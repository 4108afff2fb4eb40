"""The image kubelet-sim runs from as a Kubernetes workload (deploy/workload/), built on this host.

No registry is needed: the image is this host's Python (the interpreter that runs this code,
its standard library), kubelet-sim and its runtime dependencies as installed here, the tools
the service proxy drives in pods' namespaces (nsenter, ip, iptables and its modules), every
shared library those need (as `ldd` finds them), on the local busybox root filesystem
(local_images.py). `docker push` it where a cluster pulls from, or load it into a node.
Rebuilt only when a file it is made from changed (a digest of names, sizes and times).
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterable
from fnmatch import fnmatch
from importlib import metadata
from pathlib import Path

import docker

from kubelet_sim import __version__
from kubelet_sim.runtime.local_images import (
    RECIPE_LABEL,
    busybox_rootfs,
    existing_recipe,
    static_busybox,
)

AGENT_IMAGE_REPOSITORY = "kubelet-sim.local/kubelet-sim"
SITE = "/opt/kubelet-sim/site-packages"  # the package and its dependencies in the image
# What the service proxy runs (proxy/netns.py), as found on this host's PATH.
TOOLS = ("nsenter", "ip", "iptables", "iptables-restore", "iptables-save")
_XTABLES_MODULES = ("/usr/lib/*/xtables", "/usr/lib/xtables", "/usr/lib64/xtables")
# Not needed to run, and large (the static library in config-*: tens of MiB).
_STDLIB_SKIPPED = (
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "site-packages",
    "config-*",
)
_ETC = ("/etc/protocols", "/etc/services", "/etc/ethertypes")
_LDD_PATH = re.compile(r"(/\S+)")


def agent_image_name() -> str:
    return f"{AGENT_IMAGE_REPOSITORY}:{__version__}"


def ensure_agent_image(client: docker.DockerClient) -> tuple[str, bool]:
    """(the image's name, whether it was built now)."""
    name = agent_image_name()
    files = image_files()
    python = _python_path()
    changes = [
        f"ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONPATH={SITE}",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        f"ENTRYPOINT {json.dumps([python, '-m', 'kubelet_sim'])}",
    ]
    digest = _digest(files, changes)
    if existing_recipe(client, name) == digest:
        return name, False
    repository, tag = name.rsplit(":", 1)
    client.api.import_image_from_data(
        _rootfs(files, python),
        repository=repository,
        tag=tag,
        changes=[*changes, f"LABEL {RECIPE_LABEL}={digest}"],
    )
    return name, True


def image_files() -> dict[str, Path]:
    """Path in the image → file (or symlink) on this host."""
    files: dict[str, Path] = {}
    base = Path(sys.base_prefix)
    executable = Path(_python_path())
    _add(files, executable)
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["stdlib"])
    for path in _tree(stdlib, skip=_STDLIB_SKIPPED):
        _add(files, path)
    if not str(stdlib).startswith(str(base)):
        raise RuntimeError(f"the standard library {stdlib} is not under {base}")
    site = _site_packages()
    for path, arcname in site.items():
        files[arcname] = path
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is not None:
            _add(files, Path(found))
    for pattern in _XTABLES_MODULES:
        for directory in glob.glob(pattern):
            for path in _tree(Path(directory)):
                _add(files, path)
    for etc in _ETC:
        if Path(etc).is_file():
            _add(files, Path(etc))
    for library in _libraries(list(files.values())):
        _add(files, library)
    return files


def _python_path() -> str:
    """The interpreter's real path (a venv's python is a link to it)."""
    return str(Path(sys._base_executable).resolve())  # type: ignore[attr-defined]


def _site_packages() -> dict[Path, str]:
    """kubelet-sim and the distributions it needs, as installed here → their path in SITE."""
    found: dict[Path, str] = {}
    package = Path(__file__).resolve().parents[1]
    for path in _tree(package):
        found[path] = f"{SITE}/kubelet_sim/{path.relative_to(package)}"
    for dist in _needed_distributions("kubelet-sim"):
        for entry in dist.files or ():
            path = Path(str(dist.locate_file(entry))).resolve()
            parts = Path(str(entry)).parts
            if (
                not path.is_file()
                or entry.suffix == ".pth"
                or parts[:1] in (("..",), ("kubelet_sim",))
            ):
                continue  # an editable install's link, a script outside site-packages
            found[path] = f"{SITE}/{entry}"
    return found


def _needed_distributions(name: str) -> list[metadata.Distribution]:
    """`name` and what it requires, recursively, without extras; those installed here."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        wanted = todo.pop()
        key = re.sub(r"[-_.]+", "-", wanted).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(wanted)
        except metadata.PackageNotFoundError:
            continue  # a requirement of another platform or Python
        seen[key] = dist
        for requirement in dist.requires or ():
            spec, _, marker = requirement.partition(";")
            if "extra" in marker or not _marker_holds(marker):
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
            if match:
                todo.append(match.group(1))
    return list(seen.values())


def _marker_holds(marker: str) -> bool:
    """Whether an environment marker holds here; without `packaging`, say yes (a requirement
    not installed here is skipped anyway)."""
    if not marker.strip():
        return True
    try:
        from packaging.markers import Marker  # noqa: PLC0415 (optional)
    except ImportError:
        return True
    return bool(Marker(marker).evaluate())


def _tree(root: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    """Files and symlinks below `root`, but its entries whose name matches a glob of `skip`."""
    out: list[Path] = []
    for directory, dirs, names in os.walk(root):
        here = Path(directory)
        kept = names
        if here == root:
            dirs[:] = [d for d in dirs if not any(fnmatch(d, p) for p in skip)]
            kept = [n for n in names if not any(fnmatch(n, p) for p in skip)]
        out.extend(here / n for n in kept)
    return out


def _add(files: dict[str, Path], path: Path) -> None:
    """`path` at its own absolute place, and what each link on the way points to."""
    seen = 0
    while True:
        files.setdefault(str(path).lstrip("/"), path)
        if not path.is_symlink() or seen > 20:
            return
        target = Path(os.readlink(path))
        path = target if target.is_absolute() else path.parent / target
        path = Path(os.path.normpath(path))
        seen += 1


def _libraries(paths: Iterable[Path]) -> set[Path]:
    """The shared libraries (with the loader) of every ELF file among `paths`, as `ldd` says."""
    elves = [p for p in paths if _is_elf(p)]
    found: set[Path] = set()
    for start in range(0, len(elves), 64):
        batch = [str(p) for p in elves[start : start + 64]]
        out = subprocess.run(["ldd", *batch], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if "=>" not in line and not line.startswith("\t/"):
                continue  # "linux-vdso.so.1 (0x...)", "statically linked", a file's name
            match = _LDD_PATH.search(line.rpartition("=>")[2])
            if match and Path(match.group(1)).exists():
                found.add(Path(match.group(1)))
    return found


def _is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def _digest(files: dict[str, Path], changes: list[str]) -> str:
    h = hashlib.sha256(json.dumps(changes).encode())
    h.update(static_busybox().read_bytes())
    for arcname in sorted(files):
        stat = files[arcname].lstat()
        h.update(f"{arcname}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _rootfs(files: dict[str, Path], python: str) -> bytes:
    """busybox's root filesystem, then the files (overriding busybox's applets of the same
    name), and in /usr/local/bin, first on the PATH, `python3` and the tools: busybox has an
    `ip` and an `nsenter` of its own elsewhere on the PATH, without what the proxy uses."""
    links = {"python3": python}
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is not None:
            links[tool] = found
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        busybox_rootfs(tar, skip=set(files))
        for arcname in sorted(files):
            tar.add(str(files[arcname]), arcname=arcname, recursive=False)
        for name, target in links.items():
            link = tarfile.TarInfo(f"usr/local/bin/{name}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(link)
    return buf.getvalue()
