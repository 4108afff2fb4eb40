"""kubelet-sim run by Kubernetes itself (deploy/workload/): a StatefulSet whose replicas each
serve their own slice of virtual nodes, with the Docker engine of the machine they run on.

The host cluster is the suite's own control plane with two real kubelets (the session's
reference node and one more, each on a containerd of its own: two "machines" of one host), and
the target cluster is the same one. The manifests are applied as `kubectl apply -k` would
(`render`), changed only where this machine differs from a cluster's (`for_this_machine` says
each change and why). Then: both replicas' nodes join by TLS bootstrap and run a pod each; one
replica is killed (and killed again each time its kubelet restarts it) until the control plane
marks its nodes NotReady; its pod is deleted and the StatefulSet controller replaces it under
the same name; its nodes are Ready again and its running pod is adopted, not recreated; the
other replica's nodes and pod never notice.

Real API server only: the replicas run on real kubelets, and the StatefulSet, the CSRs and the
nodes' health need the real controller-manager.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from kubelet_sim.controlplane.binaries import DEFAULT_KUBE_VERSION
from kubelet_sim.controlplane.reference_node import ReferenceNode, ReferenceNodeError
from kubelet_sim.kube.client import connect
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.localcluster.join_token import create_join_token
from kubelet_sim.runtime.agent_image import agent_image_name, ensure_agent_image
from kubelet_sim.runtime.local_images import PAUSE_IMAGE
from tests.agent_process import remove_containers_of
from tests.cluster import ApiUnderTest, _Session, deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.kubeenv import kube_version
from tests.manifests import pod_manifest
from tests.mounts import remove_root
from tests.node_certs import remove_joined
from tests.reference import REFERENCE_TAINT

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "deploy" / "workload"
HOST_LABEL = "kubelet-sim.io/workload-host"
NODES_PER_REPLICA = 2


def render(directory: Path) -> list[dict[str, Any]]:
    """What `kubectl apply -k directory` applies, for the fields its kustomization uses: any
    other field fails here, so the manifests never rely on something this does not read."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "namespace", "resources", "images"}
    docs = [
        doc
        for resource in kustomization["resources"]
        for doc in yaml.safe_load_all((directory / resource).read_text())
        if doc
    ]
    namespace = kustomization.get("namespace")
    for doc in docs:
        if namespace and doc["kind"] == "Namespace":
            doc["metadata"]["name"] = namespace
        elif namespace:
            doc["metadata"]["namespace"] = namespace
    for image in kustomization.get("images") or []:
        for container in _containers(docs):
            if container["image"].rsplit(":", 1)[0] == image["name"]:
                name = image.get("newName", image["name"])
                container["image"] = f"{name}:{image['newTag']}"
    return docs


def _containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c
        for doc in docs
        if doc["kind"] == "StatefulSet"
        for c in doc["spec"]["template"]["spec"]["containers"]
    ]


@dataclass
class Workload:
    id: str
    namespace: str
    name: str  # the StatefulSet's
    state_dir: Path

    def replica(self, i: int) -> str:
        return f"{self.name}-{i}"

    def nodes(self, i: int) -> list[str]:
        return [f"{self.replica(i)}-{n}" for n in range(1, NODES_PER_REPLICA + 1)]


def for_this_machine(docs: list[dict[str, Any]], w: Workload, trust: str | None) -> None:
    """The changes a test on this machine needs, each for a reason of this machine's."""
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = w.namespace
        else:
            doc["metadata"]["namespace"] = w.namespace
        if doc["kind"] == "Service":
            doc["metadata"]["name"] = w.name  # node names are made from it: unique per run
        if doc["kind"] != "StatefulSet":
            continue
        doc["metadata"]["name"] = doc["spec"]["serviceName"] = w.name
        doc["spec"]["replicas"] = 2
        pod = doc["spec"]["template"]["spec"]
        # Only on this run's two hosts, whose taint keeps every other test's pod off them.
        pod["nodeSelector"] = {HOST_LABEL: w.id}
        key, _, effect = REFERENCE_TAINT.replace("=true", "").partition(":")
        pod["tolerations"] = [{"key": key, "operator": "Exists", "effect": effect}]
        # The state directory of this run; no Bidirectional propagation: the reference node's
        # containerd runs in a mount namespace of its own, a slave of the host's, where the
        # kubelet cannot make one. The test's pods have no tmpfs volumes that would need it.
        state = next(v for v in pod["volumes"] if v["name"] == "state")
        state["hostPath"]["path"] = str(w.state_dir)
        container = pod["containers"][0]
        for mount in container["volumeMounts"]:
            if mount["name"] == "state":
                mount["mountPath"] = str(w.state_dir)
                mount.pop("mountPropagation")
        env = {e["name"]: e for e in container["env"]}
        env["KUBELET_SIM_NODES"]["value"] = str(NODES_PER_REPLICA)
        env["KUBELET_SIM_ROOT_DIR"]["value"] = f"{w.state_dir}/$(POD_NAME)"
        extra = {
            "KUBELET_SIM_POD_INFRA_IMAGE": PAUSE_IMAGE,  # no registry answers here
            "KUBELET_SIM_LOG_LEVEL": "info",
            **({"KUBELET_SIM_CLIENT_CA_FILE": "/etc/kubelet-sim/bootstrap/client-ca.crt"}
               if trust else {}),  # the suite's API server's kubelet client CA
        }  # fmt: skip
        container["env"].extend({"name": k, "value": v} for k, v in extra.items())


@pytest.fixture
def hosts(
    cluster_session: _Session, docker_session: DockerEnv, reference_node: ReferenceNode
) -> Iterator[tuple[str, str]]:
    """Two Ready upstream kubelets labelled for this run, with the agent's image loaded: the
    session's reference node and one more, tainted so that no other pod lands on it. (The
    run's id, the image.)"""
    if kube_version() != DEFAULT_KUBE_VERSION:  # a minute of node-monitor grace, for CI's time
        pytest.skip(f"waits out a node-monitor grace period: on v{DEFAULT_KUBE_VERSION} only")
    assert cluster_session.env is not None  # reference_node skipped otherwise
    client = docker.from_env()
    try:
        image, _ = ensure_agent_image(client)
    finally:
        client.close()
    run = secrets.token_hex(3)
    workdir = Path(tempfile.mkdtemp(prefix="ksw-"))  # short: containerd's socket lives there
    second = ReferenceNode(
        cluster_session.env,
        f"ksw-host-{run}",
        workdir,
        images=(image,),
        pause_image=docker_session.pause_image,
        busybox_image=docker_session.busybox_image,
        taints=(REFERENCE_TAINT,),
        labels={HOST_LABEL: run},
        kubelet=cluster_session.env.binaries.kubelet,
    )
    label = f"/api/v1/nodes/{reference_node.name}"
    admin = connect(cluster_session.kubeconfig)
    try:
        reference_node.load_image(image)
        _label(admin.api, label, run)
        second.start(timeout=90 * deadline_scale())
        yield run, image
    except ReferenceNodeError as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        second.stop()
        with contextlib.suppress(ApiError):
            _label(admin.api, label, None)


def _label(api: Any, node: str, value: str | None) -> None:
    body = {"metadata": {"labels": {HOST_LABEL: value}}}
    request_json(api, "PATCH", node, body, content_type="application/merge-patch+json")


@pytest.fixture
def workload(cluster: ApiUnderTest, hosts: tuple[str, str], tmp_path: Path) -> Iterator[Workload]:
    """The manifests applied with a bootstrap token; everything removed afterwards."""
    cluster.require_csr_signer()
    run, image = hosts
    assert agent_image_name() == image
    docs = render(WORKLOAD)
    assert {c["image"] for c in _containers(docs)} == {image}, "deploy/workload names this version"
    w = Workload(
        id=run,
        namespace=f"ksw-{run}",
        name=f"ksw-{run}",
        state_dir=Path(tempfile.mkdtemp(prefix=f"ksw-state-{run}-")),
    )
    trust = cluster.session.kubelet_client_trust()
    for_this_machine(docs, w, trust)
    admin = connect(cluster.kubeconfig)
    bootstrap = tmp_path / "bootstrap.kubeconfig"
    token = create_join_token(admin, bootstrap, timedelta(hours=1))
    names = w.nodes(0) + w.nodes(1)
    try:
        _post(admin.api, "/api/v1/namespaces", next(d for d in docs if d["kind"] == "Namespace"))
        secret_data = {"kubeconfig": bootstrap.read_text()}
        if trust:
            secret_data["client-ca.crt"] = Path(trust).read_text()
        _post(
            admin.api,
            f"/api/v1/namespaces/{w.namespace}/secrets",
            {"metadata": {"name": "kubelet-sim-bootstrap"}, "stringData": secret_data},
        )
        _bind_node_proxier(admin.api, w, names)
        for doc in docs:
            if doc["kind"] != "Namespace":
                _post(admin.api, _collection(doc), doc)
        yield w
    finally:
        _remove(admin.api, w, names, token)
        for name in names:
            remove_containers_of(name)
        remove_root(w.state_dir)


def _collection(doc: dict[str, Any]) -> str:
    ns = doc["metadata"]["namespace"]
    return {
        "Service": f"/api/v1/namespaces/{ns}/services",
        "StatefulSet": f"/apis/apps/v1/namespaces/{ns}/statefulsets",
    }[doc["kind"]]


def _post(api: Any, path: str, body: dict[str, Any]) -> None:
    request_json(api, "POST", path, body)


def _bind_node_proxier(api: Any, w: Workload, names: list[str]) -> None:
    """kube-proxy's rights for these nodes only (docs/networking.md binds them to every node)."""
    _post(
        api,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"{w.name}:node-proxier"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node-proxier",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": f"system:node:{n}",
                }
                for n in names
            ],
        },
    )


def _remove(api: Any, w: Workload, names: list[str], token: str) -> None:
    for path in (
        f"/apis/apps/v1/namespaces/{w.namespace}/statefulsets/{w.name}",
        f"/api/v1/namespaces/{w.namespace}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{w.name}:node-proxier",
    ):
        with contextlib.suppress(ApiError):
            request_json(api, "DELETE", path)
    remove_joined(api, names, token)


def _node_ready(api: Any, name: str) -> str:
    """The status of the Node's Ready condition ("" without the Node or the condition)."""
    try:
        node = request_json(api, "GET", f"/api/v1/nodes/{name}")
    except ApiError:
        return ""
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "")


def _pod(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


def _running_container(pod: dict[str, Any]) -> tuple[str, int] | None:
    """(container ID, restart count) of a Running pod's one container, else None."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if pod.get("status", {}).get("phase") != "Running" or not statuses:
        return None
    if "running" not in (statuses[0].get("state") or {}):
        return None
    return statuses[0]["containerID"], statuses[0]["restartCount"]


def _replica_pids(replica: str) -> list[int]:
    """The kubelet-sim processes of this replica pod (its POD_NAME), seen in the host's /proc."""
    found = []
    wanted = f"POD_NAME={replica}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if wanted in environ and b"kubelet_sim" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(900)  # two kubelets to start, and a node-monitor grace period to wait out
def test_replicas_serve_their_slices_and_a_killed_one_comes_back_adopting_its_pods(
    cluster: ApiUnderTest, workload: Workload
) -> None:
    api, w = cluster.api, workload
    every = w.nodes(0) + w.nodes(1)
    wait_for(
        lambda: all(_node_ready(api, n) == "True" for n in every),
        180,
        f"the replicas' nodes {every} Ready",
    )
    replicas = [_pod(api, w.namespace, w.replica(i)) for i in (0, 1)]
    assert len({r["spec"]["nodeName"] for r in replicas}) == 2, "one replica per machine"
    pods = {}
    for i in (0, 1):
        name = f"on-{w.replica(i)}"
        body = pod_manifest(
            name,
            [
                {
                    "name": "c",
                    "image": "kubelet-sim.local/busybox:test",
                    "command": ["sleep", "3600"],
                }
            ],
            nodeName=w.nodes(i)[0],
            automountServiceAccountToken=False,
            terminationGracePeriodSeconds=1,
            tolerations=[{"operator": "Exists"}],
        )
        request_json(api, "POST", f"/api/v1/namespaces/{w.namespace}/pods", body)
        pods[i] = name
    before = {
        i: wait_for(
            lambda i=i: _running_container(_pod(api, w.namespace, pods[i])),
            60,
            f"pod {pods[i]} Running on {w.nodes(i)[0]}",
        )
        for i in (0, 1)
    }
    uids = {i: _pod(api, w.namespace, pods[i])["metadata"]["uid"] for i in (0, 1)}

    # Kill replica 1, and again each time its kubelet restarts it, until its nodes are NotReady.
    others_seen: set[str] = set()
    kills = 0
    deadline = time.monotonic() + 150 * deadline_scale()
    while not all(_node_ready(api, n) not in ("True", "") for n in w.nodes(1)):
        assert time.monotonic() < deadline, f"{w.nodes(1)} never NotReady ({kills} kills)"
        for pid in _replica_pids(w.replica(1)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                kills += 1
        others_seen |= {_node_ready(api, n) for n in w.nodes(0)}
        time.sleep(0.5)
    assert kills >= 1
    # Its kubelet would restart it after a back-off that has grown to a minute or more; the
    # StatefulSet controller replaces a deleted replica at once, under the same name.
    old = _pod(api, w.namespace, w.replica(1))["metadata"]["uid"]
    request_json(
        api,
        "DELETE",
        f"/api/v1/namespaces/{w.namespace}/pods/{w.replica(1)}",
        {"gracePeriodSeconds": 0},
    )
    wait_for(
        lambda: all(_node_ready(api, n) == "True" for n in w.nodes(1)),
        120,
        f"{w.nodes(1)} Ready again once the StatefulSet controller replaced replica 1",
    )
    assert _pod(api, w.namespace, w.replica(1))["metadata"]["uid"] != old
    # The untouched replica passed its startup probe on /healthz and never failed liveness.
    kept = _pod(api, w.namespace, w.replica(0))["status"]["containerStatuses"][0]
    assert kept["started"] is True
    assert kept["restartCount"] == 0
    others_seen |= {_node_ready(api, n) for n in w.nodes(0)}
    assert others_seen == {"True"}, f"replica 0's nodes were {others_seen}"
    engine = docker.from_env()
    try:
        for i in (0, 1):
            pod = _pod(api, w.namespace, pods[i])
            assert pod["metadata"]["uid"] == uids[i]
            assert _running_container(pod) == before[i], f"{pods[i]} adopted, not recreated"
            container = engine.containers.get(before[i][0].removeprefix("docker://"))
            assert container.attrs["State"]["Running"]
            assert container.attrs["RestartCount"] == 0
    finally:
        engine.close()
