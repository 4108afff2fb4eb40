"""The kubelet's own security decisions (sysctl admission, runAsNonRoot, groups, seccomp)."""

from __future__ import annotations

from typing import Any

from kubelet_sim.pod.security import (
    non_root_problem,
    seccomp_profile,
    supplemental_groups,
    sysctl_rejection,
    sysctls,
)
from kubelet_sim.pod.spec import PodView


def pod(container: dict[str, Any] | None = None, **spec: Any) -> PodView:
    return PodView.from_api(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i", **(container or {})}], **spec},
        }
    )


def with_sysctls(*names: str, **spec: Any) -> PodView:
    return pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


def test_sysctls_safe_unsafe_and_host_namespaces() -> None:
    assert (
        sysctl_rejection(with_sysctls("net.ipv4.tcp_syncookies", "kernel.shm_rmid_forced")) is None
    )
    assert sysctls(with_sysctls("net/ipv4/ip_local_port_range")) == [
        ("net.ipv4.ip_local_port_range", "1")
    ]
    assert sysctl_rejection(with_sysctls("kernel.msgmax")) == (
        'forbidden sysctl: "kernel.msgmax" not allowlisted'
    )
    assert sysctl_rejection(with_sysctls("kernel.msgmax"), ["kernel.msg*"]) is None
    assert sysctl_rejection(with_sysctls("net.core.somaxconn"), ["net.core.somaxconn"]) is None
    assert sysctl_rejection(with_sysctls("net.ipv4.tcp_syncookies", hostNetwork=True)) == (
        'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled'
    )
    assert sysctl_rejection(with_sysctls("kernel.shm_rmid_forced", hostIPC=True)) == (
        'forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled'
    )


def test_run_as_non_root_against_the_image_user() -> None:
    strict = pod(securityContext={"runAsNonRoot": True})
    who = '(pod: "p_ns(u)", container: c)'
    assert non_root_problem(strict, strict.containers[0], "") == (
        f"container has runAsNonRoot and image will run as root {who}"
    )
    assert non_root_problem(strict, strict.containers[0], "0:0") is not None
    assert non_root_problem(strict, strict.containers[0], "1000:1000") is None
    assert non_root_problem(strict, strict.containers[0], "nobody") == (
        "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user"
        f" is non-root {who}"
    )
    overridden = pod(
        {"securityContext": {"runAsNonRoot": False}}, securityContext={"runAsNonRoot": True}
    )
    assert non_root_problem(overridden, overridden.containers[0], "") is None, (
        "the container's wins"
    )
    zero = pod({"securityContext": {"runAsUser": 0}}, securityContext={"runAsNonRoot": True})
    assert non_root_problem(zero, zero.containers[0], "1000") == (
        f"container's runAsUser breaks non-root policy {who}"
    )


def test_groups_and_seccomp() -> None:
    grouped = pod(securityContext={"fsGroup": 3, "supplementalGroups": [1, 2]})
    assert supplemental_groups(grouped) == (3, 1, 2), "fsGroup first, as the kubelet adds it"
    assert seccomp_profile(pod(), pod().containers[0]) == "unconfined"
    both = pod(
        {
            "securityContext": {
                "seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}
            }
        },
        securityContext={"seccompProfile": {"type": "RuntimeDefault"}},
    )
    assert seccomp_profile(both, both.containers[0]) == "localhost/a.json"
    pod_wide = pod(securityContext={"seccompProfile": {"type": "RuntimeDefault"}})
    assert seccomp_profile(pod_wide, pod_wide.containers[0]) == "runtime/default"
