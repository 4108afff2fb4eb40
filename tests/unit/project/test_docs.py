"""What the docs say that the code decides, held to the code: the layer list of
docs/architecture.md, the pool sizes and periods the pages quote, the options, the paths they
name, and mkdocs.yml's nav. `mkdocs build --strict` (in .ci/run) checks links; these check the
facts that drift silently when the code changes and the prose does not."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet_sim.assembly.process import TIMER_THREADS_PER_NODE
from kubelet_sim.controlplane.binaries import DEFAULT_KUBE_VERSION
from kubelet_sim.controlplane.relay import NODE_BOUNDS, PODS_BOUNDS
from kubelet_sim.kube.object_watches import POLL_PERIOD, WATCHES_PER_POD
from kubelet_sim.loops.timers import POOL_THREADS
from kubelet_sim.podworkers.image_manager import PARALLEL_PULLS
from kubelet_sim.podworkers.sync import YOUNG_CONTAINER
from kubelet_sim.podworkers.waits import OBSERVE_AFTER, RELIST_LAG
from kubelet_sim.podworkers.workers import RESYNC_SECONDS
from kubelet_sim.prober.manager import PROBE_THREADS
from kubelet_sim.staticpods.source import POLL_SECONDS

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "kubelet_sim"
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "eight": 8}


def page(name: str) -> str:
    """A page's text with its lines joined, so a phrase may break across lines."""
    return " ".join((DOCS / name).read_text().split())


# --- mkdocs.yml's nav ---------------------------------------------------------------------------


class _AnyTagLoader(yaml.SafeLoader):
    """Reads mkdocs.yml without mkdocs: a tag such as `!!python/name:` becomes None."""


_AnyTagLoader.add_multi_constructor("", lambda _loader, _suffix, _node: None)


def _nav_entries(item: Any) -> Iterator[str]:
    if isinstance(item, str):
        yield item
    elif isinstance(item, list):
        for entry in item:
            yield from _nav_entries(entry)
    elif isinstance(item, dict):
        for entry in item.values():
            yield from _nav_entries(entry)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_AnyTagLoader)
    nav = [entry for entry in _nav_entries(config["nav"]) if not entry.startswith("http")]
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(pages) - set(nav)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - set(pages)) == [], "nav entries with no page"
    assert len(nav) == len(set(nav)), "a page listed twice"


# --- the layer list of docs/architecture.md -----------------------------------------------------

# A line's first column: a name (`cli/` a package, `agent` a module) or a list of them
# (`config, logs, backoff,`); the description follows after spaces.
_NAMES = re.compile(r"^[a-z_]+/?(?:, [a-z_]+/?)*,?")


def documented_layers() -> list[str]:
    """The names in the layer list, top to bottom, as written (`cli/`, `agent`, `config`)."""
    text = (DOCS / "architecture.md").read_text()
    block = text.split("## The layers", 1)[1].split("```", 2)[1]
    names: list[str] = []
    for line in block.splitlines():
        match = _NAMES.match(line)
        if match:
            names.extend(n.strip() for n in match.group().split(",") if n.strip())
    return names


def package_layers() -> set[str]:
    """What the package holds at its top, written as the list writes it."""
    found = {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    found |= {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return found


def test_the_layer_list_names_every_package_and_module_at_the_top_and_nothing_else() -> None:
    documented = documented_layers()
    assert len(documented) == len(set(documented)), "a name listed twice"
    assert sorted(set(documented) - package_layers()) == [], "listed, but not in kubelet_sim/"
    assert sorted(package_layers() - set(documented)) == [], "in kubelet_sim/, but not listed"


def test_the_layer_list_runs_in_the_order_the_architecture_test_enforces() -> None:
    """Each layer is listed above every layer tests/project/test_architecture.py lets it import, and
    the shared pieces come last."""
    from tests.project.test_architecture import ALLOWED, SHARED

    order = [name.rstrip("/") for name in documented_layers()]
    position = {name: i for i, name in enumerate(order)}
    shared = [position[name] for name in SHARED if name in position]
    layers = {name: allowed for name, allowed in ALLOWED.items() if name in position}
    assert set(ALLOWED) - {"shared", "__main__"} == set(layers), "a layer only one side knows"
    upward = [
        f"{layer} may import {below}, listed above it"
        for layer, allowed in layers.items()
        for below in sorted(allowed - SHARED)
        if position[below] < position[layer]
    ]
    assert upward == []
    assert max(position[name] for name in layers) < min(shared), "a shared piece above a layer"


# --- numbers the pages quote --------------------------------------------------------------------

# (page, what it says with the number as a group, the code's value)
QUOTED: list[tuple[str, str, float]] = [
    ("architecture.md", r"`timers` \(one scheduler thread, a pool of (\w+)\)", POOL_THREADS),
    ("architecture.md", r"(\w+) threads of it per node", TIMER_THREADS_PER_NODE),
    ("many-nodes.md", r"one timer thread and a pool of (\w+)", POOL_THREADS),
    ("architecture.md", r"startup probes: one scheduler thread, a pool of (\w+)", PROBE_THREADS),
    ("architecture.md", r"\(while the node has probes\) and its pool of (\w+)", PROBE_THREADS),
    ("behaviour.md", r"One scheduler thread and a pool of (\w+) run every probe", PROBE_THREADS),
    ("architecture.md", r"image pulls run on a pool of (\w+)", PARALLEL_PULLS),
    ("options.md", r"pulls run beside the pod workers, (\w+) at a time", PARALLEL_PULLS),
    ("architecture.md", r"A periodic resync \(([\d.]+) s", RESYNC_SECONDS),
    ("architecture.md", r"a Docker event brings it ([\d.]+) s\s+later \(RELIST_LAG", RELIST_LAG),
    ("architecture.md", r"never sooner than ([\d.]+) s after the last sync ended", OBSERVE_AFTER),
    ("architecture.md", r"past its first (\w+) watches are read by GET", WATCHES_PER_POD),
    ("architecture.md", r"watches are read by GET every ([\d.]+) s", POLL_PERIOD),
    ("architecture.md", r"manifest directory is read every ([\d.]+) s", POLL_SECONDS),
    ("architecture.md", r"a running container younger than ([\d.]+) s", YOUNG_CONTAINER),
    ("security.md", r"At most (\d+) connections at once", PODS_BOUNDS.connections),
    ("security.md", r"and (\d+) from one source address", PODS_BOUNDS.per_peer),
    ("security.md", r"A connection silent for (\d+) s is closed", PODS_BOUNDS.idle),
    ("security.md", r"the same idle limit and a cap of (\d+) connections", NODE_BOUNDS.connections),
    ("controller-tests.md", r"The relay holds at most (\d+) connections", PODS_BOUNDS.connections),
    ("controller-tests.md", r"connections, (\d+) from one pod", PODS_BOUNDS.per_peer),
    ("controller-tests.md", r"closes one silent for (\d+) s", PODS_BOUNDS.idle),
]


@pytest.mark.parametrize(("name", "pattern", "value"), QUOTED, ids=[q[1][:40] for q in QUOTED])
def test_a_number_the_docs_quote_is_the_codes(name: str, pattern: str, value: float) -> None:
    found = re.findall(pattern, page(name))
    assert found, f"docs/{name} no longer says /{pattern}/: keep this test in step with it"
    assert [float(WORDS.get(x, x)) for x in found] == [value] * len(found), f"docs/{name}"


# --- Kubernetes versions -----------------------------------------------------------------------


def test_the_kubernetes_versions_the_docs_name_are_the_ones_run() -> None:
    """The default the pages quote is the code's; the versions CI runs are those provision
    unpacks, and testing.md names each with the setting that picks it."""
    assert re.findall(r"`--kube-version` \| `([\d.]+)`", page("options.md")) == [
        DEFAULT_KUBE_VERSION
    ]
    assert f"v1.34 ({DEFAULT_KUBE_VERSION})" in (ROOT / "README.md").read_text()
    assert f"**v1.34** ({DEFAULT_KUBE_VERSION}, the default everywhere)" in page("testing.md")
    ci = (ROOT / ".ci" / "run").read_text()
    others = set(re.findall(r"KUBELET_SIM_TEST_KUBE_VERSION=([\d.]+) scripts/test", ci))
    unpacked = re.findall(
        r'unpack "\$xz_dir[^"]*" ([\d.]+)', (ROOT / "scripts/provision").read_text()
    )
    assert sorted(unpacked) == sorted(others | {DEFAULT_KUBE_VERSION})
    assert others == {"1.24.0"}, "docs/testing.md names v1.24 as the oldest supported"
    for version in others:
        assert f"KUBELET_SIM_TEST_KUBE_VERSION={version} scripts/test" in page("testing.md")


# --- options and paths --------------------------------------------------------------------------


def test_every_option_of_the_node_and_the_demo_is_in_the_options_page() -> None:
    import typer

    from kubelet_sim.cli.demo import demo_app
    from kubelet_sim.cli.node_command import app

    text = (DOCS / "options.md").read_text()
    missing = [
        option
        for command in (app, demo_app)
        for param in typer.main.get_command(command).params
        for option in param.opts
        if option.startswith("--") and f"`{option}`" not in text
    ]
    assert missing == []


# A path a page names in backquotes: from the repository's root, or inside kubelet_sim/.
_ROOTED = re.compile(r"`((?:kubelet_sim|tests|bench|deploy|scripts|examples|docs)/[^`\s<*{]*)`")
_IN_PACKAGE = re.compile(r"`([a-z_]+/[a-z_/]*[a-z_]+\.py)`")
# A module a page names, quoted or not: a file (`cli/node_command.py`, `waits.py`), a dotted
# module and what it holds (`kubelet_sim.testing.Cluster`, `runtime/observe.ContainerEvents`),
# a module run with `python -m`. Issue 42: the layer list named `cli/run.py` for a year.
_PY_FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.py)\b")
_DOTTED = re.compile(r"(?<![\w./-])(kubelet_sim(?:\.\w+)+)")
_SLASHED_ATTRIBUTE = re.compile(r"(?<![\w./-])((?:[a-z_]+/)+[a-z_]+)\.([A-Za-z_]\w*)\b")
_RUN_MODULE = re.compile(r"python -m ([\w.]+)")
# Where a module the docs name may live, from the repository's root.
_CODE_ROOTS = ("kubelet_sim", "tests", "bench", "scripts", "examples")
# The pages held to the code; CHANGELOG.md is history, and names modules since renamed.
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


def test_every_path_the_docs_name_exists() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    missing = []
    for doc in PAGES:
        text = doc.read_text()
        for path in _ROOTED.findall(text):
            if not (ROOT / path).exists():
                missing.append(f"{doc.name}: {path}")
        for path in _IN_PACKAGE.findall(text):
            if path.split("/")[0] in packages and not (PACKAGE / path).exists():
                missing.append(f"{doc.name}: kubelet_sim/{path}")
    assert missing == []


def _code_files() -> list[str]:
    """Every Python file of the repository, as a path from its root."""
    return [
        path.relative_to(ROOT).as_posix()
        for top in _CODE_ROOTS
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    ]


def _file_exists(path: str, files: list[str], within: str | None = None) -> bool:
    """`path` from the root, from kubelet_sim/, or (`within` a layer's folder) from that
    folder; with no folder given, any file whose path ends in it (`streaming/websocket.py` in
    a paragraph about server/) will do."""
    if (ROOT / path).is_file() or (PACKAGE / path).is_file():
        return True
    if within is not None:
        return (PACKAGE / within / path).is_file()
    return any(file == path or file.endswith(f"/{path}") for file in files)


def _holds(module: str, names: list[str]) -> bool:
    """Whether module `module` (dotted) exists and holds `names` one inside the other."""
    import importlib

    try:
        found: object = importlib.import_module(module)
    except ImportError:
        return False
    for name in names:
        if not hasattr(found, name):
            return False
        found = getattr(found, name)
    return True


def _dotted_exists(dotted: str) -> bool:
    """`kubelet_sim.a.b.Name`: the longest prefix that is a module, holding the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return _holds(".".join(parts[:cut]), parts[cut:])
    return False


def _layer_paths() -> Iterator[tuple[str, str]]:
    """Each module file the layer list names, with the folder of the layer it is named under
    (`run.py` under `cli/` is cli/run.py; under `validation, logs` the package's own)."""
    block = (DOCS / "architecture.md").read_text().split("## The layers", 1)[1].split("```", 2)[1]
    layer = ""
    for line in block.splitlines():
        match = _NAMES.match(line)
        if match:
            first = match.group().split(",")[0].strip()
            layer = first if first.endswith("/") else ""
        for path in _PY_FILE.findall(line):
            yield layer, path


def test_every_module_the_layer_list_names_is_in_its_layer() -> None:
    files = _code_files()
    missing = [
        f"{layer}{path}" for layer, path in _layer_paths() if not _file_exists(path, files, layer)
    ]
    assert missing == []


def test_every_module_the_docs_name_exists() -> None:
    """Files, dotted names and `python -m` modules, in every page, quoted or not."""
    files = _code_files()
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    missing = []
    for doc in PAGES:
        text = doc.read_text()
        missing += [
            f"{doc.name}: {path}"
            for path in _PY_FILE.findall(text)
            if not _file_exists(path, files)
        ]
        missing += [f"{doc.name}: {d}" for d in _DOTTED.findall(text) if not _dotted_exists(d)]
        missing += [
            f"{doc.name}: {path}.{name}"
            for path, name in _SLASHED_ATTRIBUTE.findall(text)
            if path.split("/")[0] in packages
            and name not in ("py", "md", "yaml", "json", "txt", "go", "sh")
            and not _dotted_exists(f"kubelet_sim.{path.replace('/', '.')}.{name}")
        ]
        missing += [
            f"{doc.name}: python -m {m}"
            for m in _RUN_MODULE.findall(text)
            if not _file_exists(m.replace(".", "/") + ".py", files)
            and not _file_exists(m.replace(".", "/") + "/__main__.py", files)
        ]
    assert missing == []


# --- the "to change X, start in Y" map of docs/architecture.md -------------------------------


def start_points() -> list[tuple[str, list[str]]]:
    """Each row of the map: what to change, and the paths it says to start in."""
    text = (DOCS / "architecture.md").read_text()
    table = text.split("## To change X, start in Y", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    return [
        (row.split(" | ")[0].removeprefix("| "), re.findall(r"`([^`]+)`", row.split(" | ", 1)[1]))
        for row in rows
    ]


def test_every_start_point_of_the_map_exists() -> None:
    """Each row names a path from kubelet_sim/ or from the root (`tests/`, `docs/`,
    `CHANGELOG.md`), or a command (`python -m x.y`) whose module exists."""
    rows = start_points()
    assert len(rows) >= 15, "the map lost its rows, or this test its table"
    missing = [f"{what}: names nothing" for what, paths in rows if not paths]
    for what, paths in rows:
        for path in paths:
            module = path.removeprefix("python -m ")
            found = (
                _dotted_exists(module)
                if module != path
                else (PACKAGE / path).exists() or (ROOT / path).exists()
            )
            if not found:
                missing.append(f"{what}: {path}")
    assert missing == []


# --- the public API's reference page ------------------------------------------------------------


def test_the_testing_reference_page_is_what_the_code_writes() -> None:
    """docs/testing-reference.md is generated: rewrite it with `python -m
    tests.testing_reference` after changing a public signature or docstring."""
    from tests.testing_reference import PAGE, render

    assert PAGE == DOCS / "testing-reference.md"
    assert PAGE.read_text() == render(), "stale: python -m tests.testing_reference"
