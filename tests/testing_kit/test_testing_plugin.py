"""kubelet_sim.testing as a controller author uses it: the pytest plugin's fixtures in a pytest
run of their own (pytester), and `Cluster`'s node faults in this process.

Each test starts a control plane of its own (the real binaries): they run once, in the
real-API pass, where those binaries are known to be.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import docker
import pytest
from kubernetes.client import CoreV1Api
from kubernetes.config import new_client_from_config

from kubelet_sim.controlplane.binaries import BinariesMissing, find_binaries
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE
from tests.cluster import api_mode, deadline_scale, wait_for
from tests.kubeenv import kube_version
from tests.testing_kit.test_binaries import ALL, make_bin

pytest_plugins = ["pytester"]
pytestmark = [
    pytest.mark.docker,
    pytest.mark.own_control_plane,
    pytest.mark.skipif(api_mode() != "real", reason="starts its own control plane: real pass"),
    pytest.mark.timeout(600),
]

# What a controller author writes: a pod in a fresh namespace, Running on a kubelet-sim node;
# then a test that fails. Each records what the outer test checks is gone afterwards.
USER_TESTS = """
import json
import time
from pathlib import Path

IMAGE = {image!r}
RECORD = Path({record!r})


def _record(cluster):
    plane = cluster.plane
    RECORD.write_text(json.dumps({{
        "labels": cluster.labels,
        "pids": [pid for _name, pid, _argv in plane.processes],
        "workdir": str(cluster.workdir),
    }}))


def test_a_pod_runs(kubelet_sim_cluster, kubelet_sim_namespace):
    cluster = kubelet_sim_cluster
    _record(cluster)
    assert cluster.nodes == ["n1", "n2"]
    ns = kubelet_sim_namespace
    cluster.kubectl("-n", ns, "run", "hello", "--image", IMAGE, "--restart=Never",
                    "--", "sleep", "3600")
    deadline = time.monotonic() + {deadline}
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl("-n", ns, "get", "pod", "hello", "-o", "jsonpath={{.status.phase}}")
        if phase == "Running":
            break
        time.sleep(0.5)
    assert phase == "Running"
    from kubernetes import client

    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(ns)
    assert pods.items[0].spec.node_name in cluster.nodes


def test_that_fails(kubelet_sim_cluster):
    raise AssertionError("a failing test: the cluster still goes")
"""


def _kube_bin() -> Path | None:
    """Where the binaries are, found now: pytester gives each run a HOME of its own (and with
    it an empty download cache), so the run is told the directory."""
    try:
        return find_binaries(version=kube_version()).apiserver.parent
    except BinariesMissing:
        return None


KUBE_BIN = _kube_bin()


def _plugin_args() -> list[str]:
    """Load the plugin by name unless the installed package's entry point already does."""
    installed = {e.value for e in entry_points(group="pytest11")}
    return [] if "kubelet_sim.testing.plugin" in installed else ["-p", "kubelet_sim.testing.plugin"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_the_fixtures_give_a_cluster_and_take_it_down(pytester: pytest.Pytester) -> None:
    record = pytester.path / "record.json"
    pytester.makepyfile(
        test_user=USER_TESTS.format(image=BUSYBOX_IMAGE, record=str(record), deadline=120)
    )
    if KUBE_BIN is None:
        pytest.skip("no control-plane binaries (kubelet-sim demo --download fetches them)")
    result = pytester.runpytest_subprocess(
        *_plugin_args(),
        "-p",
        "no:cacheprovider",
        "--kubelet-sim-nodes",
        "2",
        "--kubelet-sim-kube-bin",
        str(KUBE_BIN),
        "-v",
        timeout=500,
    )
    result.assert_outcomes(passed=1, failed=1)
    found: dict[str, Any] = json.loads(record.read_text())
    client = docker.from_env()
    try:
        labels = [f"{k}={v}" for k, v in found["labels"].items()]
        left = client.containers.list(all=True, filters={"label": labels})
    finally:
        client.close()
    assert left == [], "containers of the cluster left behind"
    assert [pid for pid in found["pids"] if _alive(pid)] == [], "control plane processes left"
    assert not Path(found["workdir"]).exists()


KEPT_TEST = """
import faulthandler, signal
faulthandler.register(signal.SIGUSR1)  # where it is stuck, if it does not end when told


def test_uses_the_cluster(kubelet_sim_cluster):
    assert kubelet_sim_cluster.nodes == ["n1"]
"""


def test_keep_leaves_the_cluster_up_until_ctrl_c(pytester: pytest.Pytester) -> None:
    if KUBE_BIN is None:
        pytest.skip("no control-plane binaries (kubelet-sim demo --download fetches them)")
    pytester.makepyfile(test_kept=KEPT_TEST)
    args = [*_plugin_args(), "-p", "no:cacheprovider", "-s", "--kubelet-sim-keep"]
    args += ["--kubelet-sim-nodes", "1", "--kubelet-sim-kube-bin", str(KUBE_BIN)]
    # Started as a script's `pytest ... &` is: SIGINT ignored from the start (the shell's
    # doing, inherited; CI runs its passes so). Ctrl-C must still end it.
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def read() -> None:
        for line in session.stdout or []:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 120 * deadline_scale()
        while not any("kept running" in line for line in seen):
            assert time.monotonic() < deadline, "".join(seen)
            assert session.poll() is None, "".join(seen)
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
        seen += [lines.get(timeout=5 * deadline_scale())]  # the export line after it
        exported = [line for line in seen if "export KUBECONFIG=" in line][-1]
        kubeconfig = exported.split("export KUBECONFIG=", 1)[1].split()[0]
        # The session's tests are over; the cluster still answers, its node Ready.
        api = new_client_from_config(kubeconfig)
        try:
            (node,) = CoreV1Api(api).list_node().items
        finally:
            api.close()
        assert [c.status for c in node.status.conditions if c.type == "Ready"] == ["True"]
        session.send_signal(signal.SIGINT)
        try:
            session.wait(60 * deadline_scale())
        except subprocess.TimeoutExpired:
            session.send_signal(signal.SIGUSR1)  # its threads' stacks, then the output
            time.sleep(2)
            session.kill()
            session.wait(10)
            rest = []
            with contextlib.suppress(queue.Empty):
                while True:
                    rest.append(lines.get(timeout=1))
            pytest.fail("Ctrl-C did not end the session:\n" + "".join(seen + rest)[-20000:])
        assert not Path(kubeconfig).exists(), "Ctrl-C tears it down"
    finally:
        if session.poll() is None:
            session.kill()
            session.wait(10)


def _ready(cluster: Any, name: str) -> str:
    node = json.loads(cluster.kubectl("get", "node", name, "-o", "json"))
    conditions = node["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "")


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    from kubelet_sim.testing import Cluster

    with Cluster(nodes=2) as cluster:
        yield cluster


def _pods(cluster: Any, ns: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["-n", ns, "get", "pods", "-o", "json", *(["-l", selector] if selector else [])]
    items: list[dict[str, Any]] = json.loads(cluster.kubectl(*args))["items"]
    return items


def _running(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {{name: c, image: {image}, command: [sleep, "3600"]}}
"""


def test_a_clusters_nodes_run_on_one_process_context(two_nodes: Any) -> None:
    """N nodes, one of each per process (assembly/process.py): one Docker events stream, one
    kubelet API listener, one timer pool; not one each per node."""
    import threading

    names = [t.name for t in threading.enumerate()]
    assert names.count("container events") == 1, sorted(names)
    assert names.count("kubelet-server") == 1, sorted(names)
    assert names.count("timers") == 1, sorted(names)


def test_a_stopped_nodes_pods_come_back_on_the_other_node(two_nodes: Any, tmp_path: Path) -> None:
    cluster = two_nodes
    ns = "evicted"
    cluster.create_namespace(ns)
    manifest = tmp_path / "web.yaml"
    manifest.write_text(DEPLOYMENT.format(image=cluster.image))
    cluster.kubectl("-n", ns, "apply", "-f", str(manifest))
    wait_for(
        lambda: len([p for p in _pods(cluster, ns, "app=web") if _running(p)]) == 2,
        60,
        "two Running replicas",
    )
    stopped = _pods(cluster, ns, "app=web")[0]["spec"]["nodeName"]
    other = next(n for n in cluster.nodes if n != stopped)
    cluster.stop_node(stopped)
    # The Lease ages past the controller-manager's grace period (20 s): NotReady (Unknown);
    # after the pods' default toleration (10 s) they are evicted and replaced on the other node.
    wait_for(lambda: _ready(cluster, stopped) == "Unknown", 60, f"{stopped} to go NotReady")
    assert _ready(cluster, other) == "True"

    def replaced() -> bool:
        running = [p for p in _pods(cluster, ns, "app=web") if _running(p)]
        return len(running) == 2 and {p["spec"]["nodeName"] for p in running} == {other}

    wait_for(replaced, 90, f"both replicas Running on {other}")
    evicted = [p for p in _pods(cluster, ns, "app=web") if p["spec"]["nodeName"] == stopped]
    assert evicted, "the stopped node's pods wait, Terminating, for their node"
    assert all("deletionTimestamp" in p["metadata"] for p in evicted)
    cluster.start_node(stopped)
    assert _ready(cluster, stopped) == "True"
    # Back, the node stops the evicted pods' containers and lets them go.
    wait_for(
        lambda: all(p["spec"]["nodeName"] == other for p in _pods(cluster, ns, "app=web")),
        60,
        f"the evicted pods gone from {stopped}",
    )


def _pod_on(name: str, node: str, image: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": image, "command": ["sleep", "3600"]}],
            },
        }
    )


def test_a_node_cut_off_the_api_server_resyncs_and_loses_nothing(
    two_nodes: Any, tmp_path: Path
) -> None:
    cluster = two_nodes
    ns = "cut"
    cluster.create_namespace(ns)
    for name in ("kept", "deleted"):
        (tmp_path / f"{name}.json").write_text(_pod_on(name, "n2", cluster.image))
        cluster.kubectl("-n", ns, "create", "-f", str(tmp_path / f"{name}.json"))
    wait_for(
        lambda: len([p for p in _pods(cluster, ns) if _running(p)]) == 2, 60, "two Running pods"
    )
    (kept,) = [p for p in _pods(cluster, ns) if p["metadata"]["name"] == "kept"]
    cluster.cut_node("n2", 12)
    # While n2 cannot hear: a pod is bound to it and another is deleted.
    (tmp_path / "added.json").write_text(_pod_on("added", "n2", cluster.image))
    cluster.kubectl("-n", ns, "create", "-f", str(tmp_path / "added.json"))
    cluster.kubectl("-n", ns, "delete", "pod", "deleted", "--wait=false")

    def resynced() -> bool:
        pods = {p["metadata"]["name"]: p for p in _pods(cluster, ns)}
        return set(pods) == {"kept", "added"} and all(_running(p) for p in pods.values())

    wait_for(resynced, 60, "the cut node to run the new pod and let the deleted one go")
    (after,) = [p for p in _pods(cluster, ns) if p["metadata"]["name"] == "kept"]
    before_status, after_status = (
        kept["status"]["containerStatuses"][0],
        after["status"]["containerStatuses"][0],
    )
    assert after_status["containerID"] == before_status["containerID"], "the same container"
    assert after_status["restartCount"] == 0
    # The controller-manager may have marked the silent node Unknown; the node's next status
    # update (every 10 s) makes it Ready again.
    wait_for(lambda: _ready(cluster, "n2") == "True", 30, "n2 Ready again")


def test_a_killed_node_started_again_adopts_its_running_pod(two_nodes: Any, tmp_path: Path) -> None:
    """kill_node then start_node on the cluster's one node set: the node is built afresh on
    the same process context and adopts its container, as a restarted kubelet does."""
    cluster = two_nodes
    ns = "killed"
    cluster.create_namespace(ns)
    (tmp_path / "p.json").write_text(_pod_on("survivor", "n2", cluster.image))
    cluster.kubectl("-n", ns, "create", "-f", str(tmp_path / "p.json"))
    wait_for(lambda: any(_running(p) for p in _pods(cluster, ns)), 60, "the pod Running")
    (before,) = _pods(cluster, ns)
    cluster.kill_node("n2")
    cluster.start_node("n2")  # waits for Ready
    wait_for(lambda: _ready(cluster, "n2") == "True", 30, "n2 Ready")
    (after,) = _pods(cluster, ns)
    assert _running(after)
    was, now = before["status"]["containerStatuses"][0], after["status"]["containerStatuses"][0]
    assert now["containerID"] == was["containerID"], "adopted, not recreated"
    assert now["restartCount"] == 0


def _static_kubectl() -> Path | None:
    """A kubectl that runs in an empty image: statically linked (the tests' binaries', else
    PATH's)."""
    found = (
        find_binaries(version=kube_version(), require_controllers=False).kubectl
        if KUBE_BIN
        else None
    )
    on_path = shutil.which("kubectl")
    for candidate in [p.resolve() for p in (found, on_path and Path(on_path)) if p]:
        ldd = subprocess.run(["ldd", str(candidate)], capture_output=True, text=True, check=False)
        if "not a dynamic executable" in ldd.stdout + ldd.stderr:
            return candidate
    return None


def _image_with(binary: Path, name: str) -> str:
    """An image made here with `docker import` (nothing pulled, nothing loaded): `binary` as
    /kubectl, and a /tmp for its cache."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(str(binary.resolve()), arcname="kubectl")
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
    client = docker.from_env()
    try:
        client.api.import_image_from_data(
            data.getvalue(), repository=name, tag="test", changes=["ENV HOME=/tmp"]
        )
    finally:
        client.close()
    return f"{name}:test"


def _listening_addresses(port: int) -> set[str]:
    """This host's (this network namespace's) IPv4 addresses listening on `port`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="the pods' API endpoint enters a namespace: root")
def test_a_pod_lists_pods_with_in_cluster_config_from_an_image_built_here() -> None:
    from kubelet_sim.testing import Cluster

    kubectl = _static_kubectl()
    if kubectl is None:
        pytest.skip("no statically linked kubectl (kubelet-sim demo --download fetches one)")
    image = _image_with(kubectl, f"kubelet-sim.local/kubectl-{uuid.uuid4().hex[:8]}")
    try:
        with Cluster(nodes=1) as cluster:
            assert cluster.pod_endpoint_missing == ""
            ns = "in-cluster"
            cluster.create_namespace(ns)
            cluster.kubectl(
                "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view",
                f"--serviceaccount={ns}:default",
            )  # fmt: skip
            cluster.kubectl(
                "-n", ns, "run", "lister", "--image", image, "--restart=Never",
                "--image-pull-policy=Never", "--command", "--",
                "/kubectl", "get", "pods", "-o", "name",
            )  # fmt: skip

            def phase() -> str:
                return cluster.kubectl(
                    "-n", ns, "get", "pod", "lister", "-o", "jsonpath={.status.phase}"
                )

            wait_for(lambda: phase() in ("Succeeded", "Failed"), 90, "the lister to end")
            logs = cluster.kubectl("-n", ns, "logs", "lister")
            assert phase() == "Succeeded", logs
            assert "pod/lister" in logs.split(), logs
            # The API server is on loopback only; pods reach it in a container on their network.
            assert cluster.plane is not None
            port = int(cluster.plane.url.rsplit(":", 1)[1])
            assert _listening_addresses(port) == {"127.0.0.1"}
            endpoints = json.loads(cluster.kubectl("get", "endpoints", "kubernetes", "-o", "json"))
            (subset,) = endpoints["subsets"]
            assert [a["ip"] for a in subset["addresses"]] != ["127.0.0.1"]
    finally:
        client = docker.from_env()
        try:
            client.images.remove(image, force=True)
        finally:
            client.close()


KILLED = """
import json, sys, time
from kubelet_sim.testing import Cluster
cluster = Cluster(nodes=1).start()
print("LABELS " + json.dumps(cluster.labels), flush=True)
time.sleep(3600)
"""


def test_a_killed_sessions_containers_go_when_the_next_cluster_starts(tmp_path: Path) -> None:
    from kubelet_sim.testing import Cluster

    session = subprocess.Popen(
        [sys.executable, "-c", KILLED], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert session.stdout is not None
        line = ""
        while not line.startswith("LABELS ") and session.poll() is None:
            line = session.stdout.readline()  # its logs come first
        assert line.startswith("LABELS "), "the first cluster started"
        labels = json.loads(line.removeprefix("LABELS "))
    finally:
        session.kill()  # no clean-up: its pods' and the API endpoint's containers stay
        session.wait(10)
    client = docker.from_env()
    try:
        selector = [f"{k}={v}" for k, v in labels.items()]
        assert client.containers.list(all=True, filters={"label": selector}), "left behind"
        with Cluster(nodes=1, workdir=tmp_path / "next"):
            assert client.containers.list(all=True, filters={"label": selector}) == []
    finally:
        client.close()


def test_the_plugins_cluster_takes_the_version_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester
) -> None:
    """`Cluster(kube_version=...)` and `--kubelet-sim-kube-version` pick from the cache as the
    demo does; a version the cache lacks fails before anything starts, naming those it has."""
    from kubelet_sim.testing.cluster import Cluster

    cache = tmp_path / "xdg" / "kubelet-sim" / "kube-bin"
    make_bin(cache / "1.24.0", *ALL)
    for name in ("KUBEBUILDER_ASSETS", "KUBELET_SIM_KUBE_BIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    cluster = Cluster(1, kube_version="1.24.0", workdir=tmp_path / "w")
    assert cluster.binaries is not None
    assert cluster.binaries.apiserver == cache / "1.24.0" / "kube-apiserver"
    with pytest.raises(BinariesMissing, match=r"Kubernetes 1\.34\.9; the cache has: 1\.24\.0"):
        Cluster(1, workdir=tmp_path / "w")

    pytester.makepyfile("def test_x(kubelet_sim_cluster):\n    pass\n")
    args = [*_plugin_args(), "-p", "no:cacheprovider", "--kubelet-sim-kube-version", "1.33.1"]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*Kubernetes 1.33.1; the cache has: 1.24.0*"])
