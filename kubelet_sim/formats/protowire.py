"""The protobuf wire format, as far as the few messages encoded by hand need it (containerd's
CRI calls of a reference node's stop, the gRPC health probe): varints, string fields, and a
message read back as its (field number, value) pairs."""

from __future__ import annotations

from collections.abc import Iterator


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string_field(number: int, text: str) -> bytes:
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, the rest as bytes.

    ValueError for a wire type no message of ours has (groups), IndexError for a varint cut
    short."""
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(data, i)
            yield number, value
        elif wire == 2:
            size, i = read_varint(data, i)
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


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at `data[i:]` and the index after it."""
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i
