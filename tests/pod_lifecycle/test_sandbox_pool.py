"""The warm sandbox pool on Docker, with an agent: a pooled sandbox is wholly its pod's
(hostname, IP, identity as the agent reads it), pods that need their own sandbox get one, the
pool refills, and it is removed at exit and adopted or removed after a `kill -9`."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from kubelet_sim import cri
from tests.agent_fixture import start_agent
from tests.agent_process import running_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.others import OtherPods
from tests.pods import container, get_pod, make_pod, running_ready, traced, wait_status

pytestmark = pytest.mark.docker


def pool_ids(docker_env: DockerEnv, node: str, running: bool = False) -> list[str]:
    """The node's unclaimed pool sandboxes in Docker, oldest first (`running`: started ones
    only; one is listed from its create on, before its start)."""
    listed = docker_env.client.api.containers(
        all=True, filters={"label": [f"{cri.LABEL_NODE}={node}", f"{cri.LABEL_POOL}=true"]}
    )
    unclaimed = [
        c
        for c in listed
        if c["Names"][0].lstrip("/").startswith(cri.POOL_NAME_PREFIX)
        and (c["State"] == "running" or not running)
    ]
    return [c["Id"] for c in sorted(unclaimed, key=lambda c: (c["Created"], c["Id"]))]


def sandbox_of(docker_env: DockerEnv, cluster: ApiUnderTest, name: str, uid: str) -> dict:
    wanted = f"/k8s_POD_{name}_{cluster.namespace}_{uid}_0"
    attrs: dict = docker_env.client.api.inspect_container(wanted[1:])
    assert attrs["Name"] == wanted
    return attrs


def run_in(docker_env: DockerEnv, container_id: str, *command: str) -> str:
    api = docker_env.client.api
    output: bytes = api.exec_start(api.exec_create(container_id, list(command)))
    return output.decode().strip()


def app_of(docker_env: DockerEnv, uid: str) -> str:
    (app,) = docker_env.client.api.containers(
        filters={"label": [f"{cri.LABEL_POD_UID}={uid}", f"{cri.LABEL_CONTAINER_NAME}=c"]}
    )
    return str(app["Id"])


def test_a_pooled_sandbox_is_wholly_the_pods_and_the_pool_refills(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, others_on_node: OtherPods
) -> None:
    node = cluster.node_name
    running = start_agent(
        cluster, docker_env, tmp_path / "root", sandbox_pool_size=2, allow_privileged=True
    )
    try:
        agent = running.agent
        ready = wait_for(
            lambda: agent.pool.ready() if len(agent.pool.ready()) == 2 else None,
            30,
            "the pool to fill",
        )
        # The same sandboxes (Docker's list dates them to the second: two made within one
        # second have no order there; the pool's own order says which is the oldest).
        assert sorted(pool_ids(docker_env, node)) == sorted(ready)
        pod = make_pod(cluster, "web", container(), subdomain="sub")
        uid = pod["metadata"]["uid"]
        status = wait_status(cluster, "web", running_ready, 30, "Running and Ready")
        sandbox = sandbox_of(docker_env, cluster, "web", uid)
        assert sandbox["Id"] == ready[0]  # the oldest, claimed
        app = app_of(docker_env, uid)
        assert run_in(docker_env, app, "hostname") == "web"
        assert run_in(docker_env, app, "cat", "/etc/hostname") == "web"
        assert f"inet {status['podIP']}/" in run_in(docker_env, app, "ip", "-o", "-4", "addr")
        assert sandbox["NetworkSettings"]["IPAddress"] == status["podIP"]
        # What the agent reads is the pod's: its container view, and the trace.
        seen = {c.id: c for c in agent.watcher.all_containers()}
        assert seen[sandbox["Id"]].pod.uid == uid
        assert seen[sandbox["Id"]].is_sandbox
        # The pool is no pod (nor is it a pod the cluster binds to every node by itself).
        assert agent.watcher.pod_uids() - others_on_node.uids == {uid}
        steps = [s.step for s in traced(cluster, agent.runtime, "web")]
        assert "sandbox (from pool)" in steps
        assert "sandbox created" not in steps
        wait_for(lambda: len(pool_ids(docker_env, node)) == 2, 30, "the pool to refill")
        assert ready[0] not in pool_ids(docker_env, node)

        # A pod whose sandbox must be made for it does not touch the pool.
        before = pool_ids(docker_env, node)
        hostnet = make_pod(cluster, "hostnet", container(), hostNetwork=True)
        wait_status(cluster, "hostnet", running_ready, 30, "Running and Ready")
        own = sandbox_of(docker_env, cluster, "hostnet", hostnet["metadata"]["uid"])
        assert cri.LABEL_POOL not in own["Config"]["Labels"]
        assert own["Config"]["Labels"][cri.LABEL_POD_UID] == hostnet["metadata"]["uid"]
        assert pool_ids(docker_env, node) == before
    finally:
        running.stop()
    assert pool_ids(docker_env, node) == []  # removed at exit; the pods' containers stay
    assert get_pod(cluster, "web") is not None


# The container's first process writes down the HOSTNAME it was started with, then sleeps.
RECORD_START = ["sh", "-c", 'echo "$HOSTNAME" > /tmp/started-as; exec sleep 3600']


# What the pod's container sees of its identity, from inside: one exec, a section each.
LOOK_INSIDE = {
    "hostname": "hostname",
    "uname -n": "uname -n",
    "/etc/hostname": "cat /etc/hostname",
    "/etc/hosts": "cat /etc/hosts",
    "/etc/resolv.conf": "cat /etc/resolv.conf",
    "HOSTNAME at start": "cat /tmp/started-as",
    "HOSTNAME": "echo $HOSTNAME",
    "ip": "ip -o -4 addr show eth0 | awk '{print $4}'",
}


def seen_from_inside(docker_env: DockerEnv, app: str) -> dict[str, str]:
    """Each of LOOK_INSIDE's outputs (an exec whose output Docker lost is run again)."""
    script = "".join(f"echo '=={key}'; {command}; " for key, command in LOOK_INSIDE.items())

    def sections() -> dict[str, str] | None:
        said = "\n" + run_in(docker_env, app, "sh", "-c", script + "echo '==end'")
        parts = said.split("\n==")[1:]
        found = {p.partition("\n")[0]: p.partition("\n")[2].strip() for p in parts}
        return found if "end" in found else None

    found = wait_for(sections, 10, "the container's answers")
    return {key: found[key] for key in LOOK_INSIDE}


def test_a_pooled_pods_hostname_hosts_file_ip_and_dns_are_its_own_as_a_fresh_ones(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """The default pool: none on an idle node, so the first pod's sandbox is made for it;
    that start makes the pool keep one, which the second pod takes. Each sees itself."""
    node = cluster.node_name
    running = start_agent(cluster, docker_env, tmp_path / "root", sandbox_pool_size=None)
    try:
        agent = running.agent
        assert pool_ids(docker_env, node) == []  # an idle node holds none
        seen: dict[str, dict[str, str]] = {}
        for name in ("fresh", "pooled"):
            if name == "pooled":
                wait_for(agent.pool.ready, 60, "the pool to keep one after a start")
            ready = agent.pool.ready()
            pod = make_pod(cluster, name, container(command=RECORD_START), subdomain="sub")
            uid = pod["metadata"]["uid"]
            status = wait_status(cluster, name, running_ready, 60, "Running and Ready")
            sandbox = sandbox_of(docker_env, cluster, name, uid)
            took = sandbox["Id"] in ready
            assert took == (name == "pooled"), f"{name}: from the pool {took}"
            inside = seen_from_inside(docker_env, app_of(docker_env, uid))
            assert inside["ip"] == f"{status['podIP']}/{inside['ip'].split('/')[1]}"

            def general(text: str, ip: str = status["podIP"], pod: str = name) -> str:
                return text.replace(ip, "<ip>").replace(pod, "<pod>")

            seen[name] = {key: general(value) for key, value in inside.items()}
            assert seen[name]["hostname"] == "<pod>"
        assert seen["pooled"] == seen["fresh"]
    finally:
        running.stop()


def test_a_kill_9_leaves_the_pool_to_the_next_start_and_size_0_makes_none(
    cluster: ApiUnderTest, docker_env: DockerEnv
) -> None:
    node = cluster.node_name
    with running_agent(cluster, "--sandbox-pool-size", "2") as first:
        made = wait_for(  # both started: the kill must not catch one between create and start
            lambda: ids if len(ids := pool_ids(docker_env, node, running=True)) == 2 else None,
            60,
            "the first agent's pool",
        )
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(20)
        assert pool_ids(docker_env, node) == made  # nothing cleaned: it was killed
        with running_agent(cluster, "--sandbox-pool-size", "1") as second:
            second.wait_for_log(lambda r: r.get("event") == "pool adopted", 60, "adoption")
            assert pool_ids(docker_env, node) == made[:1]  # the oldest kept, the other removed
            assert second.terminate() == 0
        assert pool_ids(docker_env, node) == []
    with running_agent(cluster, "--sandbox-pool-size", "0") as third:
        pod = make_pod(cluster, "plain", container())
        wait_status(cluster, "plain", running_ready, 60, "Running and Ready")
        own = sandbox_of(docker_env, cluster, "plain", pod["metadata"]["uid"])
        assert cri.LABEL_POOL not in own["Config"]["Labels"]
        assert pool_ids(docker_env, node) == []
        assert third.terminate() == 0
