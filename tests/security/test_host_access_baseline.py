"""Every control of Pod Security's baseline profile, and what the host-access gate
(--allow-privileged off) does with a pod that breaks it: refused, or allowed and why.

The baseline list is the Pod Security Standards' (kubernetes.io/docs/concepts/security/
pod-security-standards, "Baseline"). A node cannot count on Pod Security at the API server, so
whatever of it reaches this host is the gate's; what does not, or what the node does anyway
without asking, is allowed with the reason written here.
"""

from __future__ import annotations

import pytest

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import REJECTED_PREFIX, Allocatable, admit
from kubelet_sim.pod.spec import PodView

NODE = Allocatable(cpu_milli=2000, memory_bytes=2**30, pods=10)
REFUSED = "refused"

# (baseline control, the pod's fields beyond a plain one, the gate's verdict: REFUSED, or the
# reason it is allowed)
BASELINE: list[tuple[str, Json, str]] = [
    (
        "HostProcess",
        {"spec": {"securityContext": {"windowsOptions": {"hostProcess": True}}}},
        "a Windows field: a Linux node has no HostProcess containers",
    ),
    ("Host namespaces: hostNetwork", {"spec": {"hostNetwork": True}}, REFUSED),
    ("Host namespaces: hostPID", {"spec": {"hostPID": True}}, REFUSED),
    ("Host namespaces: hostIPC", {"spec": {"hostIPC": True}}, REFUSED),
    ("Privileged containers", {"container": {"securityContext": {"privileged": True}}}, REFUSED),
    (
        "Capabilities beyond the baseline list",
        {"container": {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}},
        REFUSED,
    ),
    (
        "HostPath volumes",
        {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}},
        REFUSED,
    ),
    (
        "Host ports below 1024",
        {"container": {"ports": [{"containerPort": 80, "hostPort": 80}]}},
        REFUSED,
    ),
    (
        "Host ports from 1024",
        {"container": {"ports": [{"containerPort": 80, "hostPort": 8080}]}},
        "a port any local process may bind; it reaches nothing of the host's",
    ),
    (
        "AppArmor Unconfined (container field)",
        {"container": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}},
        REFUSED,
    ),
    (
        "AppArmor Unconfined (pod field)",
        {"spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}},
        REFUSED,
    ),
    (
        "AppArmor unconfined (annotation)",
        {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}},
        REFUSED,
    ),
    (
        "SELinux: a type, user or role of its own",
        {"spec": {"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "root"}}}},
        "not applied: the node gives Docker no SELinux labels from the pod",
    ),
    (
        "/proc mount type Unmasked",
        {"container": {"securityContext": {"procMount": "Unmasked"}}},
        REFUSED,
    ),
    (
        "Seccomp Unconfined (field)",
        {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
        "an unset profile is Unconfined too (the kubelet's --seccomp-default is off)",
    ),
    (
        "Seccomp unconfined (annotation)",
        {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}},
        "an unset profile is Unconfined too (the kubelet's --seccomp-default is off)",
    ),
    (
        "Sysctls outside the safe set",
        {"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}},
        "refused by the kubelet's own sysctl admission (SysctlForbidden), flag or not",
    ),
]


def _pod(fields: Json) -> PodView:
    container: Json = {"name": "main", "image": "busybox", **fields.get("container", {})}
    spec: Json = {"containers": [container], **fields.get("spec", {})}
    metadata: Json = {"name": "p", "namespace": "ns", "uid": "u-1"}
    if "annotations" in fields:
        metadata["annotations"] = fields["annotations"]
    return PodView.from_api({"metadata": metadata, "spec": spec})


@pytest.mark.parametrize(("control", "fields", "verdict"), BASELINE, ids=[r[0] for r in BASELINE])
def test_what_the_gate_does_with_each_baseline_control(
    control: str, fields: Json, verdict: str
) -> None:
    pod = _pod(fields)
    refused = admit(pod, active_pods=(), allocatable=NODE, allow_privileged=False)
    if verdict == REFUSED:
        assert refused is not None, control
        assert refused.reason == "Forbidden"
        assert refused.message.startswith(REJECTED_PREFIX + 'pod with UID "u-1" specified ')
        assert refused.message.endswith(", but is disallowed")
        allowed = admit(pod, active_pods=(), allocatable=NODE, allow_privileged=True)
        assert allowed is None, "--allow-privileged lets it run"
    elif "SysctlForbidden" in verdict:
        assert refused is not None
        assert refused.reason == "SysctlForbidden"
    else:
        assert refused is None, f"{control}: {verdict}"


def test_apparmor_unconfined_names_the_container_and_comes_after_the_other_requests() -> None:
    pod = _pod(
        {
            "container": {
                "securityContext": {"appArmorProfile": {"type": "Unconfined"}, "privileged": True}
            }
        }
    )
    refused = admit(pod, active_pods=(), allocatable=NODE, allow_privileged=False)
    assert refused is not None
    assert refused.event_message.startswith('pod with UID "u-1" specified privileged container')
    only = _pod(
        {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}}
    )
    refused = admit(only, active_pods=(), allocatable=NODE, allow_privileged=False)
    assert refused is not None
    assert refused.event_message == (
        'pod with UID "u-1" specified AppArmor profile Unconfined for container "main",'
        " but is disallowed"
    )


def test_a_profile_of_the_hosts_or_the_runtimes_is_no_host_request() -> None:
    for value in ("runtime/default", "localhost/my-profile"):
        pod = _pod({"annotations": {"container.apparmor.security.beta.kubernetes.io/main": value}})
        refused = admit(
            pod, active_pods=(), allocatable=NODE, allow_privileged=False, apparmor=True
        )
        assert refused is None, value
