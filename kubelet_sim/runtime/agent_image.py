"""The image kubelet-sim runs from as a Kubernetes workload (deploy/workload/), built on this host.

No registry is needed: python_image.py's image of this host's Python with kubelet-sim and its
runtime dependencies as installed here, plus what the agent runs besides Python, from this
host's PATH: the service proxy's tools in pods' namespaces (nsenter, ip, iptables and its
modules, proxy/netns.py) and `rm` (linux/safe_paths.py's remove_tree, with GNU's
--one-file-system). No shell and no busybox: nothing in the agent runs one, and the workload's
probes are httpGet. `docker push` it where a cluster pulls from, or load it into a node.
Rebuilt only when a file it is made from changed (a digest of names, sizes and times).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import docker

from kubelet_sim import __version__
from kubelet_sim.runtime.local_images import existing_recipe
from kubelet_sim.runtime.python_image import interpreter, python_image, site_packages

AGENT_IMAGE_REPOSITORY = "kubelet-sim.local/kubelet-sim"
# What the agent runs, as found on this host's PATH (a link there comes with what it points to).
TOOLS = ("nsenter", "ip", "iptables", "iptables-restore", "iptables-save", "rm")
_XTABLES_MODULES = ("/usr/lib/*/xtables", "/usr/lib/xtables", "/usr/lib64/xtables")
_ETC = ("/etc/protocols", "/etc/services", "/etc/ethertypes")


def agent_image_name() -> str:
    return f"{AGENT_IMAGE_REPOSITORY}:{__version__}"


def ensure_agent_image(client: docker.DockerClient) -> tuple[str, bool]:
    """(the image's name, whether it was built now)."""
    name = agent_image_name()
    before = existing_recipe(client, name)  # the digest it was made from: a new one if built
    python_image(
        client,
        name,
        requirements=["kubelet-sim"],
        app=_agent_files(),
        entrypoint=[interpreter(), "-m", "kubelet_sim"],
    )
    return name, existing_recipe(client, name) != before


def _agent_files() -> dict[str, Path]:
    """Path in the image → file on this host: the package (an editable install's RECORD holds
    only a .pth, so it is added from here), the tools, the xtables modules, /etc's tables."""
    package = Path(__file__).resolve().parents[1]
    files = {
        str(site_packages() / "kubelet_sim" / path.relative_to(package)): path
        for path in _tree(package)
    }
    tools = [Path(found) for found in map(shutil.which, TOOLS) if found]
    modules = [p for pattern in _XTABLES_MODULES for d in glob.glob(pattern) for p in _tree(d)]
    for path in [*tools, *modules, *map(Path, _ETC)]:
        if path.exists():
            files[str(path)] = path
    return files


def _tree(root: str | Path) -> list[Path]:
    """Files and symbolic links below `root`."""
    return [Path(here) / name for here, _, names in os.walk(root) for name in names]
