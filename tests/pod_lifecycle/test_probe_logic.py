"""Probe logic without Docker or an API server: counting, ports, and what results change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubelet_sim import cri
from kubelet_sim.pod.actions import compute_actions
from kubelet_sim.pod.probes import (
    ContainerProbes,
    ExecAction,
    HttpGetAction,
    Outcome,
    ProbeCounter,
    ProbeKind,
    ProbeResults,
    Result,
    TcpSocketAction,
    parse_probe,
    probe_specs,
)
from kubelet_sim.pod.spec import PodView
from kubelet_sim.pod.status import StatusInput, generate_status
from tests.manifests import pod_manifest, served
from tests.observed import observed_container

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REF = cri.PodRef(node="n1", namespace="ns", name="p", uid="u1")


def _pod(restart: str = "Always", **probes: Any) -> PodView:
    c = {"name": "c", "image": "i:1", "ports": [{"name": "http", "containerPort": 8080}], **probes}
    body = pod_manifest("p", [c], restartPolicy=restart)
    return PodView.from_api(served(body, status={"phase": "Running"}))


def _running(name: str, cid: str) -> cri.ObservedContainer:
    ip = "10.0.0.2" if name == cri.SANDBOX_CONTAINER_NAME else ""
    return observed_container(name, pod=REF, container_id=cid, started_at=NOW, ip=ip)


OBSERVED = [_running(cri.SANDBOX_CONTAINER_NAME, "s1"), _running("c", "c1")]


def test_thresholds_count_runs_in_a_row() -> None:
    spec = parse_probe(
        ProbeKind.READINESS, {"exec": {"command": ["true"]}, "successThreshold": 2}, {}
    )
    counter = ProbeCounter.new(spec)
    assert counter.result is Result.FAILURE, "readiness starts unready"
    assert not counter.record(Outcome.SUCCESS)
    assert not counter.record(Outcome.UNKNOWN), "an error is not a result and breaks no run"
    assert counter.record(Outcome.SUCCESS)
    assert counter.result is Result.SUCCESS
    assert not counter.record(Outcome.FAILURE)
    assert not counter.record(Outcome.FAILURE)
    assert counter.record(Outcome.FAILURE)
    assert counter.result is Result.FAILURE
    assert not counter.record(Outcome.SUCCESS)
    assert not counter.record(Outcome.FAILURE), "a success breaks the run of failures"


def test_initial_results_and_handlers() -> None:
    container = {"ports": [{"name": "http", "containerPort": 8080}]}
    live = parse_probe(ProbeKind.LIVENESS, {"tcpSocket": {"port": "http"}}, container)
    assert live.action == TcpSocketAction("", 8080)
    assert ProbeCounter.new(live).result is Result.SUCCESS, "alive until shown otherwise"
    start = parse_probe(ProbeKind.STARTUP, {"exec": {"command": ["a", "b"]}}, container)
    assert start.action == ExecAction(("a", "b"))
    assert ProbeCounter.new(start).result is Result.UNKNOWN
    get = parse_probe(
        ProbeKind.READINESS,
        {"httpGet": {"port": 80, "path": "/h", "httpHeaders": [{"name": "X", "value": "1"}]}},
        container,
    )
    assert get.action == HttpGetAction("HTTP", "", "/h", 80, (("X", "1"),))
    missing = parse_probe(ProbeKind.READINESS, {"tcpSocket": {"port": "nope"}}, container)
    assert missing.action is None
    assert missing.error == "port nope not found"


def test_probes_in_the_kubelets_order() -> None:
    view = _pod(
        readinessProbe={"exec": {"command": ["r"]}},
        livenessProbe={"exec": {"command": ["l"]}},
        startupProbe={"exec": {"command": ["s"]}},
    )
    kinds = [p.kind for p in probe_specs(view.containers[0])]
    assert kinds == [ProbeKind.STARTUP, ProbeKind.LIVENESS, ProbeKind.READINESS]


def _status(view: PodView, probes: ProbeResults) -> dict[str, Any]:
    return generate_status(
        StatusInput(pod=view, containers=OBSERVED, host_ip="192.0.2.2", now=NOW, probes=probes)
    )


def test_readiness_result_drives_ready_and_the_conditions() -> None:
    view = _pod(readinessProbe={"exec": {"command": ["r"]}})
    st = _status(view, ProbeResults())
    cs = st["containerStatuses"][0]
    assert (cs["started"], cs["ready"]) == (True, False), "no result yet: not ready"
    ready = next(c for c in st["conditions"] if c["type"] == "ContainersReady")
    assert (ready["status"], ready["reason"]) == ("False", "ContainersNotReady")
    assert ready["message"] == "containers with unready status: [c]"
    st = _status(view, ProbeResults({"c1": ContainerProbes(readiness=Result.SUCCESS)}))
    assert st["containerStatuses"][0]["ready"] is True
    assert next(c for c in st["conditions"] if c["type"] == "Ready")["status"] == "True"


def test_startup_holds_started_and_ready() -> None:
    view = _pod(startupProbe={"exec": {"command": ["s"]}})
    cs = _status(view, ProbeResults({"c1": ContainerProbes(startup=Result.UNKNOWN)}))
    assert (cs["containerStatuses"][0]["started"], cs["containerStatuses"][0]["ready"]) == (
        False,
        False,
    )
    cs = _status(view, ProbeResults({"c1": ContainerProbes(startup=Result.SUCCESS)}))
    assert (cs["containerStatuses"][0]["started"], cs["containerStatuses"][0]["ready"]) == (
        True,
        True,
    )


def test_failed_liveness_kills_with_the_kubelets_message() -> None:
    failed = ProbeResults({"c1": ContainerProbes(liveness=Result.FAILURE)})
    view = _pod(livenessProbe={"exec": {"command": ["l"]}, "terminationGracePeriodSeconds": 3})
    actions = compute_actions(view, OBSERVED, lambda _c: "", failed)
    assert [(c.id, m) for c, m in actions.containers_to_kill] == [
        ("c1", "Container c failed liveness probe, will be restarted")
    ]
    assert actions.probe_kills == {"c1": 3}, "the probe's own grace period"
    assert not actions.kill_pod, "the container restarts in its sandbox"
    never = compute_actions(_pod("Never"), OBSERVED, lambda _c: "", failed)
    assert [m for _, m in never.containers_to_kill] == ["Container c failed liveness probe"]
    startup = ProbeResults({"c1": ContainerProbes(startup=Result.FAILURE)})
    actions = compute_actions(view, OBSERVED, lambda _c: "", startup)
    assert actions.containers_to_kill[0][1].startswith("Container c failed startup probe")
    healthy = ProbeResults({"c1": ContainerProbes(liveness=Result.SUCCESS)})
    assert not compute_actions(view, OBSERVED, lambda _c: "", healthy).containers_to_kill


def test_grpc_health_messages_by_hand() -> None:
    """The two one-field protobuf messages of grpc.health.v1, as protoc would encode them."""
    from kubelet_sim.prober.grpc_health import decode_status, encode_request

    assert encode_request("") == b""
    assert encode_request("db") == b"\x0a\x02db"
    assert decode_status(b"\x08\x01") == 1
    assert decode_status(b"") == 0, "an absent status is UNKNOWN"
    assert decode_status(b"\x12\x01x\x08\x02") == 2, "an unknown field before it is skipped"
