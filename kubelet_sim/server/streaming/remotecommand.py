"""exec and attach over SPDY streams (the kubelet's cri/streaming/remotecommand).

The client opens an error stream and the streams it asked for (stdin, stdout, stderr, and
resize with a tty from v3 on); the process's output goes out on stdout/stderr, its stdin comes
in, and the end is told on the error stream: v4/v5 write a metav1.Status with the exit code,
older versions write only a failure's text.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubelet_sim import cri
from kubelet_sim.server.streaming.pump import SocketPump
from kubelet_sim.server.streaming.spdy import Stream

V5, V4, V3, V2, V1 = (
    "v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io",
    "channel.k8s.io",
)  # fmt: skip
PROTOCOLS = (V5, V4, V3, V2, V1)  # the kubelet's SupportedStreamingProtocols; v5 is v4 on SPDY
STREAM_CREATION_TIMEOUT = 30.0  # the kubelet's streamCreationTimeout


@dataclass(frozen=True)
class Options:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def parse(cls, query: dict[str, list[str]]) -> Options:
        """NewOptions: the API server's names (input, output, error, tty), each "1" or not;
        stderr is dropped with a tty (one terminal carries both)."""

        def on(name: str) -> bool:
            return (query.get(name) or [""])[-1] == "1"

        tty = on("tty")
        options = cls(on("input"), on("output"), on("error") and not tty, tty)
        if not (options.stdin or options.stdout or options.stderr):
            raise ValueError("you must specify at least 1 of stdin, stdout, stderr")
        return options


def status(
    *,
    failure: str = "",
    reason: str = "",
    code: int = 0,
    causes: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A metav1.Status as Go marshals it (empty fields left out, metadata always there)."""
    out: dict[str, Any] = {"metadata": {}, "status": "Failure" if failure else "Success"}
    if failure:
        out["message"] = failure
    if reason:
        out["reason"] = reason
    if causes:
        out["details"] = {"causes": causes}
    if code:
        out["code"] = code
    return out


def exit_status(command: list[str], exit_code: int) -> dict[str, Any]:
    """A non-zero exit in the words of the CRI streaming server (containerd's exec error)."""
    cause = f"error executing command [{' '.join(command)}], exit code {exit_code}"
    return status(
        failure=f"command terminated with non-zero exit code: {cause}",
        reason="NonZeroExitCode",
        causes=[{"reason": "ExitCode", "message": str(exit_code)}],
    )


def internal_error(message: str) -> dict[str, Any]:
    return status(
        failure=f"Internal error occurred: {message}",
        reason="InternalError",
        code=500,
        causes=[{"message": message}],
    )


@dataclass
class Streams:
    """The client's streams by type, gathered on the socket's thread as they open."""

    protocol: str
    expected: int
    by_type: dict[str, Stream] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def expect(cls, protocol: str, options: Options) -> Streams:
        count = 1 + options.stdin + options.stdout + options.stderr
        if options.tty and protocol not in (V2, V1):
            count += 1  # resize
        return cls(protocol, count)

    @classmethod
    def of_channels(cls, protocol: str, options: Options, channels: dict[int, Any]) -> Streams:
        """A websocket's channels, there from the start: those the options ask for."""
        wanted = (options.stdin, options.stdout, options.stderr, True, options.tty)
        streams = cls(protocol, sum(wanted))
        for number, name in enumerate(("stdin", "stdout", "stderr", "error", "resize")):
            if wanted[number]:
                streams.by_type[name] = channels[number]
        streams.ready.set()
        # wsstream tells the client the session is up: an empty message on the first output
        first = next(n for n in ("stdout", "stderr", "error") if n in streams.by_type)
        streams.by_type[first].write(b"")
        return streams

    def on_stream(self, stream: Stream) -> bool:
        self.by_type.setdefault(stream.header("streamType"), stream)
        if len(self.by_type) >= self.expected:
            self.ready.set()
        return True

    def write_status(self, outcome: dict[str, Any]) -> None:
        error = self.by_type.get("error")
        if error is None:
            return
        try:
            if self.protocol.startswith(("v4.", "v5.")):
                error.write(json.dumps(outcome, separators=(",", ":")).encode())
            elif outcome["status"] != "Success":
                error.write(str(outcome["message"]).encode())
        except OSError:
            pass  # the client left


def serve(
    conn: SocketPump,
    streams: Streams,
    start: Callable[[], cri.StreamSession],
    command: list[str] | None,
) -> None:
    """Run one exec (command given) or attach session to its end, then close the connection.

    Runs on a thread of its own while the connection's thread moves the bytes."""
    try:
        if not streams.ready.wait(STREAM_CREATION_TIMEOUT):
            return  # "timed out waiting for client to create streams"
        what = "error executing command in container" if command else "error attaching to container"
        try:
            session = start()
        except cri.StreamError as exc:
            streams.write_status(internal_error(f"{what}: {exc}"))
            return
        try:
            _pump(streams, session)
            code = session.wait() if command is not None else None
        finally:
            session.close()
        if command is not None and code is None:
            streams.write_status(internal_error(f"{what}: the exit code was not recorded"))
        elif command is not None and code:
            streams.write_status(exit_status(command, code))
        else:
            streams.write_status(status())
    finally:
        for stream in streams.by_type.values():
            with contextlib.suppress(OSError):
                stream.close()
        conn.close()


def _pump(streams: Streams, session: cri.StreamSession) -> None:
    stdin, resize = streams.by_type.get("stdin"), streams.by_type.get("resize")
    if stdin is not None:
        threading.Thread(
            target=_feed, args=(stdin, session), name="exec-stdin", daemon=True
        ).start()
    if resize is not None:
        threading.Thread(
            target=_resize, args=(resize, session), name="exec-resize", daemon=True
        ).start()
    outputs = {1: streams.by_type.get("stdout"), 2: streams.by_type.get("stderr")}
    while True:
        fd, data = session.read()
        if not data:
            return
        target = outputs.get(fd)
        if target is not None:
            try:
                target.write(data)
            except OSError:
                outputs[fd] = None  # that stream is gone: the process still runs to its end


def _feed(stdin: Stream, session: cri.StreamSession) -> None:
    try:
        while chunk := stdin.read():
            session.write(chunk)
    except OSError:
        pass  # the process ended first
    finally:
        session.close_stdin()


def _resize(stream: Stream, session: cri.StreamSession) -> None:
    """TerminalSize objects, one after another ({"Width": 80, "Height": 24})."""
    decoder, text = json.JSONDecoder(), ""
    while chunk := stream.read():
        text += chunk.decode(errors="replace")
        while text.strip():
            try:
                size, end = decoder.raw_decode(text.lstrip())
            except ValueError:
                break  # half an object: wait for the rest
            text = text.lstrip()[end:]
            if isinstance(size, dict):
                session.resize(int(size.get("Width") or 0), int(size.get("Height") or 0))
