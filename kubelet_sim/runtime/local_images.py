"""Look-alike images built on this host from a static busybox: the demo's fallback.

Where no registry answers (an offline laptop, this project's machines) and the user kept the
demo's default images, `kubelet-sim demo` runs its sample and its sandboxes on these instead
(kubelet_sim/localcluster/images.py): a busybox image and a pause-like sandbox image, made with
`docker import` from a root filesystem. So this is part of the product, shipped in the wheel;
the tests and the benchmarks reuse it because their machines reach no registry either.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import ImageNotFound

BUSYBOX_IMAGE = "kubelet-sim.local/busybox:test"
PAUSE_IMAGE = "kubelet-sim.local/pause:test"
RECIPE_LABEL = "io.kubelet-sim.recipe"

# The sandbox waits for SIGTERM and exits 0 at once, as the pause binary does.
_PAUSE_SCRIPT = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done'
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ETC_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "etc/group": "root:x:0:\nnobody:x:65534:\n",
}


class BusyboxMissing(RuntimeError):
    """Debian's busybox-static is not installed, so no local image can be made."""


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    changes: tuple[str, ...]


RECIPES = (
    ImageRecipe(BUSYBOX_IMAGE, (f"ENV PATH={_PATH}", 'CMD ["sh"]')),
    ImageRecipe(
        PAUSE_IMAGE,
        (
            f"ENV PATH={_PATH}",
            f"ENTRYPOINT {json.dumps(['/bin/sh', '-c', _PAUSE_SCRIPT])}",
        ),
    ),
)


def ensure_local_images(client: docker.DockerClient) -> list[str]:
    """Build each image unless one made from the same recipe and busybox binary exists."""
    busybox = _static_busybox()
    rootfs: bytes | None = None
    built = []
    for recipe in RECIPES:
        digest = _recipe_digest(recipe, busybox)
        if existing_recipe(client, recipe.name) == digest:
            continue
        rootfs = rootfs or _rootfs_tar(busybox)
        repository, tag = recipe.name.rsplit(":", 1)
        client.api.import_image_from_data(
            rootfs,
            repository=repository,
            tag=tag,
            changes=[*recipe.changes, f"LABEL {RECIPE_LABEL}={digest}"],
        )
        built.append(recipe.name)
    return built


def _static_busybox() -> Path:
    found = shutil.which("busybox") or "/bin/busybox"
    path = Path(found)
    if not path.is_file():
        raise BusyboxMissing("busybox not found: install Debian's busybox-static")
    ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    if "not a dynamic executable" not in ldd.stdout + ldd.stderr:
        raise BusyboxMissing(f"{path} is dynamically linked: install Debian's busybox-static")
    return path


def _recipe_digest(recipe: ImageRecipe, busybox: Path) -> str:
    h = hashlib.sha256(busybox.read_bytes())
    h.update(json.dumps([recipe.name, recipe.changes, _ETC_FILES]).encode())
    return h.hexdigest()[:16]


def existing_recipe(client: docker.DockerClient, name: str) -> str | None:
    try:
        image = client.images.get(name)
    except ImageNotFound:
        return None
    labels = (image.attrs.get("Config") or {}).get("Labels") or {}
    return labels.get(RECIPE_LABEL)


def _rootfs_tar(busybox: Path) -> bytes:
    """A root filesystem: busybox, a symlink per applet, and the few files programs expect."""
    applets = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for directory, mode in [
            ("bin", 0o755), ("sbin", 0o755), ("usr", 0o755), ("usr/bin", 0o755),
            ("usr/sbin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777),
            ("var", 0o755), ("proc", 0o755), ("sys", 0o755), ("dev", 0o755),
        ]:  # fmt: skip
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        tar.add(str(busybox), arcname="bin/busybox")
        for applet in applets:
            if applet == "bin/busybox":
                continue
            link = tarfile.TarInfo(applet)
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, "/bin/busybox", 0o777
            tar.addfile(link)
        for name, text in _ETC_FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
