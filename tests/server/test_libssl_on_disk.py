"""A node whose libssl was replaced on disk while it runs (a package upgrade) still starts
(issue 41, deliverable 11): the kubelet API reaches libssl through `_ssl`'s own library, not
through a path read from /proc/self/maps, where the loaded file is then `… (deleted)`.

Both API servers: the node registers with the suite's API server and serves its kubelet API,
with a client CA file of the test's (the check that reaches libssl runs at start with one).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kubelet_sim.controlplane.pki import CertificateAuthority
from tests.agent_process import running_agent
from tests.cluster import ApiUnderTest, wait_for


def _loaded_libssl() -> Path:
    """The libssl file this process's `ssl` loaded (the one an upgrade replaces)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libssl.so" in line}
    if len(paths) != 1:
        pytest.skip(f"not one libssl shared library in this process: {sorted(paths)}")
    return Path(paths.pop())


def test_a_node_starts_when_its_libssl_was_replaced_on_disk(
    cluster: ApiUnderTest, tmp_path: Path
) -> None:
    """The node process loads a copy of libssl (LD_LIBRARY_PATH), deleted as soon as `ssl`
    is imported (sitecustomize): its maps line reads `… (deleted)`, as after an upgrade.
    Before, the start read that line for a path and stopped (`(deleted): cannot open shared
    object file`); now the node serves, the client certificate check deferred as usual."""
    lib = tmp_path / "lib"
    lib.mkdir()
    copy = lib / _loaded_libssl().name
    shutil.copy2(_loaded_libssl(), copy)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, ssl\nos.unlink(os.environ['KUBELET_SIM_TEST_UNLINK'])\n"
    )
    env = {
        "LD_LIBRARY_PATH": str(lib),
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
        "KUBELET_SIM_TEST_UNLINK": str(copy),
    }
    ca_file = CertificateAuthority(tmp_path / "ca", "clients").pair.cert  # what starts the check
    with running_agent(cluster, "--port", "0", "--client-ca-file", str(ca_file), env=env) as agent:

        def listening() -> bool:
            served = any("kubelet API server listening" in line for line in list(agent.lines))
            return served or agent.proc.poll() is not None

        wait_for(listening, 60, "the node to serve its kubelet API, or to exit")
        assert agent.proc.poll() is None, "\n".join(agent.lines[-5:])
        maps = Path(f"/proc/{agent.proc.pid}/maps").read_text()
        assert f"{copy} (deleted)" in maps, "the node runs on the deleted copy"
        events = [r["event"] for r in agent.records()]
        assert not [e for e in events if "verified in the TLS handshake" in e], events
