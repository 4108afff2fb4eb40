"""Four calls of containerd's CRI (runtime.v1): list, stop and remove pod sandboxes, so that a
reference node's stop lets the network plugins clean up after each pod. The messages are
encoded by hand (a few protobuf fields, formats/protowire.py), over grpcio's generic channel.
"""

from __future__ import annotations

from pathlib import Path

from kubelet_sim.formats.protowire import fields, string_field

CRI = "/runtime.v1.RuntimeService/"


class CriClient:
    """ListPodSandbox, StopPodSandbox, RemovePodSandbox on containerd's CRI (runtime.v1)."""

    def __init__(self, sock: Path) -> None:
        import grpc  # noqa: PLC0415 (only a reference node's stop needs it)

        self._channel = grpc.insecure_channel(f"unix://{sock}")

    def _call(self, method: str, request: bytes) -> bytes:
        answer: bytes = self._channel.unary_unary(CRI + method)(request, timeout=30)
        return answer

    def sandboxes(self) -> list[str]:
        ids = []
        for number, item in fields(self._call("ListPodSandbox", b"")):
            if number == 1 and isinstance(item, bytes):
                ids += [v.decode() for n, v in fields(item) if n == 1 and isinstance(v, bytes)]
        return ids

    def stop_sandbox(self, sandbox: str) -> None:
        self._call("StopPodSandbox", string_field(1, sandbox))

    def remove_sandbox(self, sandbox: str) -> None:
        self._call("RemovePodSandbox", string_field(1, sandbox))

    def close(self) -> None:
        self._channel.close()
