"""A node is built one way: the builder (kubelet_sim/assembly/) makes the engine, the process's
shared parts and every part of a node, and no component makes a shared part of its own.

Read from the code (no Docker, no API server): a construction elsewhere, or a shared part a
component takes as optional, fails here with where it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kubelet_sim"
BUILDER = PACKAGE / "assembly"

# The process's shared parts and a node's parts: made only by the builder.
SHARED_PARTS = {"Timers", "Listener", "ContainerEvents", "SharedWatches", "SharedProbe"}
NODE_PARTS = {
    "NodeLifecycle",
    "PodWorkers",
    "ContainerWatcher",
    "KubeletServer",
    "ServiceProxy",
    "ContainerGC",
    "SandboxPool",
    "StaticPods",
    "PodManager",
    "EventRecorder",
    "ReferencedObjectWatches",
    "PodStatusWriter",
    "TokenManager",
    "VolumeManager",
}
# The pod workers' own parts: made where the pod syncer is assembled, for the builder.
SYNCER_PARTS = {"PodSyncer", "PodAdmitter", "HookRunner", "ContainerStopper", "ContainerStarter"}
SYNCER_ASSEMBLY = PACKAGE / "podworkers" / "assemble.py"
# The Docker engine, one per process, and each node's runtime on it: made by the builder (the
# CLI's tools and the demo ask it for theirs; runtime/ makes a node runtime's streams).
ENGINE_CONSTRUCTORS = {
    ("DockerEngine", "connect"),
    ("DockerEngine", None),
    ("NodeRuntime", None),
}
# The only modules outside the builder that may connect an engine, and why.
ENGINE_ELSEWHERE: dict[str, str] = {}

# Parameters that name a shared part: a component receives it, never makes its own.
SHARED_PARAMETERS = {"timers", "listener", "container_events", "shared", "watches", "events"}
SHARED_PARAMETERS |= {"host", "engine", "probe", "runtime_probe"}
SHARED_TYPES = {"Timers", "Listener", "ContainerEvents", "SharedWatches", "HostFacts"}
SHARED_TYPES |= {"DockerEngine", "RuntimeProbe"}

MODULES = sorted(PACKAGE.rglob("*.py"))


def _calls(tree: ast.AST) -> list[tuple[str, str | None, int]]:
    """(class, method or None, line) of each `Name(...)`, `mod.Name(...)`, `Name.method(...)`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            found.append((func.id, None, node.lineno))
        elif isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id[:1].isupper():
                found.append((func.value.id, func.attr, node.lineno))
            found.append((func.attr, None, node.lineno))
    return found


def _where(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", MODULES, ids=_where)
def test_only_the_builder_makes_the_engine_and_a_nodes_parts(path: Path) -> None:
    if BUILDER in path.parents:
        return
    tree = ast.parse(path.read_text())
    wrong = []
    for name, method, line in _calls(tree):
        if method is None and name in SHARED_PARTS | NODE_PARTS:
            wrong.append(f"{name}() at line {line}")
        if method is None and name in SYNCER_PARTS and path != SYNCER_ASSEMBLY:
            wrong.append(f"{name}() at line {line}")
        if (name, method) in ENGINE_CONSTRUCTORS and _where(path) not in ENGINE_ELSEWHERE:
            wrong.append(f"{name}{'.' + method if method else ''}() at line {line}")
    assert wrong == [], f"{_where(path)} makes what the builder makes: {wrong}"


def _optional(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return "None" in text or "Optional" in text


def _names_a_shared_type(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(t in ast.unparse(annotation) for t in SHARED_TYPES)


@pytest.mark.parametrize("path", MODULES, ids=_where)
def test_no_component_takes_a_shared_part_as_optional(path: Path) -> None:
    """`timers: Timers | None = None` would mean "or make your own": a second code path."""
    if BUILDER in path.parents:
        return
    wrong = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        arguments = [*node.args.args, *node.args.kwonlyargs]
        for arg in arguments:
            shared = arg.arg in SHARED_PARAMETERS and _names_a_shared_type(arg.annotation)
            if shared and _optional(arg.annotation):
                wrong.append(f"{node.name}({arg.arg}: {ast.unparse(arg.annotation)})")  # type: ignore[arg-type]
    assert wrong == [], f"{_where(path)}: {wrong}"


def test_the_checks_see_what_they_guard() -> None:
    """The checks above can fail: the builder really makes these parts, and a made-up
    component that makes its own timers is caught."""
    built = {name for p in BUILDER.glob("*.py") for name, _, _ in _calls(ast.parse(p.read_text()))}
    assert {"Timers", "Listener", "ContainerEvents", "SharedWatches", "PodWorkers"} <= built
    assert {"DockerEngine", "NodeRuntime"} <= built
    rogue = ast.parse(
        "def __init__(self, timers: Timers | None = None):\n    self.timers = timers or Timers()\n"
    )
    assert ("Timers", None, 2) in _calls(rogue)
    (fn,) = [n for n in ast.walk(rogue) if isinstance(n, ast.FunctionDef)]
    assert _optional(fn.args.args[1].annotation)
    assert _names_a_shared_type(fn.args.args[1].annotation)
