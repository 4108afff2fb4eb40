"""The layer order in docs/architecture.md, checked on every import in the package."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kubelet_sim"
SHARED = {
    "validation",
    "logs",
    "cri",
    "loops",  # the supervisor, timers, work queue, backoff, clock
    "formats",  # quantities, durations, JSON, strategic merge patch, PEM, histograms, memo
    "linux",  # entering namespaces, opening paths safely
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
    "podworkers": SHARED | {"kube", "pod", "volumes", "prober"},
    "server": SHARED | {"kube", "pod"},
    "proxy": SHARED | {"kube"},
    "staticpods": SHARED | {"kube", "pod"},
    # The composition root: builds a node's parts and the process's shared ones, runs node sets.
    "assembly": SHARED
    | {"kube", "runtime", "pod", "node", "podworkers", "volumes", "server", "proxy"}
    | {"staticpods"},
    "tools": SHARED | {"kube", "runtime", "pod"},
    "ui": SHARED | {"kube", "runtime", "tools"},
    "controlplane": SHARED,
    "compare": SHARED | {"kube", "pod"},  # pod/generation.py: the server version's rules
    # The one local cluster (control plane, pod endpoint, credentials) the demo and the
    # pytest plugin's Cluster both build on.
    "localcluster": SHARED | {"controlplane", "assembly", "kube", "runtime"},
    "demo": SHARED
    | {"controlplane", "assembly", "tools", "kube", "runtime", "node", "server", "pod"}
    | {"volumes", "localcluster"},
    "cli": SHARED
    | {"kube", "runtime", "node", "assembly", "tools", "server", "demo", "controlplane"}
    | {"podworkers", "localcluster"}
    | {"ui", "compare"},
    "__main__": {"cli"},
    # The pytest plugin and its Cluster (the pytest11 entry point, beside the command): the
    # demo's control plane and nodes, put together for a controller's tests.
    "testing": SHARED
    | {"controlplane", "localcluster", "assembly", "kube", "runtime", "node", "server"}
    | {"volumes"},
}
THIRD_PARTY_OWNER = {"kubernetes": "kube", "docker": "runtime"}


def _layer(path: Path) -> str:
    top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    return "shared" if top in SHARED else top


def _is_module(dotted: str) -> bool:
    """Whether `kubelet_sim.x.y` names a module or package of ours (not a name inside one)."""
    where = PACKAGE.parent.joinpath(*dotted.split("."))
    return where.is_dir() or where.with_suffix(".py").exists()


def imported_modules(source: str, module: str) -> list[str]:
    """Every module the code of `module` (dotted; a package as `x.__init__`) imports, anywhere in
    it (a function's body, `if TYPE_CHECKING:`), with the forms that name no module spelled
    out resolved to the module they load:
    - relative imports, against the module's own package: in `kubelet_sim.pod.spec`,
      `from ..assembly.node import Node` is `kubelet_sim.assembly.node`, `from .. import
      assembly` is `kubelet_sim.assembly`;
    - package-level imports: `from kubelet_sim import assembly` is `kubelet_sim.assembly` (a name
      that is no module, such as `__version__`, is the package itself);
    - `importlib.import_module("kubelet_sim.assembly")` with a literal name."""
    package = module.split(".")[:-1]
    names: list[str] = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            names.append(origin)
            names.extend(
                f"{origin}.{alias.name}"
                for alias in node.names
                if _is_module(f"{origin}.{alias.name}")
            )
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def violations(layer: str, names: list[str]) -> list[str]:
    """What of `names` (imported modules) the layer may not import, one line each."""
    found: list[str] = []
    for name in names:
        top, _, rest = name.partition(".")
        if top in THIRD_PARTY_OWNER and layer != THIRD_PARTY_OWNER[top]:
            found.append(f"only {THIRD_PARTY_OWNER[top]}/ imports {top} (here: {name})")
        if top == "kubelet_sim" and rest:
            target = rest.split(".")[0]
            target_layer = "shared" if target in SHARED else target
            if target_layer != layer and not (
                target in ALLOWED[layer] or target_layer in ALLOWED[layer]
            ):
                found.append(f"layer {layer} may not import kubelet_sim.{target} (here: {name})")
    return found


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def _imports(path: Path) -> list[str]:
    return imported_modules(path.read_text(), _module_name(path))


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_layers_below(path: Path) -> None:
    layer = _layer(path)
    assert layer in ALLOWED, f"{path} is in no layer of docs/architecture.md"
    assert violations(layer, _imports(path)) == [], path


# Each way of writing "pod/ imports the node builder" (or `docker`), as it would stand in
# kubelet_sim/pod/spec.py: the check above must see every one.
FORBIDDEN_FORMS = {
    "absolute": "import kubelet_sim.assembly.node",
    "absolute from": "from kubelet_sim.assembly.node import Node",
    "aliased": "import kubelet_sim.assembly.node as node",
    "package-level": "from kubelet_sim import assembly",
    "package-level, among others": "from kubelet_sim import __version__, cri, assembly",
    "relative": "from ..assembly.node import Node",
    "relative, package-level": "from .. import assembly",
    "relative, deeper": "from ..podworkers.sync import PodSyncer",
    "relative, package-level, deeper": "from ..podworkers import sync",
    "in a function": "def f():\n    from ..assembly.node import Node\n    return Node",
    "type checking only": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    "    from kubelet_sim import assembly",
    "import_module": "import importlib\nimportlib.import_module('kubelet_sim.assembly.node')",
    "third party": "import docker",
    "third party, from": "from docker.errors import NotFound",
}


@pytest.mark.parametrize("source", FORBIDDEN_FORMS.values(), ids=FORBIDDEN_FORMS.keys())
def test_the_check_catches_every_form_of_import(source: str) -> None:
    assert violations("pod", imported_modules(source, "kubelet_sim.pod.spec")) != []


ALLOWED_FORMS = {
    "shared, package-level": "from kubelet_sim import cri, __version__",
    "own layer, relative": "from . import status\nfrom .status import pod_status",
    "shared, relative": "from .. import cri\nfrom ..validation import ConfigError",
    "standard library": "import json\nfrom typing import Any",
}


@pytest.mark.parametrize("source", ALLOWED_FORMS.values(), ids=ALLOWED_FORMS.keys())
def test_the_check_lets_allowed_imports_through(source: str) -> None:
    assert violations("pod", imported_modules(source, "kubelet_sim.pod.spec")) == []


def test_relative_imports_resolve_in_a_package_init() -> None:
    """In `kubelet_sim/pod/__init__.py` a single dot is the package itself."""
    names = imported_modules(
        "from .spec import PodView\nfrom .. import assembly", "kubelet_sim.pod.__init__"
    )
    assert "kubelet_sim.pod.spec" in names
    assert "kubelet_sim.assembly" in names


def test_rules_see_every_layer() -> None:
    """The check above can fail: the package really has code in the guarded layers."""
    layers = {_layer(p) for p in MODULES}
    assert {"kube", "runtime", "cli", "assembly"} <= layers
    assert any("kubernetes" in _imports(p) or "kubernetes" in str(_imports(p)) for p in MODULES)


TEST_ONLY = {"tests", "pytest", "hypothesis", "dnslib"}  # the `test` extra and tests/
# The pytest plugin: pytest loads it, so pytest is there; nothing else in the package imports it.
PYTEST_PLUGIN = PACKAGE / "testing" / "plugin.py"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_imports_no_test_tooling(path: Path) -> None:
    """What the wheel ships (kubelet_sim/) never needs the tests' code or their dependencies
    (the pytest plugin needs pytest, and only it)."""
    used = {name.partition(".")[0] for name in _imports(path)}
    allowed = {"pytest"} if path == PYTEST_PLUGIN else set()
    assert not used & (TEST_ONLY - allowed), f"{path} imports {sorted(used & TEST_ONLY)}"


BENCH = PACKAGE.parent / "bench"


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_the_benchmarks_import_no_tests(path: Path) -> None:
    """bench/ measures what the package does with the package's own parts: a change to the
    tests' helpers never moves a benchmark's numbers."""
    used = {
        name.partition(".")[0] for name in imported_modules(path.read_text(), f"bench.{path.stem}")
    }
    assert "tests" not in used, f"{path} imports tests/"


def test_only_the_plugin_imports_it() -> None:
    """The plugin is pytest's to load: a module of the command importing it would pull pytest."""
    plugin = _module_name(PYTEST_PLUGIN)
    importers = [p for p in MODULES if plugin in _imports(p)]
    assert importers == []


def test_every_module_serves_the_command() -> None:
    """Each module of the package is reached from an entry point (`kubelet-sim`'s, or the pytest
    plugin's) by imports: none is there only for the tests or the benchmarks
    (runtime/local_images.py, for one, builds the demo's look-alike images where no registry
    answers, and the tests reuse it)."""
    by_name = {_module_name(p).removesuffix(".__init__"): p for p in MODULES}
    reached: set[str] = set()
    todo = ["kubelet_sim.__main__", "kubelet_sim.cli", *_entry_points()]
    while todo:
        name = todo.pop()
        if name in reached or name not in by_name:
            continue
        reached.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))  # parent packages run
        path = by_name[name]
        todo.extend(imported_modules(path.read_text(), _module_name(path)))
    assert sorted(set(by_name) - reached) == []


def _entry_points() -> list[str]:
    """The modules pyproject.toml's entry points name (the pytest plugin's among them)."""
    import tomllib

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    groups = [project.get("scripts") or {}, *(project.get("entry-points") or {}).values()]
    return [target.partition(":")[0] for group in groups for target in group.values()]


def test_the_pytest_plugin_is_an_entry_point() -> None:
    """pytest finds the plugin through the installed package's `pytest11` entry point."""
    assert _module_name(PYTEST_PLUGIN) in _entry_points()


def import_circles(modules: dict[str, list[str]]) -> list[str]:
    """The modules of one import circle, or [] (`modules`: each module's imported modules).
    A module's own packages are left out: Python runs them first, whatever it imports."""
    graph = {
        name: {n for n in names if n in modules and not f"{name}.".startswith(f"{n}.")}
        for name, names in modules.items()
    }
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as circle:
        return list(circle.args[1])
    return []


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Each module stands above what it imports (lazily or for type checks too), so each can
    be read, tested and moved without the others above it."""
    modules = {_module_name(p).removesuffix(".__init__"): _imports(p) for p in MODULES}
    assert import_circles(modules) == []


def test_the_circle_check_finds_a_circle() -> None:
    """A made-up circle of three (tls -> x509auth -> peer_chain -> tls) is found; a package's
    module importing its own package is none."""
    three = {"a.tls": ["a.x509auth"], "a.x509auth": ["a.peer_chain"], "a.peer_chain": ["a.tls"]}
    assert sorted(set(import_circles(three))) == ["a.peer_chain", "a.tls", "a.x509auth"]
    assert import_circles({"a": ["a.b"], "a.b": ["a"]}) == []


MAX_LINES = 600


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_600_lines(path: Path) -> None:
    """A module over 600 lines holds more than one job: split it by job within its layer."""
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)}: {lines} lines"
