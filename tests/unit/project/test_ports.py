"""The pod workers know their collaborators only by their ports (podworkers/ports.py)."""

from __future__ import annotations

import ast
from pathlib import Path

PODWORKERS = Path(__file__).resolve().parents[3] / "kubelet_sim" / "podworkers"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_the_pod_workers_import_no_docker_and_no_runtime_module() -> None:
    modules = sorted(PODWORKERS.glob("*.py"))
    assert modules
    for path in modules:
        for name in _imported(path):
            assert name.split(".")[0] != "docker", f"{path.name} imports {name}"
            assert not name.startswith("kubelet_sim.runtime"), f"{path.name} imports {name}"
        for name in ("DockerEngine", "NodeRuntime"):
            assert name not in path.read_text(), f"{path.name} names {name}"


def test_the_docker_adapter_and_the_fake_implement_the_runtime_port() -> None:
    """Checked by mypy where the agent passes NodeRuntime as a PodRuntime; here, that each
    method the port names exists on both (the fake is not type-checked)."""
    from kubelet_sim.podworkers.ports import ContainerCache, ImageService, RuntimeService
    from kubelet_sim.runtime.node_runtime import NodeRuntime
    from tests.fakeruntime import FakeContainerCache, FakeRuntime

    for port, implementations in (
        (RuntimeService, (NodeRuntime, FakeRuntime)),
        (ImageService, (NodeRuntime, FakeRuntime)),
        (ContainerCache, (FakeContainerCache,)),
    ):
        wanted = {n for n in vars(port) if not n.startswith("_")} - {"node_name", "files"}
        for cls in implementations:
            missing = {n for n in wanted if not callable(getattr(cls, n, None))}
            assert not missing, f"{cls.__name__} lacks {missing} of {port.__name__}"
