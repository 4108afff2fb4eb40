"""A Python image made on this host with `docker import`: no base image, no registry.

The image is the Python running this code: its interpreter and standard library at the same
paths as here (so that it finds its libpython and its lib/ as it does here), in its
site-packages only the installed distributions named (and what they require, recursively,
with their bytecode), the caller's own files, and the shared libraries `ldd` names for every
ELF file among all those. It carries a digest of its files (names, sizes, times) and settings
in a label and is built again only when that digest changes; the image it replaces goes.

Two callers: `kubelet_sim.testing.python_image` (public: a controller's image for its tests,
examples/configmap-apps) and agent_image.py (`kubelet-sim image`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path, PurePosixPath

import docker
from docker.errors import APIError, ImageNotFound

from kubelet_sim.runtime.local_images import RECIPE_LABEL

_RECIPE_VERSION = "2"
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# Parts of the standard library an app does not run: its tests, GUI, installers; the base
# site-packages, replaced by the distributions named; config-*, tens of MiB of static library.
_STDLIB_SKIPPED = re.compile(
    r"(test|idlelib|tkinter|turtledemo|ensurepip|lib2to3|site-packages|config-[^/]*)(/|$)"
    r"|lib-dynload/_tkinter"
)
_LDD_PATH = re.compile(r"(/\S+)")


def python_image(
    client: docker.DockerClient,
    name: str,
    *,
    requirements: Iterable[str],
    app: Mapping[str, Path],
    command: list[str] | None = None,
    entrypoint: list[str] | None = None,
) -> str:
    """Image `name` (repository:tag) in the Docker engine of `client`, made on this host with
    `docker import` (no base image, no registry): this Python's interpreter and standard
    library at their paths here, the installed distributions named in `requirements` and those
    they require, `app` (path in the image: file here; a file here at the same path that is a
    symbolic link stays one, and what it points to comes too), the shared libraries `ldd`
    names for every ELF file among them, then `ENTRYPOINT entrypoint` and `CMD command`
    (`python3` is on the image's PATH). Built unless the image there was made from the same
    files (names, sizes, times) and arguments; the one it replaces is removed. It runs where
    this host's libraries do (the same distribution and architecture), with HOME=/tmp.

    An editable install's files are not among its distribution's: give its package directory
    in `app`, under the interpreter's site-packages
    (`sysconfig.get_path("purelib", vars={"base": sys.base_prefix})`)."""
    files = {**_interpreter_files(), **_distribution_files(requirements)}
    for image_path, path in app.items():
        _add(files, image_path.lstrip("/"), path)
    bin_dir = PurePosixPath(interpreter()).parent
    changes = [
        f"ENV PATH=/usr/local/bin:{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV HOME=/tmp PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1",
        *([f"ENTRYPOINT {json.dumps(entrypoint)}"] if entrypoint is not None else []),
        *([f"CMD {json.dumps(command)}"] if command is not None else []),
    ]
    links = _interpreter_links()
    digest = _digest(files, [*changes, json.dumps(links, sort_keys=True)])
    try:
        old = client.images.get(name)
    except ImageNotFound:
        old = None
    if old is not None and old.labels.get(RECIPE_LABEL) == digest:
        return name
    for library in _shared_libraries(p for p in files.values() if _is_elf(p)):
        _add(files, str(library).lstrip("/"), library)
    repository, tag = name.rsplit(":", 1)
    with tempfile.TemporaryDirectory(prefix="python-image-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        _write_rootfs(rootfs, files, links)
        client.api.import_image_from_file(
            str(rootfs),
            repository=repository,
            tag=tag,
            changes=[*changes, f"LABEL {RECIPE_LABEL}={digest}"],
        )
    if old is not None and client.images.get(name).id != old.id:
        # The image replaced, now untagged: its ~260 MB go (unless a container uses it).
        with contextlib.suppress(APIError):
            client.images.remove(str(old.id))
    return name


def interpreter() -> str:
    """The interpreter's real path, here and in the image (a venv's python links to it)."""
    return str(Path(sys._base_executable).resolve())  # type: ignore[attr-defined]


def site_packages() -> PurePosixPath:
    """Where the image's distributions go: the base interpreter's site-packages, where it
    looks without a venv."""
    return PurePosixPath(sysconfig.get_path("purelib", vars={"base": sys.base_prefix}))


def _interpreter_files() -> dict[str, Path]:
    """The interpreter and the standard library, at their paths here."""
    executable = Path(interpreter())
    files = {str(executable).lstrip("/"): executable}
    stdlib = Path(sysconfig.get_path("stdlib"))  # the base interpreter's, in a venv too
    for path in stdlib.rglob("*"):
        if path.is_dir() or _STDLIB_SKIPPED.match(path.relative_to(stdlib).as_posix()):
            continue
        _add(files, str(path).lstrip("/"), path)
    return files


def _interpreter_links() -> dict[str, str]:
    """`python3` and `python` beside the interpreter (python3.11), as PATH finds them here."""
    executable = Path(interpreter())
    return {
        str(executable.with_name(link)).lstrip("/"): executable.name
        for link in ("python3", "python")
        if link != executable.name
    }


def _distribution_files(requirements: Iterable[str]) -> dict[str, Path]:
    """Each distribution's files (its RECORD, and the bytecode of its modules) in
    site_packages()."""
    site = site_packages()
    files = {}
    for dist in _closure(requirements):
        for record in dist.files or []:
            if record.parts[0] == "..":  # scripts installed in bin/: not needed
                continue
            source = Path(str(record.locate()))
            if source.is_file():
                files[str(site / str(record)).lstrip("/")] = source
            for cached in source.parent.glob(f"__pycache__/{source.stem}.*.pyc"):
                arcname = site / PurePosixPath(str(record)).parent / "__pycache__"
                files[str(arcname / cached.name).lstrip("/")] = cached
    return files


def _closure(requirements: Iterable[str]) -> list[Distribution]:
    """The installed distributions named and those they require, without extras or those
    whose environment marker does not hold here; one not installed here is skipped (a
    requirement of another Python or platform)."""
    found: dict[str, Distribution] = {}
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        key = re.sub(r"[-_.]+", "-", requirement).lower()
        if key in found:
            continue
        try:
            dist = distribution(requirement)
        except PackageNotFoundError:
            continue
        found[key] = dist
        for line in dist.requires or []:
            spec, _, marker = line.partition(";")
            named = _REQUIREMENT_NAME.match(spec)
            if named and "extra" not in marker and _marker_holds(marker):
                todo.append(named[1])
    return list(found.values())


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


def _add(files: dict[str, Path], image_path: str, path: Path) -> None:
    """`path` at `image_path`. A symbolic link at its own path here stays one, and each link
    on its way comes too, at its own path; one put elsewhere is followed (its content there)."""
    if image_path != str(path).lstrip("/"):
        files[image_path] = path.resolve()
        return
    for _ in range(40):  # the kernel's limit on a chain of links
        files.setdefault(str(path).lstrip("/"), path)
        if not path.is_symlink():
            return
        path = Path(os.path.normpath(path.parent / os.readlink(path)))


def _shared_libraries(binaries: Iterable[Path]) -> set[Path]:
    """The shared libraries (the loader among them) `ldd` names for `binaries`."""
    elves = [str(p) for p in binaries]
    found: set[Path] = set()
    for start in range(0, len(elves), 64):
        out = subprocess.run(
            ["ldd", *elves[start : start + 64]], capture_output=True, text=True, check=False
        ).stdout
        for line in out.splitlines():
            if "=>" not in line and not line.startswith("\t/"):
                continue  # "linux-vdso.so.1 (0x...)", "statically linked", a file's name
            match = _LDD_PATH.search(line.rpartition("=>")[2])
            if match and Path(match[1]).exists():
                found.add(Path(match[1]))
    return found


def _is_elf(path: Path) -> bool:
    """A regular file starting with ELF's magic number (a link's target is a file too)."""
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def _digest(files: dict[str, Path], settings: list[str]) -> str:
    """Of every file's name, size and time (thousands of them: not their bytes), and the
    image's settings. The shared libraries are left out: they follow from these files."""
    recipe = hashlib.sha256(f"{_RECIPE_VERSION}\n{settings}\n".encode())
    for name, path in sorted(files.items()):
        st = path.lstat()
        recipe.update(f"{name}={path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return recipe.hexdigest()[:16]


def _write_rootfs(tar_path: Path, files: dict[str, Path], links: dict[str, str]) -> None:
    """Files and symbolic links at their names, every directory readable by any user, and a
    /tmp for all."""
    directories = {"tmp", "proc", "sys", "dev", "etc"}
    for name in [*files, *links]:
        directories.update(str(p) for p in PurePosixPath(name).parents if str(p) != ".")
    with tarfile.open(tar_path, "w") as tar:
        for directory in sorted(directories):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for name, path in sorted(files.items()):
            tar.add(str(path), arcname=name, recursive=False)
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
