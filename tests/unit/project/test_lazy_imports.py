"""What a node process leaves unimported until it needs it (the memory of issue 22)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import kubelet_sim

PACKAGE = Path(kubelet_sim.__file__).parent


def test_a_node_holds_no_cryptography_until_its_first_client() -> None:
    """`cryptography` (some 8 MiB) serves the kubelet API's certificates and the demo's control
    plane: the CLI and a started agent's modules must not import it."""
    code = (
        "import sys, kubelet_sim.cli, kubelet_sim.assembly.build, kubelet_sim.assembly.nodeset;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'cryptography'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_no_module_uses_the_clients_generated_api_classes() -> None:
    """`client.CoreV1Api` and its kind load a pydantic model per type they name (22 MiB for
    CoreV1Api): the agent calls the API by path (`kube/paths.py`, `rest.request_json`)."""
    generated = re.compile(r"\bclient\.(?!ApiClient\b)\w+Api\b|kubernetes\.client\.api\b")
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "paths.py"  # which says why, in its docstring
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if generated.search(line) and not line.lstrip().startswith(("#", '"', "`"))
    ]
    assert found == [], found
