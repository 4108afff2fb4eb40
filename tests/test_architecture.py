"""The layer order in docs/architecture.md, checked on every import in the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kubelet_sim"
SHARED = {
    "config",
    "logs",
    "backoff",
    "supervise",
    "workqueue",
    "cri",
    "smp",
    "histogram",
    "paths",
    "durations",
    "quantity",
    "jsontypes",
    "pem",
    "__init__",
}

# For each layer: the kubelet_sim layers it may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "shared": SHARED,
    "kube": SHARED,
    "runtime": SHARED,
    "pod": SHARED,
    "volumes": SHARED | {"pod"},
    "node": SHARED | {"kube", "runtime", "pod"},
    "prober": SHARED | {"pod"},
    "podworkers": SHARED | {"kube", "runtime", "pod", "volumes", "prober"},
    "server": SHARED | {"kube", "pod"},
    "proxy": SHARED | {"kube"},
    "agent": SHARED
    | {"kube", "runtime", "pod", "node", "podworkers", "volumes", "server", "proxy"},
    "tools": SHARED | {"kube", "runtime", "pod"},
    "controlplane": SHARED,
    "nodeset": SHARED | {"agent", "kube", "runtime", "node", "server"},
    "demo": SHARED
    | {"controlplane", "nodeset", "agent", "tools", "kube", "runtime", "node", "server", "pod"}
    | {"volumes"},
    "cli": SHARED
    | {"kube", "runtime", "node", "agent", "tools", "server", "nodeset", "demo", "controlplane"},
    "__main__": {"cli"},
}
THIRD_PARTY_OWNER = {"kubernetes": "kube", "docker": "runtime"}


def _layer(path: Path) -> str:
    top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    return "shared" if top in SHARED else top


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            # relative: resolve against the module's own package
            package = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            base = package[: len(package) - node.level]
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.extend(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            if node.module == "kubelet_sim":  # `from kubelet_sim import x` imports x
                names.extend(
                    f"kubelet_sim.{alias.name}"
                    for alias in node.names
                    if (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").exists()
                )
    return names


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_layers_below(path: Path) -> None:
    layer = _layer(path)
    assert layer in ALLOWED, f"{path} is in no layer of docs/architecture.md"
    for name in _imports(path):
        top, _, rest = name.partition(".")
        if top in THIRD_PARTY_OWNER:
            assert layer == THIRD_PARTY_OWNER[top], (
                f"{path}: only {THIRD_PARTY_OWNER[top]}/ imports {top}"
            )
        if top == "kubelet_sim" and rest:
            target = rest.split(".")[0]
            target_layer = "shared" if target in SHARED else target
            if target_layer != layer:
                assert target in ALLOWED[layer] or target_layer in ALLOWED[layer], (
                    f"{path}: layer {layer} may not import kubelet_sim.{target}"
                )


def test_rules_see_every_layer() -> None:
    """The check above can fail: the package really has code in the guarded layers."""
    layers = {_layer(p) for p in MODULES}
    assert {"kube", "runtime", "cli", "agent"} <= layers
    assert any("kubernetes" in _imports(p) or "kubernetes" in str(_imports(p)) for p in MODULES)
