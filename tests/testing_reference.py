"""docs/testing-reference.md, written from the public API's own signatures and docstrings (each
public name's, where kubelet_sim/testing/__init__.py imports it from).

`python -m tests.testing_reference` rewrites the page; tests/unit/project/test_docs.py fails
when the committed page is not what this writes, so the reference cannot drift from
kubelet_sim/testing/.
Its source is read with `ast`, nothing imported: the page needs neither pytest nor the cluster's
dependencies, and 200 lines here spare the docs site a plugin (mkdocstrings) and its
dependencies for one page. In tests/, as the fake's schema generator (tests/fakeapi/openapi.py):
every module of the package serves the command (tests/project/test_architecture.py).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "kubelet_sim" / "testing"
PAGE = ROOT / "docs" / "testing-reference.md"
GENERATED = (
    "<!-- Written by `python -m tests.testing_reference` from kubelet_sim/testing/'s"
    " signatures and docstrings: edit those, not this page (tests/unit/project/test_docs.py fails"
    " when it is stale). -->"
)
LINE = 96  # a signature longer than this is written one parameter a line


@dataclass(frozen=True)
class Option:
    """One of the plugin's command-line options, as its `addoption` call declares it."""

    name: str
    metavar: str
    default: str
    help: str


def _module(name: str) -> ast.Module:
    return ast.parse((HERE / name).read_text(), name)


def _doc(node: ast.Module | ast.ClassDef | ast.FunctionDef) -> str:
    doc = ast.get_docstring(node)
    if doc is None:
        raise ValueError(f"{getattr(node, 'name', 'the module')}: public, so it needs a docstring")
    return doc


def _public_names(init: ast.Module) -> list[str]:
    """`__all__` of kubelet_sim/testing/__init__.py, the public declaration."""
    for node in init.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            names = ast.literal_eval(node.value)
            assert isinstance(names, list)
            return [str(name) for name in names]
    raise ValueError("kubelet_sim/testing/__init__.py declares no __all__")


def _constants(module: ast.Module) -> dict[str, ast.expr]:
    """The module's `NAME = literal` lines, so that a default reads as its value."""
    found: dict[str, ast.expr] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            found.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def _parameters(arguments: ast.arguments, constants: dict[str, ast.expr]) -> list[str]:
    """Each parameter as the source writes it (`self` left out), a constant default by value."""

    def one(argument: ast.arg, default: ast.expr | None, star: str = "") -> str:
        text = star + argument.arg
        if argument.annotation is not None:
            text += f": {ast.unparse(argument.annotation)}"
        if default is not None:
            value = constants.get(default.id, default) if isinstance(default, ast.Name) else default
            text += f" = {ast.unparse(value)}"
        return text

    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + [*arguments.defaults]
    found = [one(a, d) for a, d in zip(positional, defaults, strict=True) if a.arg != "self"]
    if arguments.vararg is not None:
        found.append(one(arguments.vararg, None, "*"))
    elif arguments.kwonlyargs:
        found.append("*")
    found += [one(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)]
    if arguments.kwarg is not None:
        found.append(one(arguments.kwarg, None, "**"))
    return found


def _signature(function: ast.FunctionDef, name: str, constants: dict[str, ast.expr]) -> str:
    """`name(parameters) -> returns`, one parameter a line when they do not fit on one."""
    parameters = _parameters(function.args, constants)
    returns = "" if function.returns is None else f" -> {ast.unparse(function.returns)}"
    line = f"{name}({', '.join(parameters)}){returns}"
    if len(line) <= LINE:
        return line
    inner = "".join(f"    {parameter},\n" for parameter in parameters)
    return f"{name}(\n{inner}){returns}"


def _class_section(node: ast.ClassDef, constants: dict[str, ast.expr]) -> list[str]:
    """A class: its constructor's signature, its docstring, then each public method's."""
    bases = ", ".join(ast.unparse(base) for base in node.bases)
    methods = [item for item in node.body if isinstance(item, ast.FunctionDef)]
    init = next((m for m in methods if m.name == "__init__"), None)
    heading = f"{node.name}({bases})"
    if init is not None:
        heading = _signature(init, node.name, constants).removesuffix(" -> None")
    lines = [f"## `{node.name}`", "", "```python", f"class {heading}", "```", "", _doc(node), ""]
    for method in methods:
        if method.name.startswith("_"):
            continue
        lines += [f"### `{node.name}.{method.name}`", ""]
        lines += ["```python", _signature(method, method.name, constants), "```", ""]
        lines += [_doc(method), ""]
    return lines


def _function_section(node: ast.FunctionDef, constants: dict[str, ast.expr]) -> list[str]:
    """A function: its signature, then its docstring."""
    lines = [f"## `{node.name}`", "", "```python", _signature(node, node.name, constants), "```"]
    return [*lines, "", _doc(node), ""]


def _definitions(init: ast.Module) -> dict[str, ast.Module]:
    """Each name `__init__.py` imports for type checks (the public names among them) → the
    parsed module that defines it, in the package: `kubelet_sim.testing.cluster` → cluster.py."""
    found = {}
    checking = [
        n for n in init.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    for node in (statement for block in checking for statement in block.body):
        if isinstance(node, ast.ImportFrom) and node.module:
            path = ROOT.joinpath(*node.module.split(".")).with_suffix(".py")
            module = ast.parse(path.read_text(), str(path))
            found.update({alias.name: module for alias in node.names})
    return found


def _fixtures(plugin: ast.Module) -> list[tuple[str, str, ast.FunctionDef]]:
    """The plugin's fixtures: name, scope and definition, in the order of the file."""
    found = []
    for node in plugin.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if ast.unparse(target) == "pytest.fixture":
                scopes = [k.value for k in (call.keywords if call else []) if k.arg == "scope"]
                scope = ast.literal_eval(scopes[0]) if scopes else "function"
                found.append((node.name, str(scope), node))
    return found


def _options(plugin: ast.Module) -> list[Option]:
    """What each `addoption` call in the plugin's `pytest_addoption` declares."""
    options = []
    for node in ast.walk(plugin):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "addoption"
        ):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        action = keywords.get("action")
        flag = action is not None and ast.literal_eval(action) == "store_true"
        metavar = keywords.get("metavar")
        default = keywords.get("default")
        options.append(
            Option(
                name=str(ast.literal_eval(node.args[0])),
                metavar="" if flag or metavar is None else str(ast.literal_eval(metavar)),
                default="" if flag or default is None else ast.unparse(default),
                help=str(ast.literal_eval(keywords["help"])),
            )
        )
    return options


def render() -> str:
    """The page, from the code as it is now."""
    init = _module("__init__.py")
    plugin = _module("plugin.py")
    lines = ["# Reference: kubelet_sim.testing", "", GENERATED, "", _doc(init), ""]
    lines += ["## Fixtures", ""]
    for name, scope, fixture in _fixtures(plugin):
        lines += [f"### `{name}`", "", f"Scope: {scope}.", "", _doc(fixture), ""]
    lines += ["## Options", "", "| Option | Default | What it does |", "| --- | --- | --- |"]
    for option in _options(plugin):
        usage = f"`{option.name} {option.metavar}`" if option.metavar else f"`{option.name}`"
        default = f"`{option.default}`" if option.default else ""
        lines.append(f"| {usage} | {default} | {option.help} |")
    lines.append("")
    modules = _definitions(init)
    for name in _public_names(init):
        module = modules[name]
        node = next(n for n in module.body if getattr(n, "name", None) == name)
        if isinstance(node, ast.ClassDef):
            lines += _class_section(node, _constants(module))
        else:
            assert isinstance(node, ast.FunctionDef), f"{name}: a class or a function"
            lines += _function_section(node, _constants(module))
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    """Write the page; say whether it changed."""
    text = render()
    changed = not PAGE.exists() or PAGE.read_text() != text
    PAGE.write_text(text)
    sys.stdout.write(f"{PAGE}: {'written' if changed else 'unchanged'}\n")


if __name__ == "__main__":
    main()
