"""Making sure a container's image is there, as the kubelet's image manager does.

Pull policy, InvalidImageName, ErrImageNeverPull, ErrImagePull and ImagePullBackOff, with the
kubelet's event reasons and messages and its per pod-and-image backoff.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from kubelet_sim.cri import ImagePullError, RegistryAuth
from kubelet_sim.kube.events import NORMAL, WARNING, EventRef
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.pod.image_ref import invalid_image_message
from kubelet_sim.pod.restart_backoff import KeyedBackoff
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.pod.status import WaitingReason
from kubelet_sim.podworkers.ports import EventSink, ImageService, Wake


@dataclass(frozen=True)
class ImageResult:
    """Either the image is ready, or why the container must wait (and for how long)."""

    ready: bool
    waiting: WaitingReason | None = None  # None while a pull is in flight: keep the last reason
    retry_in: float | None = None


PULLING = ImageResult(ready=False)  # in flight: the pod is synced again when it ends
PARALLEL_PULLS = 3  # the kubelet's maxParallelImagePulls, when it is set


@dataclass
class _Pull:
    future: Future[str | None]  # the error, or None once pulled
    started: float  # the clock's monotonic time
    finished: float | None = None


class ImagePuller:
    """Pulls run on a small pool of their own, never on a pod worker: a registry that hangs
    costs that image's pods, not the node. Docker's own pull waits are bounded by the runtime's
    progress deadline."""

    def __init__(
        self,
        runtime: ImageService,
        events: EventSink,
        wake: Wake = lambda _uid: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.runtime = runtime
        self.events = events
        self.wake = wake  # queue a pod uid again: its pull ended
        self.clock = clock
        self.backoff = KeyedBackoff(initial=10.0, maximum=300.0)
        self._pulls: dict[str, _Pull] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL_PULLS, thread_name_prefix="pull")

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
        key = f"{pod.uid}_{image}"
        with self._lock:
            pull = self._pulls.get(key)
            if pull is not None and pull.future.done():
                del self._pulls[key]
        if pull is not None:
            return self._pulled(pull, key, image, ref)
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
        now = self.clock.time()
        if self.backoff.in_backoff_since_update(key, now):
            message = f'Back-off pulling image "{image}"'
            self.events.event(ref, NORMAL, "BackOff", message)
            return self._failed(ref, "ImagePullBackOff", message, self.backoff.get(key))
        self.events.event(ref, NORMAL, "Pulling", f'Pulling image "{image}"')
        pull = _Pull(self._pool.submit(self._pull, image, auths), self.clock.monotonic())
        with self._lock:
            self._pulls[key] = pull

        def finished(_done: Future[str | None]) -> None:  # runs once done() is True
            pull.finished = self.clock.monotonic()
            self.wake(pod.uid)

        pull.future.add_done_callback(finished)
        return PULLING

    def _pulled(self, pull: _Pull, key: str, image: str, ref: EventRef) -> ImageResult:
        """The outcome of a pull this pod started, once; PULLING while it is in flight."""
        if not pull.future.done():
            return PULLING
        now = self.clock.time()
        error = pull.future.result()
        started = pull.started
        if error is not None:
            self.events.event(ref, WARNING, "Failed", f'Failed to pull image "{image}": {error}')
            self.backoff.next(key, now, self.clock.time())
            return self._failed(ref, "ErrImagePull", error, self.backoff.get(key))
        took = (pull.finished or self.clock.monotonic()) - started
        self.events.event(
            ref,
            NORMAL,
            "Pulled",
            f'Successfully pulled image "{image}" in {took:.3f}s ({took:.3f}s including waiting).',
        )
        return ImageResult(ready=True)

    def pulling(self, uid: str, images: Sequence[str]) -> bool:
        """A pull of one of `images` for the pod is in flight or its outcome not yet taken:
        the kubelet, which pulls inside its SyncPod, has not finished that sync."""
        keys = {f"{uid}_{image}" for image in images}
        with self._lock:
            return any(key in self._pulls for key in keys)

    def forget_pod(self, uid: str) -> None:
        self.backoff.forget_prefix(f"{uid}_")
        with self._lock:
            for key in [k for k in self._pulls if k.startswith(f"{uid}_")]:
                del self._pulls[key]  # a pull in flight finishes; nobody waits for it

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _pull(self, image: str, auths: Sequence[RegistryAuth]) -> str | None:
        """Try each matching credential, then anonymously; the last error if all fail."""
        try:
            error = "pull failed"
            for auth in [*auths, None]:
                try:
                    self.runtime.pull_image(image, auth)
                except ImagePullError as exc:
                    error = str(exc)
                    continue
                return None
            return error
        except Exception as exc:  # the engine itself failed: an ErrImagePull all the same
            return str(exc)[:300] or type(exc).__name__

    def _failed(
        self, ref: EventRef, reason: str, message: str, retry_in: float | None
    ) -> ImageResult:
        self.events.event(ref, WARNING, "Failed", f"Error: {reason}")
        return ImageResult(ready=False, waiting=WaitingReason(reason, message), retry_in=retry_in)
