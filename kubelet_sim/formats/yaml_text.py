"""The one way to read YAML from a user's file (static pod manifests, `compare` scenarios):
PyYAML's safe loader, as the kubelet's converter reads YAML into JSON (a date stays a string),
without aliases. An alias is refused where it is met, before anything is expanded: a few
hundred bytes of nested aliases make gigabytes (a 459-byte manifest cost 1.9 s and 164 MiB).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml import YAMLError

__all__ = ["NO_ALIASES", "YAMLError", "error_line", "load", "load_all"]
NO_ALIASES = "YAML aliases are not allowed"


def _compose_without_aliases(loader: Any, parent: Any, index: Any) -> Any:
    """SafeLoader's compose_node, refusing an alias (`*name`, a merge `<<: *name` too)."""
    if loader.check_event(yaml.AliasEvent):
        mark = loader.peek_event().start_mark
        raise yaml.composer.ComposerError(None, None, NO_ALIASES, mark)
    return yaml.SafeLoader.compose_node(loader, parent, index)


_Loader: Any = type("_Loader", (yaml.SafeLoader,), {"compose_node": _compose_without_aliases})
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(text: str | bytes) -> Any:
    """One document; YAMLError if it is not YAML, RecursionError if nested too deeply."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader


def load_all(text: str | bytes) -> list[Any]:
    """Every document of a stream, as load reads one."""
    return list(yaml.load_all(text, Loader=_Loader))


def error_line(exc: YAMLError) -> str:
    """The error in one line: PyYAML's own spans several (the problem, then where)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
