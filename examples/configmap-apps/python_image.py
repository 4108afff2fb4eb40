"""A Python image made on this host with `docker import`: no base image, no registry.

The controller needs a Python with the `kubernetes` client. This image copies the Python that
runs the tests: its interpreter and standard library at the same paths as here (so that it
finds its libpython and its lib/ as it does here), the shared libraries `ldd` names for it and
its extension modules, and in its site-packages only the installed distributions named (and
what they require, recursively), plus the app's own files. The image carries a digest of all
that in a label and is built again only when the digest changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterable
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path, PurePosixPath

import docker
from docker.errors import ImageNotFound

RECIPE_LABEL = "example.kubelet-sim.io/recipe"
_RECIPE_VERSION = "1"
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9._-]+")
# Parts of the standard library an app does not run: its tests, GUI, installers; and the
# base site-packages, replaced by the distributions named.
_STDLIB_SKIPPED = re.compile(
    r"(test|idlelib|tkinter|turtledemo|ensurepip|lib2to3|site-packages|config-[^/]*)(/|$)"
    r"|lib-dynload/_tkinter"
)


def python_image(
    client: docker.DockerClient,
    name: str,
    *,
    requirements: Iterable[str],
    app: dict[str, Path],
    command: list[str],
) -> str:
    """Image `name` (repository:tag) with this Python, `requirements` installed as here, and
    `app` (path in the image: file here); built unless the one there has the same digest."""
    files = {**_interpreter_files(), **_distribution_files(requirements), **app}
    bin_dir = PurePosixPath(sys.base_prefix) / "bin"
    changes = [
        f"ENV PATH={bin_dir}:/usr/bin:/bin",
        "ENV HOME=/tmp PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1",
        f"CMD {json.dumps(command)}",
    ]
    links = _interpreter_links()
    digest = _digest(files, [*changes, str(links)])
    try:
        old = client.images.get(name)
    except ImageNotFound:
        old = None
    if old is not None and (old.attrs["Config"].get("Labels") or {}).get(RECIPE_LABEL) == digest:
        return name
    for library in _shared_libraries(p for p in files.values() if _is_elf(p)):
        files.setdefault(library.lstrip("/"), Path(library).resolve())
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
    if old is not None:  # the image replaced, now untagged: its ~260 MB go (unless in use)
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(old.id)
    return name


def _interpreter_files() -> dict[str, Path]:
    """The interpreter and the standard library, at their paths here."""
    executable = Path(sys.executable).resolve()
    files = {str(executable).lstrip("/"): executable}
    stdlib = Path(sysconfig.get_path("stdlib"))
    for path in stdlib.rglob("*"):
        if path.is_dir() or _STDLIB_SKIPPED.match(path.relative_to(stdlib).as_posix()):
            continue
        files[str(path).lstrip("/")] = path
    return files


def _interpreter_links() -> dict[str, str]:
    """`python3` and `python` beside the interpreter (python3.11), as PATH finds them here."""
    executable = Path(sys.executable).resolve()
    return {
        str(executable.with_name(link)).lstrip("/"): executable.name
        for link in ("python3", "python")
        if link != executable.name
    }


def _distribution_files(requirements: Iterable[str]) -> dict[str, Path]:
    """Each distribution's files (its RECORD, and the bytecode of its modules), placed in the
    base interpreter's site-packages, where that interpreter looks without a venv."""
    site_packages = PurePosixPath(sysconfig.get_path("purelib", vars={"base": sys.base_prefix}))
    files = {}
    for dist in _closure(requirements):
        for record in dist.files or []:
            if record.parts[0] == "..":  # scripts installed in bin/: not needed
                continue
            source = Path(str(record.locate()))
            if source.is_file():
                files[str(site_packages / str(record)).lstrip("/")] = source
            for cached in source.parent.glob(f"__pycache__/{source.stem}.*.pyc"):
                arcname = site_packages / PurePosixPath(str(record)).parent / "__pycache__"
                files[str(arcname / cached.name).lstrip("/")] = cached
    return files


def _closure(requirements: Iterable[str]) -> list[Distribution]:
    """The installed distributions named and those they require, without extras. One not
    installed here is required only for another Python or platform (an environment marker)."""
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
            named = _REQUIREMENT_NAME.match(line)
            if named and "extra ==" not in line:
                todo.append(named[0])
    return list(found.values())


def _shared_libraries(binaries: Iterable[Path]) -> set[str]:
    """The absolute paths `ldd` names for `binaries` (the loader included)."""
    paths: set[str] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            paths.update(word for word in line.replace("=>", " ").split() if word[:1] == "/")
    return paths


def _is_elf(path: Path) -> bool:
    if not (path.suffix == ".so" or ".so." in path.name or path.name.startswith("python")):
        return False
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def _digest(files: dict[str, Path], changes: list[str]) -> str:
    """Of every file's name, size and time (thousands of them: not their bytes), and the
    image's settings. The shared libraries are left out: they follow from these files."""
    recipe = hashlib.sha256(f"{_RECIPE_VERSION}\n{changes}\n".encode())
    for name, path in sorted(files.items()):
        st = path.stat()
        recipe.update(f"{name}={path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return recipe.hexdigest()[:16]


def _write_rootfs(tar_path: Path, files: dict[str, Path], links: dict[str, str]) -> None:
    """Files and symbolic links at their names, every directory readable by any user, and a
    /tmp for all."""
    directories = {"tmp", "proc", "sys", "dev", "etc"}
    for name in files:
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
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
