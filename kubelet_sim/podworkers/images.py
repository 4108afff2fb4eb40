"""Making sure a container's image is there, as the kubelet's image manager does.

Pull policy, InvalidImageName, ErrImageNeverPull, ErrImagePull and ImagePullBackOff, with the
kubelet's event reasons and messages and its per pod-and-image backoff.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from kubelet_sim.cri import ImagePullError, RegistryAuth
from kubelet_sim.kube.events import NORMAL, WARNING, EventRecorder, EventRef
from kubelet_sim.pod.image_ref import invalid_image_message
from kubelet_sim.pod.restart_backoff import KeyedBackoff
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.pod.status import WaitingReason
from kubelet_sim.runtime.docker_runtime import DockerRuntime


@dataclass(frozen=True)
class ImageResult:
    """Either the image is ready, or why the container must wait (and for how long)."""

    ready: bool
    waiting: WaitingReason | None = None
    retry_in: float | None = None


class ImagePuller:
    def __init__(self, runtime: DockerRuntime, events: EventRecorder) -> None:
        self.runtime = runtime
        self.events = events
        self.backoff = KeyedBackoff(initial=10.0, maximum=300.0)

    def ensure(
        self,
        pod: PodView,
        container: ContainerView,
        ref: EventRef,
        auths: Sequence[RegistryAuth] = (),
    ) -> ImageResult:
        image = container.image
        invalid = invalid_image_message(image)
        if invalid is not None:
            self.events.event(ref, WARNING, "InspectFailed", invalid)
            return self._failed(ref, "InvalidImageName", invalid, None)
        present = self.runtime.image_status(image)
        policy = container.image_pull_policy
        if present is not None and policy != "Always":
            message = f'Container image "{image}" already present on machine'
            self.events.event(ref, NORMAL, "Pulled", message)
            return ImageResult(ready=True)
        if policy == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            self.events.event(ref, WARNING, "ErrImageNeverPull", message)
            return self._failed(ref, "ErrImageNeverPull", message, None)
        key = f"{pod.uid}_{image}"
        now = time.time()
        if self.backoff.in_backoff_since_update(key, now):
            message = f'Back-off pulling image "{image}"'
            self.events.event(ref, NORMAL, "BackOff", message)
            return self._failed(ref, "ImagePullBackOff", message, self.backoff.get(key))
        self.events.event(ref, NORMAL, "Pulling", f'Pulling image "{image}"')
        started = time.monotonic()
        error = self._pull(image, auths)
        if error is not None:
            self.events.event(ref, WARNING, "Failed", f'Failed to pull image "{image}": {error}')
            self.backoff.next(key, now, time.time())
            return self._failed(ref, "ErrImagePull", error, self.backoff.get(key))
        took = time.monotonic() - started
        self.events.event(
            ref,
            NORMAL,
            "Pulled",
            f'Successfully pulled image "{image}" in {took:.3f}s ({took:.3f}s including waiting).',
        )
        return ImageResult(ready=True)

    def forget_pod(self, uid: str) -> None:
        self.backoff.forget_prefix(f"{uid}_")

    def _pull(self, image: str, auths: Sequence[RegistryAuth]) -> str | None:
        """Try each matching credential, then anonymously; the last error if all fail."""
        error = ""
        for auth in [*auths, None]:
            try:
                self.runtime.pull_image(image, auth)
            except ImagePullError as exc:
                error = str(exc)
                continue
            return None
        return error

    def _failed(
        self, ref: EventRef, reason: str, message: str, retry_in: float | None
    ) -> ImageResult:
        self.events.event(ref, WARNING, "Failed", f"Error: {reason}")
        return ImageResult(ready=False, waiting=WaitingReason(reason, message), retry_in=retry_in)
