"""`python -m bench.fixture`: how long a controller author's pytest session waits for its cluster.

Runs pytest in a subprocess, as a user's project would, on a test file that asks for the
`kubelet_sim_cluster` fixture (the plugin as installed, `--kubelet-sim-nodes N`), and measures
from the fixture's set-up starting (a conftest hook) to the first test body running, then the
session's end after it (teardown) and the whole command. After each run it checks that the
cluster left nothing (containers with its labels, control-plane processes, its directory), so
the next session starts from nothing stale. Goal (issue 35, this 2-core machine): ≤ 6 s with
3 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

GOAL_S = 6.0

CONFTEST = """
import os
import time

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname == "kubelet_sim_cluster":
        os.environ.setdefault("BENCH_FIXTURE_START", repr(time.monotonic()))
"""

TEST = """
import json
import os
import time
from pathlib import Path


def test_first(kubelet_sim_cluster):
    body = time.monotonic()
    Path({out!r}).write_text(json.dumps({{
        "to_first_test_s": body - float(os.environ["BENCH_FIXTURE_START"]),
        "body_at": body,
        "labels": kubelet_sim_cluster.labels,
        "pids": [pid for _name, pid, _argv in kubelet_sim_cluster.plane.processes],
        "workdir": str(kubelet_sim_cluster.workdir),
    }}))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def run_once(nodes: int, deadline: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-fixture-") as tmp:
        work = Path(tmp)
        out = work / "measured.json"
        (work / "conftest.py").write_text(CONFTEST)
        (work / "test_bench.py").write_text(TEST.format(out=str(out)))
        began = time.monotonic()
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        done = subprocess.run(
            [*pytest, "--kubelet-sim-nodes", str(nodes), str(work)],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=deadline,
            check=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        ended = time.monotonic()
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"bench: the session failed ({done.returncode}):\n{done.stdout}")
        measured: dict[str, Any] = json.loads(out.read_text())
    client = docker.from_env()
    try:
        labels = [f"{k}={v}" for k, v in measured["labels"].items()]
        left = len(client.containers.list(all=True, filters={"label": labels}))
    finally:
        client.close()
    return {
        "to_first_test_s": measured["to_first_test_s"],
        "teardown_s": ended - measured["body_at"],
        "command_s": ended - began,
        "left_containers": left,
        "left_processes": sum(_alive(pid) for pid in measured["pids"]),
        "left_workdir": Path(measured["workdir"]).exists(),
        "owner": measured["labels"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=180.0)
    args = parser.parse_args()
    runs = [run_once(args.nodes, args.deadline) for _ in range(args.runs)]
    print(f"{'measure':<18} " + " ".join(f"run {i + 1:>2}" for i in range(len(runs))) + "  p50")
    for key in ("to_first_test_s", "teardown_s", "command_s"):
        values = [float(r[key]) for r in runs]
        cells = " ".join(f"{v:6.2f}" for v in values)
        goal = f"  (goal ≤ {GOAL_S:g} s)" if key == "to_first_test_s" else ""
        print(f"{key:<18} {cells} {statistics.median(values):5.2f}{goal}")
    stale = [r for r in runs if r["left_containers"] or r["left_processes"] or r["left_workdir"]]
    owners = {json.dumps(r["owner"], sort_keys=True) for r in runs}
    print(f"left behind: {len(stale)} of {len(runs)} runs; owners distinct: {len(owners)}")
    out = Path(__file__).parent / "results" / f"fixture-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "goal_s": GOAL_S, "runs": runs}, indent=2))
    print(f"bench: results in {out}")


if __name__ == "__main__":
    main()
