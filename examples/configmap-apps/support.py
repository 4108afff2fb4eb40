"""What the example's tests wait on and look at: a condition with a deadline, what a pod says
over the pod network, the controller's pod."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

T = TypeVar("T")
# The label manifests/controller.yaml gives the controller's pods.
CONTROLLER_SELECTOR = "app.kubernetes.io/name=configmap-apps-controller"

# Straight to the pod's address: a proxy from the environment could not reach the pods'
# network (it is this host's Docker bridge).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_until(
    check: Callable[[], T], timeout: float, what: str, *, done: Callable[[T], object] = bool
) -> T:
    """The first result of `check()` that is `done`; AssertionError naming `what`, with the
    last result, if none is within `timeout` seconds (a bound on failure only: generous)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if done(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s; last seen: {result!r}")
        time.sleep(0.5)


def http_get(ip: str, port: int, path: str = "/") -> str | None:
    """The body a pod's server answers on `ip:port`, or None while it does not answer."""
    try:
        with _DIRECT.open(f"http://{ip}:{port}{path}", timeout=3) as response:
            body: bytes = response.read()
            return body.decode().strip()
    except OSError:
        return None


def running_pod(api: client.ApiClient, namespace: str, selector: str) -> client.V1Pod | None:
    """The one pod with these labels that runs and is not going away, else None."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    running = [
        pod
        for pod in pods
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
    ]
    return running[0] if len(running) == 1 else None
