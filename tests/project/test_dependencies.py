"""The lowest release pyproject.toml allows of a dependency has what the package imports from it
(issue 41, deliverable 11: `cryptography>=42` was declared while the kubelet API's client
certificate check imports `ExtensionPolicy`, which came in 45: with 44 installed every kubelet
API request failed on ImportError)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kubelet_sim"
VERIFICATION = "cryptography.x509.verification"
# The release each name of cryptography.x509.verification came in (its docs' "Added in
# version"; 44 and 45 checked by importing each): a name imported anew needs its line here.
VERIFICATION_SINCE = {
    "Store": 42,
    "PolicyBuilder": 42,
    "VerificationError": 42,
    "ClientVerifier": 43,
    "Criticality": 45,
    "ExtensionPolicy": 45,
}


def _declared_minimum(distribution: str) -> int:
    """The major release of `distribution` that pyproject.toml's `>=` allows first."""
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        found = re.fullmatch(rf"{distribution}\s*>=\s*(\d+)[\d.]*(,.*)?", requirement)
        if found:
            return int(found.group(1))
    raise AssertionError(f"no '{distribution}>=' in pyproject.toml's dependencies")


def _imported_from(module: str) -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == module:
                names |= {alias.name for alias in node.names}
    return names


def test_cryptography_is_declared_from_the_release_its_verifier_imports_need() -> None:
    names = _imported_from(VERIFICATION)
    assert names, f"nothing imported from {VERIFICATION}: this test checks nothing"
    unknown = names - VERIFICATION_SINCE.keys()
    assert not unknown, f"say in VERIFICATION_SINCE which release brought {sorted(unknown)}"
    needed = max(VERIFICATION_SINCE[name] for name in names)
    assert _declared_minimum("cryptography") >= needed, (
        f"cryptography>={needed} needed for {sorted(names)}"
    )
