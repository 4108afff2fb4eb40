"""Run the fake API server as a process: `python -m tests.fakeapi --kubeconfig PATH`.

For the benchmark (bench/), which needs the API server outside its own process. Prints the URL
on stdout, serves until SIGTERM or SIGINT. Test-only extra: `GET /debug/requests?since=T`
answers the request log as JSON (outside the API paths, and not logged itself), so a client in
another process can count requests by user agent, verb and resource.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import threading
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakeapi.server import FakeApiServer

DEBUG_REQUESTS = "/debug/requests"


class _DebugFakeApiServer(FakeApiServer):
    """The fake plus the request-log endpoint; every other path goes to the fake unchanged."""

    def _handle(self, h: Any) -> None:
        url = urlsplit(h.path)
        if h.command != "GET" or url.path != DEBUG_REQUESTS:
            super()._handle(h)
            return
        query = parse_qs(url.query)
        since = float(query.get("since", ["0"])[-1] or 0)
        agent = query.get("userAgentPrefix", [""])[-1]
        records = [
            dataclasses.asdict(r)
            for r in self.log.find(since=since)
            if r.user_agent.startswith(agent)
        ]
        data = json.dumps(records, separators=(",", ":")).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakeapi", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="where to write a kubeconfig")
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any)")
    parser.add_argument("--user", default="admin", help="user the kubeconfig's token names")
    args = parser.parse_args()

    stop = threading.Event()

    def handle(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    server = _DebugFakeApiServer(port=args.port).start()
    try:
        server.write_kubeconfig(args.kubeconfig, user=args.user)
        print(server.url, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
