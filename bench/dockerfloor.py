"""Docker alone: the pod rows' container work with no agent and no API server.

Each bench pod is a sandbox (the pause image, on the bridge, shareable IPC, its own hostname)
and one app container in its namespaces that exits at once on SIGTERM; a pod starts when both
are created and started one after the other, and ends when the app and then the sandbox are
stopped, as the agent and the kubelet do it. Timing exactly that with docker-py, on as many
threads as the agent has pod workers, gives the floor under bench.perf's start and delete rows
on this machine: what the agent adds is the difference.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.kube import BUSYBOX, SLEEP_FOREVER
from bench.report import percentile
from kubelet_sim.podworkers.settings import PodSettings

LABEL = "io.kubelet-sim.bench"
VALUE = "docker-floor"
STOP_TIMEOUT = 30  # seconds; the app exits on SIGTERM, so only a broken engine waits this long


@dataclass(frozen=True)
class Floor:
    """Seconds. `one_*`: p50 of `repeat` pods one after the other; `many_*`: `size` pods at
    once on `workers` threads, first call to last return."""

    repeat: int
    size: int
    workers: int
    one_start_p50: float
    one_stop_p50: float
    many_start: float
    many_stop: float


@dataclass(frozen=True)
class FloorPod:
    sandbox: str
    app: str


def _timed(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


class FloorPods:
    """Makes and ends bench pods' containers; every one carries LABEL for `remove_all`."""

    def __init__(self, api: Any, pause_image: str) -> None:
        self.api = api
        self.pause_image = pause_image
        self.run = secrets.token_hex(3)
        self.numbers = itertools.count(1)  # next() is atomic: the pool's threads share it

    def start(self, _: object = None) -> FloorPod:
        name = f"kubelet-sim-floor-{self.run}-{next(self.numbers)}"
        labels = {LABEL: VALUE}
        sandbox = self.api.create_container(
            self.pause_image,
            name=f"{name}-pod",
            hostname=name,
            labels=labels,
            host_config=self.api.create_host_config(network_mode="bridge", ipc_mode="shareable"),
        )["Id"]
        self.api.start(sandbox)
        joined = f"container:{sandbox}"
        app = self.api.create_container(
            BUSYBOX,
            command=SLEEP_FOREVER,
            name=f"{name}-app",
            labels=labels,
            host_config=self.api.create_host_config(network_mode=joined, ipc_mode=joined),
        )["Id"]
        self.api.start(app)
        return FloorPod(sandbox, app)

    def stop(self, pod: FloorPod) -> None:
        self.api.stop(pod.app, timeout=STOP_TIMEOUT)
        self.api.stop(pod.sandbox, timeout=STOP_TIMEOUT)

    def remove_all(self) -> int:
        found = self.api.containers(all=True, filters={"label": f"{LABEL}={VALUE}"})
        for summary in found:
            self.api.remove_container(summary["Id"], force=True)
        return len(found)


def measure(
    dk: Any, pause_image: str, *, repeat: int = 10, size: int = 30, workers: int | None = None
) -> Floor:
    """The floor, measured now; removes every container it made, also on failure."""
    threads = workers or PodSettings().workers
    pods = FloorPods(dk.api, pause_image)
    pods.remove_all()  # an interrupted earlier run's
    try:
        starts, stops = [], []
        for _ in range(repeat):
            begun = time.perf_counter()
            pod = pods.start()
            starts.append(time.perf_counter() - begun)
            stops.append(_timed(lambda: pods.stop(pod)))  # noqa: B023 (called at once)
            pods.remove_all()
        with ThreadPoolExecutor(threads) as pool:
            many: list[FloorPod] = []
            many_start = _timed(lambda: many.extend(pool.map(pods.start, range(size))))
            many_stop = _timed(lambda: list(pool.map(pods.stop, many)))
        return Floor(
            repeat=repeat,
            size=size,
            workers=threads,
            one_start_p50=percentile(starts, 50),
            one_stop_p50=percentile(stops, 50),
            many_start=many_start,
            many_stop=many_stop,
        )
    finally:
        pods.remove_all()
