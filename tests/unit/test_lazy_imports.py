"""What a node process leaves unimported until it needs it (the memory of issue 22)."""

from __future__ import annotations

import subprocess
import sys


def test_a_node_holds_no_cryptography_until_its_first_client() -> None:
    """`cryptography` (some 8 MiB) serves the kubelet API's certificates and the demo's control
    plane: the CLI and a started agent's modules must not import it."""
    code = (
        "import sys, kubelet_sim.cli, kubelet_sim.agent, kubelet_sim.nodeset;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'cryptography'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
