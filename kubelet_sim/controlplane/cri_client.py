"""Four calls of containerd's CRI (runtime.v1): list, stop and remove pod sandboxes, so that a
reference node's stop lets the network plugins clean up after each pod. The messages are
encoded by hand (a few protobuf fields), over grpcio's generic channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

CRI = "/runtime.v1.RuntimeService/"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string_field(number: int, text: str) -> bytes:
    data = text.encode()
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, the rest as bytes."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
            yield number, value
        elif wire == 2:
            size, i = _read_varint(data, i)
            yield number, data[i : i + size]
            i += size
        elif wire == 1:
            yield number, data[i : i + 8]
            i += 8
        elif wire == 5:
            yield number, data[i : i + 4]
            i += 4
        else:
            raise ValueError(f"protobuf wire type {wire}")


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


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
        for number, item in _fields(self._call("ListPodSandbox", b"")):
            if number == 1 and isinstance(item, bytes):
                ids += [v.decode() for n, v in _fields(item) if n == 1 and isinstance(v, bytes)]
        return ids

    def stop_sandbox(self, sandbox: str) -> None:
        self._call("StopPodSandbox", _string_field(1, sandbox))

    def remove_sandbox(self, sandbox: str) -> None:
        self._call("RemovePodSandbox", _string_field(1, sandbox))

    def close(self) -> None:
        self._channel.close()
