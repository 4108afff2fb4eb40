"""The gRPC probe (pkg/probe/grpc/grpc.go): grpc.health.v1.Health/Check, SERVING or not.

`grpcio` is the one gRPC implementation for Python; it is imported only when a gRPC probe
runs. The two health messages are one field each, so they are encoded by hand (formats/protowire.py)
rather than through generated protobuf code.
"""

from __future__ import annotations

from kubelet_sim.formats.protowire import fields, string_field
from kubelet_sim.pod.probes import GrpcAction, Outcome
from kubelet_sim.pod.restart_backoff import go_duration

SERVING = 1
STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
CHECK = "/grpc.health.v1.Health/Check"


def run_grpc(
    action: GrpcAction, pod_ip: str, timeout: float, user_agent: str
) -> tuple[Outcome, str]:
    import grpc  # noqa: PLC0415 (only nodes whose pods have gRPC probes pay for it)

    target = f"[{pod_ip}]:{action.port}" if ":" in pod_ip else f"{pod_ip}:{action.port}"
    within = go_duration(timeout)
    channel = grpc.insecure_channel(target, options=[("grpc.primary_user_agent", user_agent)])
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return Outcome.FAILURE, (
                f'timeout: failed to connect service "{target}" within {within}: '
                "context deadline exceeded"
            )
        check = channel.unary_unary(CHECK)  # bytes in, bytes out
        try:
            answer = check(encode_request(action.service), timeout=timeout)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return Outcome.FAILURE, (
                    "error: this server does not implement the grpc health protocol "
                    f"(grpc.health.v1.Health): {details}"
                )
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome.FAILURE, f"timeout: health rpc did not complete within {within}"
            name = "".join(w.capitalize() for w in code.name.split("_"))
            return Outcome.FAILURE, (
                f"error: health rpc probe failed: rpc error: code = {name} desc = {details}"
            )
        status = decode_status(answer)
        if status == SERVING:
            return Outcome.SUCCESS, "service healthy"
        return Outcome.FAILURE, (
            f'service unhealthy (responded with "{STATUS_NAMES.get(status, str(status))}")'
        )
    finally:
        channel.close()


def encode_request(service: str) -> bytes:
    """HealthCheckRequest{service = 1}: nothing at all for the empty (whole server) name."""
    return string_field(1, service) if service else b""


def decode_status(message: bytes) -> int:
    """HealthCheckResponse{status = 1}: 0 (UNKNOWN) when the field is absent."""
    try:
        for number, value in fields(message):
            if number == 1 and isinstance(value, int):
                return value
    except (ValueError, IndexError):
        pass  # a wire type no health message has, or a message cut short: no status in it
    return 0
