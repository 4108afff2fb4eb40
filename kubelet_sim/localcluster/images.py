"""The demo's two images: the sample's and the sandbox's, present before the first pod.

Where no registry answers (an offline laptop, this project's machines) and the user kept the
default images, the demo builds look-alikes from a static busybox on the host instead of
leaving every pod in ImagePullBackOff; an image the user named is left to the nodes, whose
pods then show what a kubelet shows (ErrImagePull).
"""

from __future__ import annotations

from collections.abc import Callable

from kubelet_sim import cri
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.local_images import (
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    BusyboxMissing,
    ensure_local_images,
)

DEFAULT_SAMPLE_IMAGE = "busybox:1.36"


def ensure_images(
    engine: DockerEngine,
    sample: str,
    pause: str,
    *,
    defaults: tuple[str, str],
    say: Callable[[str], None],
) -> tuple[str, str]:
    """(sample, pause) to use: as given when present or pulled; else the local builds for
    those left at their `defaults`."""
    chosen = []
    for image, default, local in (
        (sample, defaults[0], BUSYBOX_IMAGE),
        (pause, defaults[1], PAUSE_IMAGE),
    ):
        if engine.image_status(image) is not None:
            chosen.append(image)
            continue
        try:
            engine.pull_image(image)
            say(f"pulled {image}")
            chosen.append(image)
            continue
        except cri.ImagePullError as exc:
            if image != default:
                say(f"cannot pull {image} ({exc}); its pods will show ErrImagePull")
                chosen.append(image)
                continue
            why = str(exc)
        try:
            ensure_local_images(engine.client)
        except BusyboxMissing as exc:
            say(f"cannot pull {image} ({why}) nor build a local one ({exc})")
            chosen.append(image)
            continue
        say(f"cannot pull {image} (no registry?): using {local}, built from this host's busybox")
        chosen.append(local)
    return chosen[0], chosen[1]
