"""The example's fixtures: the controller running in this process, or in a pod from its image.

The cluster (`kubelet_sim_cluster`, one per session) and a fresh namespace per test
(`kubelet_sim_namespace`) come from kubelet-sim's pytest plugin.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml
from kubelet_sim.testing import Cluster, python_image
from kubernetes import client

import controller
from support import CONTROLLER_SELECTOR, running_pod, wait_until

HERE = Path(__file__).parent
IMAGE = "kubelet-sim.local/configmap-apps-controller:dev"  # what manifests/controller.yaml runs


@pytest.fixture(scope="session")
def api(kubelet_sim_cluster: Cluster) -> client.ApiClient:
    """The official client, as the cluster's admin."""
    api: client.ApiClient = kubelet_sim_cluster.api_client()
    return api


@pytest.fixture
def controller_in_process(api: client.ApiClient, kubelet_sim_namespace: str) -> Iterator[None]:
    """The controller as a thread of the test, with the admin's credentials: quickest to
    debug (a breakpoint in controller.py stops it)."""
    stop = threading.Event()
    thread = threading.Thread(
        target=controller.run,
        args=(api, kubelet_sim_namespace, stop),
        kwargs={"resync_seconds": 5},  # how soon it sees `stop`
        name="configmap-apps",
        daemon=True,
    )
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)


@pytest.fixture(scope="session")
def controller_image() -> str:
    """The controller's image, made on this host (kubelet-sim's `python_image`: no registry
    needed); made again only when this Python, its kubernetes client or controller.py changed."""
    engine = docker.from_env()
    try:
        return python_image(
            engine,
            IMAGE,
            requirements=["kubernetes"],
            app={"app/controller.py": HERE / "controller.py"},
            command=["python3", "/app/controller.py"],
        )
    finally:
        engine.close()


@pytest.fixture
def controller_pod(
    kubelet_sim_cluster: Cluster,
    api: client.ApiClient,
    kubelet_sim_namespace: str,
    controller_image: str,
    tmp_path: Path,
) -> client.V1Pod:
    """manifests/controller.yaml applied in the test's namespace; its pod, once Running."""
    if kubelet_sim_cluster.pod_endpoint_missing:
        pytest.skip(f"pods cannot reach the API server: {kubelet_sim_cluster.pod_endpoint_missing}")
    manifest = tmp_path / "controller.yaml"
    manifest.write_text(in_namespace(HERE / "manifests" / "controller.yaml", kubelet_sim_namespace))
    kubelet_sim_cluster.kubectl("apply", "-f", str(manifest))
    return wait_until(
        lambda: running_pod(api, kubelet_sim_namespace, CONTROLLER_SELECTOR),
        120,
        "Running controller pod",
    )


def in_namespace(manifest: Path, namespace: str) -> str:
    """The manifest's objects, and its RoleBinding's ServiceAccount, moved to `namespace`."""
    documents = list(yaml.safe_load_all(manifest.read_text()))
    for document in documents:
        document["metadata"]["namespace"] = namespace
        for subject in document.get("subjects", []):
            subject["namespace"] = namespace
    text: str = yaml.safe_dump_all(documents)
    return text
