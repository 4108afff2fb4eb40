"""Probes as the kubelet reads and counts them (pkg/kubelet/prober/worker.go), with no I/O.

A probe's spec becomes a `ProbeSpec`; `ProbeCounter` turns each attempt's outcome into the
result the kubelet keeps (thresholds as worker.go's resultRun), and `ProbeResults` is what the
status and the pod's actions read: one typed value per container id.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubelet_sim.formats.durations import bounded, optional_grace_seconds
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.spec import ContainerView


class ProbeKind(enum.StrEnum):
    LIVENESS = "Liveness"
    READINESS = "Readiness"
    STARTUP = "Startup"

    @property
    def field(self) -> str:
        return f"{self.value[0].lower()}{self.value[1:]}Probe"


class Result(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"


class Outcome(enum.Enum):
    """One attempt: the handler's answer (probe.Result), before thresholds."""

    SUCCESS = "success"
    WARNING = "warning"  # a success with something to say (an HTTP redirect off the pod)
    FAILURE = "failure"
    UNKNOWN = "unknown"  # the probe could not be run (an error): no result is recorded


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class HttpGetAction:
    scheme: str  # HTTP or HTTPS
    host: str  # "" means the pod IP
    path: str
    port: int
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TcpSocketAction:
    host: str  # "" means the pod IP
    port: int


@dataclass(frozen=True)
class GrpcAction:
    port: int
    service: str = ""


Action = ExecAction | HttpGetAction | TcpSocketAction | GrpcAction


@dataclass(frozen=True)
class ProbeSpec:
    kind: ProbeKind
    action: Action | None  # None: the spec names no handler the kubelet knows, or a bad port
    error: str = ""  # why `action` is None
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace_period: int | None = None  # probe-level override of the pod's


def probe_specs(container: ContainerView) -> list[ProbeSpec]:
    """The container's probes, in the kubelet's order of care: startup, liveness, readiness."""
    specs = []
    for kind in (ProbeKind.STARTUP, ProbeKind.LIVENESS, ProbeKind.READINESS):
        raw = container.raw.get(kind.field)
        if isinstance(raw, dict):
            specs.append(parse_probe(kind, raw, container.raw))
    return specs


def parse_probe(kind: ProbeKind, raw: Json, container: Json) -> ProbeSpec:
    """The API server has defaulted and validated the numbers (int32, not negative); zeros
    become its defaults. Each is bounded again here (kubelet_sim.formats.durations), so that no
    server's number can stop the prober's clock: a period of at least 1 s, nothing past
    68 years."""
    action, error = _action(raw, container)
    return ProbeSpec(
        kind=kind,
        action=action,
        error=error,
        initial_delay=float(bounded(raw.get("initialDelaySeconds") or 0, 0)),
        period=float(bounded(raw.get("periodSeconds") or 10, 10, low=1)),
        timeout=float(bounded(raw.get("timeoutSeconds") or 1, 1, low=1)),
        success_threshold=bounded(raw.get("successThreshold") or 1, 1, low=1),
        failure_threshold=bounded(raw.get("failureThreshold") or 3, 3, low=1),
        termination_grace_period=optional_grace_seconds(raw.get("terminationGracePeriodSeconds")),
    )


def _action(raw: Json, container: Json) -> tuple[Action | None, str]:
    if isinstance(raw.get("exec"), dict):
        return ExecAction(tuple(str(a) for a in raw["exec"].get("command") or ())), ""
    if isinstance(raw.get("httpGet"), dict):
        get = raw["httpGet"]
        port, error = resolve_port(get.get("port"), container)
        if port is None:
            return None, error
        path = str(get.get("path") or "")
        headers = tuple(
            (str(h.get("name", "")), str(h.get("value", ""))) for h in get.get("httpHeaders") or []
        )
        scheme = str(get.get("scheme") or "HTTP").upper()
        return HttpGetAction(scheme, str(get.get("host") or ""), path, port, headers), ""
    if isinstance(raw.get("tcpSocket"), dict):
        sock = raw["tcpSocket"]
        port, error = resolve_port(sock.get("port"), container)
        if port is None:
            return None, error
        return TcpSocketAction(str(sock.get("host") or ""), port), ""
    if isinstance(raw.get("grpc"), dict):
        grpc = raw["grpc"]
        return GrpcAction(int(grpc.get("port") or 0), str(grpc.get("service") or "")), ""
    return None, "missing probe handler"


def resolve_port(port: Any, container: Json) -> tuple[int | None, str]:
    """A number, or a name of one of the container's ports (prober.go's findPortByName)."""
    if isinstance(port, int):
        return (port, "") if 0 < port < 65536 else (None, f"invalid port number: {port}")
    text = str(port or "")
    if text.isdigit():
        return resolve_port(int(text), container)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return resolve_port(p.get("containerPort"), container)
    return None, f"port {text} not found"


def initial_result(kind: ProbeKind) -> Result:
    """worker.go's initialValue: not ready until proven, alive and started until disproven
    (the startup probe starts Unknown: not started)."""
    if kind is ProbeKind.READINESS:
        return Result.FAILURE
    if kind is ProbeKind.LIVENESS:
        return Result.SUCCESS
    return Result.UNKNOWN


@dataclass
class ProbeCounter:
    """worker.go's lastResult/resultRun: a result changes only after its threshold in a row."""

    spec: ProbeSpec
    result: Result
    last: Result | None = None
    run: int = 0

    @classmethod
    def new(cls, spec: ProbeSpec) -> ProbeCounter:
        return cls(spec, initial_result(spec.kind))

    def record(self, outcome: Outcome) -> bool:
        """Count one attempt; True when the kept result changed."""
        if outcome is Outcome.UNKNOWN:
            return False  # an error is retried next period, never a result
        now = Result.SUCCESS if outcome in (Outcome.SUCCESS, Outcome.WARNING) else Result.FAILURE
        self.run = self.run + 1 if now is self.last else 1
        self.last = now
        threshold = (
            self.spec.failure_threshold if now is Result.FAILURE else self.spec.success_threshold
        )
        if self.run < threshold or now is self.result:
            return False
        self.result = now
        return True


@dataclass(frozen=True)
class ContainerProbes:
    """The kept results of one container attempt's probes (None: it has no such probe)."""

    liveness: Result | None = None
    readiness: Result | None = None
    startup: Result | None = None

    @property
    def started(self) -> bool:
        return self.startup is None or self.startup is Result.SUCCESS

    @property
    def ready(self) -> bool:
        """Readiness counts only once started (worker.go does not run it before)."""
        return self.started and (self.readiness is None or self.readiness is Result.SUCCESS)


@dataclass(frozen=True)
class ProbeResults:
    """What the prober knows, by container id: an input of the status and the pod's actions."""

    by_container: Mapping[str, ContainerProbes] = field(default_factory=dict)

    def of(self, container_id: str) -> ContainerProbes | None:
        return self.by_container.get(container_id)

    def failed(self, container_id: str) -> ProbeKind | None:
        """Liveness or startup failed: the container is killed and restarted per the policy."""
        probes = self.by_container.get(container_id)
        if probes is None:
            return None
        if probes.liveness is Result.FAILURE:
            return ProbeKind.LIVENESS
        if probes.startup is Result.FAILURE:
            return ProbeKind.STARTUP
        return None


def probe_grace(container: ContainerView, kind: ProbeKind) -> int | None:
    """killContainer: a liveness/startup kill uses the probe's terminationGracePeriodSeconds."""
    raw = container.raw.get(kind.field)
    grace = raw.get("terminationGracePeriodSeconds") if isinstance(raw, dict) else None
    return optional_grace_seconds(grace)
