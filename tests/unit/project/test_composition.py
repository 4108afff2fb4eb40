"""A node is built one way: the builder (kubelet_sim/assembly/) makes the engine, the process's
shared parts and every part of a node, and no component makes a shared part of its own.

Read from the code (no Docker, no API server): a construction elsewhere, or a shared part a
component takes as optional (`x or X()`: a second wiring), fails here with where it is. Each
check is shown failing on a made-up offender (`OFFENDERS`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "kubelet_sim"
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
SYNCER_PARTS |= {"ActionRunner"}
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
# Made in one place each, the builder included (where the process's one is made), with why:
# each is then given, never made again where it is missing.
MADE_ONLY_IN: dict[str, dict[str, str]] = {
    # Supervisors: the process's and each node's; a tool's own watches, beside any node.
    "Supervisor": {
        "assembly/nodeset.py": "the process's (its failure stops every node) and each node's",
        "ui/sources.py": "the web view's watches: a display beside the nodes, failing none",
        "tools/watch.py": "`kubelet-sim watch`: the command's own watches",
        "tools/trace.py": "`kubelet-sim trace`: the command's own watch",
        "tools/handoff.py": "the handoff stream's own watches",
        "compare/runner.py": "`kubelet-sim compare`: the command's own watches",
    },
    "TokenGuard": {"assembly/nodeset.py": "the process's one, given to its listener and gates"},
    # The host's facts: read once for the process.
    "detect_host": {"assembly/nodeset.py": "the process's HostFacts"},
    "can_mount": {"node/host.py": "detect_host reads it into HostFacts.may_mount"},
    # The engine's owners: each connects the process's one, gives it, and closes it.
    "engine_for": {
        "cli/node_command.py": "`kubelet-sim --node-name`: its node set's",
        "cli/ui.py": "`kubelet-sim ui`: its nodes' reading runtimes",
        "cli/tools.py": "`kubelet-sim trace`: its node's reading runtime",
        "cli/image.py": "`kubelet-sim image`: the engine it builds the workload's image in",
        "demo/session.py": "the demo's images, pod endpoint and node set",
        "testing/cluster.py": "a test cluster's images, pod endpoint and node sets",
    },
}

# Parameters that name a shared part: a component receives it, never makes its own.
SHARED_PARAMETERS = {"timers", "listener", "container_events", "shared", "watches", "events"}
SHARED_PARAMETERS |= {"host", "engine", "probe", "runtime_probe", "supervisor", "tokens"}
SHARED_TYPES = {"Timers", "Listener", "ContainerEvents", "SharedWatches", "HostFacts"}
SHARED_TYPES |= {"DockerEngine", "RuntimeProbe", "Supervisor", "TokenGuard"}

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


def made_outside_the_builder(source: str, where: str) -> list[str]:
    """What the module at `where` (relative to the package) makes that the builder makes."""
    if where.startswith("assembly/"):
        return []
    wrong = []
    for name, method, line in _calls(ast.parse(source)):
        if method is None and name in SHARED_PARTS | NODE_PARTS:
            wrong.append(f"{name}() at line {line}")
        if method is None and name in SYNCER_PARTS and PACKAGE / where != SYNCER_ASSEMBLY:
            wrong.append(f"{name}() at line {line}")
        if (name, method) in ENGINE_CONSTRUCTORS and where not in ENGINE_ELSEWHERE:
            wrong.append(f"{name}{'.' + method if method else ''}() at line {line}")
    return wrong


def made_elsewhere(source: str, where: str) -> list[str]:
    """What the module at `where` makes of `MADE_ONLY_IN` without being one of its places."""
    return [
        f"{name}() at line {line}"
        for name, method, line in _calls(ast.parse(source))
        if method is None and name in MADE_ONLY_IN and where not in MADE_ONLY_IN[name]
    ]


@pytest.mark.parametrize("path", MODULES, ids=_where)
def test_only_the_builder_makes_the_engine_and_a_nodes_parts(path: Path) -> None:
    wrong = made_outside_the_builder(path.read_text(), _where(path))
    assert wrong == [], f"{_where(path)} makes what the builder makes: {wrong}"


@pytest.mark.parametrize("path", MODULES, ids=_where)
def test_supervisors_tokens_host_facts_and_the_engine_are_made_once(path: Path) -> None:
    """A Supervisor, the TokenGuard, the host's facts and the engine each come from their
    one place (`MADE_ONLY_IN`), and are given from there."""
    wrong = made_elsewhere(path.read_text(), _where(path))
    assert wrong == [], f"{_where(path)} makes what is made once: {wrong}"


def _optional(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return "None" in text or "Optional" in text


def _names_a_shared_type(annotation: ast.expr | None) -> bool:
    return annotation is not None and any(t in ast.unparse(annotation) for t in SHARED_TYPES)


def optional_shared_parts(source: str) -> list[str]:
    """Each parameter that takes a shared part as optional, the builder's own included."""
    wrong = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        arguments = [*node.args.args, *node.args.kwonlyargs]
        for arg in arguments:
            shared = arg.arg in SHARED_PARAMETERS and _names_a_shared_type(arg.annotation)
            if shared and _optional(arg.annotation):
                wrong.append(f"{node.name}({arg.arg}: {ast.unparse(arg.annotation)})")  # type: ignore[arg-type]
    return wrong


@pytest.mark.parametrize("path", MODULES, ids=_where)
def test_no_component_takes_a_shared_part_as_optional(path: Path) -> None:
    """`timers: Timers | None = None` would mean "or make your own": a second code path (an
    engine given or else connected is also an engine closed or not: two owners)."""
    assert optional_shared_parts(path.read_text()) == [], _where(path)


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


# Made-up offenders, as each would stand in kubelet_sim/podworkers/rogue.py: a second wiring.
OFFENDERS = {
    "own supervisor": "def f(supervisor):\n    return supervisor or Supervisor()\n",
    "own token guard": "def f(tokens):\n    return tokens or TokenGuard()\n",
    "host read again": "def f():\n    return detect_host()\n",
    "may mount read again": "def f(mount):\n    return can_mount() if mount is None else mount\n",
    "own engine": "def f(engine):\n    return engine or engine_for()\n",
    "own timers": "def f(timers):\n    return timers or Timers()\n",
    "optional supervisor": "def f(supervisor: Supervisor | None = None): ...\n",
    "optional tokens": "def f(tokens: TokenGuard | None = None): ...\n",
    "optional engine": "def f(engine: DockerEngine | None = None): ...\n",
    "optional host": "def f(host: HostFacts | None = None): ...\n",
}


@pytest.mark.parametrize("source", OFFENDERS.values(), ids=OFFENDERS.keys())
def test_a_made_up_offender_is_caught(source: str) -> None:
    where = "podworkers/rogue.py"
    found = [
        *made_outside_the_builder(source, where),
        *made_elsewhere(source, where),
        *optional_shared_parts(source),
    ]
    assert found != []


def test_the_builder_is_held_to_the_engines_one_owner() -> None:
    """In the builder too: a node set that connects an engine when given none is caught."""
    rogue = (
        "def __init__(self, engine: DockerEngine | None = None):\n"
        "    self.engine = engine or engine_for()\n"
    )
    assert made_elsewhere(rogue, "assembly/nodeset.py") != []
    assert optional_shared_parts(rogue) != []


@pytest.mark.parametrize("name", MADE_ONLY_IN, ids=str)
def test_each_one_place_really_makes_it(name: str) -> None:
    """`MADE_ONLY_IN` names only places that make the part: none left from a move."""
    for where in MADE_ONLY_IN[name]:
        made = {n for n, m, _ in _calls(ast.parse((PACKAGE / where).read_text())) if m is None}
        assert name in made, f"{where} makes no {name}"
