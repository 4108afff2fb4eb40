"""The security context as the container lives it: `id`, /proc/self/status, /proc/sys, and the
kubelet's refusals (runAsNonRoot, unsafe sysctls) in the API, on both servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kubelet_sim.linux.safe_paths import remove_tree
from kubelet_sim.node.host import apparmor_enabled
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, server_has_field, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    container,
    container_status,
    ended_output,
    event_messages,
    get_pod,
    make_pod,
    running_ready,
    status_of,
    wait_for_events,
    wait_status,
)


def _output(
    cluster: ApiUnderTest, docker_env: DockerEnv, name: str, script: str, **spec: Any
) -> str:
    make_pod(cluster, name, container(command=["sh", "-c", script]), restart="Never", **spec)
    return ended_output(cluster, docker_env, name)


def test_users_groups_seccomp_and_sysctls_inside_the_container(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    running = start_agent(cluster, docker_env, root)
    (root / "seccomp").mkdir(parents=True, exist_ok=True)
    (root / "seccomp" / "allow.json").write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW"}))
    try:
        ids = _output(
            cluster, docker_env, "ids", "id -u; id -g; id -G",
            securityContext={"runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 3000,
                             "supplementalGroups": [4000, 5000], "runAsNonRoot": True},
        )  # fmt: skip
        uid, gid, groups = ids.split("\n")[:3]
        assert (uid, gid) == ("1000", "2000")
        assert {"3000", "4000", "5000"} <= set(groups.split()), groups
        mounted = container(
            command=["sh", "-c", "touch /data/new; stat -c '%g %a' /data /data/new;"
                     " stat -L -c '%g %a' /info/name;"
                     " touch /mem/new; stat -c '%g %a' /mem /mem/new"],
            volumeMounts=[{"name": "data", "mountPath": "/data"},
                          {"name": "info", "mountPath": "/info"},
                          {"name": "mem", "mountPath": "/mem"}],
        )  # fmt: skip
        make_pod(
            cluster, "owned", mounted, restart="Never",
            securityContext={"runAsUser": 1000, "fsGroup": 3000},
            volumes=[{"name": "data", "emptyDir": {}},
                     {"name": "mem", "emptyDir": {"medium": "Memory"}},
                     {"name": "info", "downwardAPI": {"items": [
                         {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}],
        )  # fmt: skip
        owned = ended_output(cluster, docker_env, "owned")
        assert owned.split("\n")[:5] == [
            "3000 2777", "3000 644", "3000 644", "3000 3777", "3000 644",
        ], "fsGroup owns the volumes (a memory one too); setgid passes it to new files"  # fmt: skip
        status = "grep ^Seccomp: /proc/self/status"
        assert _output(cluster, docker_env, "unset", status) == "Seccomp:\t0\n", "Unconfined"
        default = {"seccompProfile": {"type": "RuntimeDefault"}}
        assert (
            _output(cluster, docker_env, "rd", status, securityContext=default) == "Seccomp:\t2\n"
        )
        local = {"seccompProfile": {"type": "Localhost", "localhostProfile": "allow.json"}}
        assert _output(cluster, docker_env, "lh", status, securityContext=local) == "Seccomp:\t2\n"
        ports = {"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "30000 40000"}]}
        shown = _output(cluster, docker_env, "sysctl", "cat /proc/sys/net/ipv4/ip_local_port_range",
                        securityContext=ports)  # fmt: skip
        assert shown.split() == ["30000", "40000"]
    finally:
        running.stop()


def test_the_kubelets_refusals(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        unsafe = {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}
        make_pod(cluster, "unsafe", securityContext=unsafe)
        refused = wait_status(
            cluster, "unsafe", lambda s: s.get("phase") == "Failed", 20, "refused"
        )
        assert refused["reason"] == "SysctlForbidden"
        assert (
            refused["message"]
            == 'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted'
        )
        created = make_pod(cluster, "rooted", securityContext={"runAsNonRoot": True})
        waiting = wait_status(
            cluster, "rooted",
            lambda s: (container_status(s).get("state") or {}).get("waiting", {}).get("reason")
            == "CreateContainerConfigError", 20, "refused to run as root",
        )  # fmt: skip
        uid = created["metadata"]["uid"]
        assert container_status(waiting)["state"]["waiting"]["message"] == (
            "container has runAsNonRoot and image will run as root"
            f' (pod: "rooted_{cluster.namespace}({uid})", container: c)'
        )
        zero = {"runAsNonRoot": True, "runAsUser": 0}
        make_pod(cluster, "zero", securityContext=zero)
        waiting = wait_status(
            cluster, "zero",
            lambda s: (container_status(s).get("state") or {}).get("waiting", {}).get("message", "")
            .startswith("container's runAsUser breaks non-root policy"), 20, "refused uid 0",
        )  # fmt: skip
    finally:
        running.stop()


def test_apparmor_is_enforced_or_the_pod_refused_as_the_kubelet_does(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """With AppArmor on the host, Docker confines the container (runtime/default is Docker's
    profile); without, a pod that asks for a profile is rejected (Unconfined still runs, on a
    node that allows what reaches the host). The annotation form works on every server; the
    field (v1.30+) is kept only by newer ones."""
    running = start_agent(cluster, docker_env, tmp_path / "root", allow_privileged=True)
    key = "container.apparmor.security.beta.kubernetes.io/c"
    attr = "cat /proc/self/attr/current 2>/dev/null; true"  # no such attribute without AppArmor
    try:
        body = container(command=["sh", "-c", attr])
        make_pod(cluster, "free", body, restart="Never", annotations={key: "unconfined"})
        free = ended_output(cluster, docker_env, "free").strip()
        assert free == ("unconfined" if apparmor_enabled() else "")
        make_pod(cluster, "confined", body, restart="Never", annotations={key: "runtime/default"})
        if apparmor_enabled():
            assert ended_output(cluster, docker_env, "confined").strip() == (
                "docker-default (enforce)"
            )
            return
        refused = wait_status(
            cluster, "confined", lambda s: s.get("phase") == "Failed", 20, "refused"
        )
        assert (refused["reason"], refused["message"]) == (
            "AppArmor",
            "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host",
        )
        wait_for_events(cluster, "confined", "AppArmor")
        assert event_messages(cluster, "confined", "AppArmor") == [
            "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        ]
    finally:
        running.stop()


def test_apparmor_unconfined_is_refused_without_allow_privileged(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """Unconfined takes away Docker's profile, which Pod Security's baseline forbids: the gate
    refuses it as it refuses the other requests that reach the host."""
    running = start_agent(cluster, docker_env, tmp_path / "root")
    key = "container.apparmor.security.beta.kubernetes.io/c"
    try:
        pod = make_pod(cluster, "free", container(), annotations={key: "unconfined"})
        refused = wait_status(cluster, "free", lambda s: s.get("phase") == "Failed", 20, "refused")
        what = (
            f'pod with UID "{pod["metadata"]["uid"]}" specified AppArmor profile Unconfined'
            ' for container "c", but is disallowed'
        )
        assert (refused["reason"], refused["message"]) == (
            "Forbidden",
            f"Pod was rejected: {what}",
        )
        wait_for_events(cluster, "free", "Forbidden")
        assert event_messages(cluster, "free", "Forbidden") == [what]
    finally:
        running.stop()


def test_a_user_namespace_is_refused_as_a_runtime_without_them_makes_the_kubelet_do(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """hostUsers: false needs a runtime handler with user namespaces; Docker has none, so the
    sandbox fails (FailedCreatePodSandBox, Pending) as with cri-dockerd; a v1.24 server drops
    hostUsers and the pod just runs. procMount Unmasked needs hostUsers: false on current
    servers (v1.24 drops it too); it reaches the host, so without --allow-privileged such a pod
    is refused (Forbidden) before its sandbox is tried."""
    running = start_agent(cluster, docker_env, tmp_path / "root")
    unmasked = container(securityContext={"procMount": "Unmasked"})
    try:
        make_pod(cluster, "userns", hostUsers=False)
        if not server_has_field(cluster.api, "io.k8s.api.core.v1.PodSpec", "hostUsers"):
            wait_status(cluster, "userns", running_ready, 20, "Running: hostUsers dropped")
            return
        wait_for_events(cluster, "userns", "FailedCreatePodSandBox")
        assert event_messages(cluster, "userns", "FailedCreatePodSandBox")[0] == (
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not"
            " support user namespaces"
        )
        # The event may come before the status write, as the kubelet's status manager writes
        # apart from the sync that made the event.
        st = wait_status(cluster, "userns", container_status, 20, "a status for c")
        assert st["phase"] == "Pending"
        assert container_status(st)["state"] == {"waiting": {"reason": "ContainerCreating"}}
        uid = make_pod(cluster, "unmasked", unmasked, hostUsers=False)["metadata"]["uid"]
        st = wait_status(cluster, "unmasked", lambda s: s.get("phase") == "Failed", 20, "Failed")
        assert (st["reason"], st["message"]) == (
            "Forbidden",
            f'Pod was rejected: pod with UID "{uid}" specified procMount Unmasked for container'
            ' "c", but is disallowed',
        )
        with pytest.raises(ApiException) as refused:
            make_pod(cluster, "masked", unmasked)
        assert refused.value.status == 422
        assert "`hostUsers` must be false to use `Unmasked`" in str(refused.value.body)
    finally:
        running.stop()


DEEP_TREE = (
    "cd /v && i=0; while [ $i -lt 2000 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done;"
    " chgrp -R 0 /v 2>/dev/null; chgrp 0 /v"
)


def test_a_pods_deep_tree_in_its_fsgroup_empty_dir_does_not_stop_it(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """An init container makes a 2,000-level tree in the emptyDir and takes the fsGroup off its
    root; the pod still becomes Ready. The ownership is set when the volume is set up (once,
    as the kubelet does at a mount), not walked again each sync; an agent started again walks
    it once more, deeper than Python's recursion goes, and the pod stays Ready."""
    root = tmp_path / "root"
    running = start_agent(cluster, docker_env, root)
    mounts = [{"name": "v", "mountPath": "/v"}]
    try:
        make_pod(
            cluster,
            "deep",
            container(volumeMounts=mounts),
            initContainers=[
                container(name="grow", command=["sh", "-c", DEEP_TREE], volumeMounts=mounts)
            ],
            volumes=[{"name": "v", "emptyDir": {}}],
            securityContext={"fsGroup": 3000},
        )
        wait_status(cluster, "deep", running_ready, 60, "Ready despite the deep tree")
    finally:
        running.stop()
    running = start_agent(cluster, docker_env, root)  # adopts the pod: the volume set up again
    try:
        uid = (get_pod(cluster, "deep") or {})["metadata"]["uid"]
        volume = root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "v"
        wait_for(lambda: volume.stat().st_gid == 3000, 30, "the fsGroup set again at adoption")
        assert running_ready(status_of(cluster, "deep"))
        # Deleted, the pod's volume goes too, however deep.
        cluster.core.delete_namespaced_pod("deep", cluster.namespace, grace_period_seconds=0)
        wait_for(lambda: not volume.exists(), 30, "the deep volume removed with its pod")
    finally:
        running.stop()
        remove_tree(root)  # pytest's own clean-up of old tmp dirs recurses per level
