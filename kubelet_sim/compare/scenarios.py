"""Scenarios: a pod manifest and how to observe it. Those shipped live in `builtin/`.

A scenario file is a plain Pod manifest (YAML or JSON), the same for the shipped ones and a
user's `--scenario FILE`. Optional annotations say how to observe it (they are removed from
the pods created):
- `compare.kubelet-sim.io/observe-seconds`: how long after its creation the pod is watched
  (default 45);
- `compare.kubelet-sim.io/delete-after`: delete the pod (with its own grace period) that many
  seconds after its creation, or `Running` once the API shows it Running;
- `compare.kubelet-sim.io/description`: one line for people;
- `compare.kubelet-sim.io/patch`: a strategic merge patch (JSON) of the pod, made
  `compare.kubelet-sim.io/patch-after` seconds after its creation or once `Running`, to the
  pod or to its subresource `compare.kubelet-sim.io/patch-subresource` (`resize`): a spec
  change the kubelet acts on (observedGeneration, in-place resize);
- `compare.kubelet-sim.io/since`: the Kubernetes minor version that brought what the scenario
  shows (`1.28` for sidecar containers): on an older API server (whose kubelets are older
  still) it is skipped, saying so.
`{image}` in a container's image is replaced by the image given (`--image`). Further documents
in the file (ConfigMaps, Secrets) are created in the namespace before the pods. The pod's name
is the scenario's name. Pure: no I/O but reading the files.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kubelet_sim.formats import yaml_text
from kubelet_sim.formats.jsontypes import Json

PREFIX = "compare.kubelet-sim.io/"
OBSERVE = f"{PREFIX}observe-seconds"
DELETE_AFTER = f"{PREFIX}delete-after"
DESCRIPTION = f"{PREFIX}description"
SINCE = f"{PREFIX}since"
PATCH = f"{PREFIX}patch"
PATCH_AFTER = f"{PREFIX}patch-after"
PATCH_SUBRESOURCE = f"{PREFIX}patch-subresource"
SUBRESOURCES = ("", "resize")
DEFAULT_OBSERVE = 45.0
MAX_OBSERVE = 3600.0
WHEN_RUNNING = "Running"
IMAGE_PLACEHOLDER = "{image}"
# Room in a pod's name for `-<side>-<run>` after the scenario's name (a label is 63 at most).
MAX_NAME = 50
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
OBJECT_KINDS = {"ConfigMap": "configmaps", "Secret": "secrets"}  # beside the pod, in v1
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


class ScenarioError(ValueError):
    """A scenario file that cannot be used, with what is wrong in it."""


@dataclass(frozen=True)
class Scenario:
    name: str
    pod: Json  # the manifest as written, less the annotations above
    observe: float = DEFAULT_OBSERVE
    delete_after: float | str | None = None  # seconds after creation, `Running`, or never
    description: str = ""
    objects: tuple[Json, ...] = ()  # created in the namespace first
    source: str = "builtin"
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    since: int = 0  # the minor version (1.<since>) a kubelet needs to show it
    patch: Json | None = None  # made `patch_after` (seconds, or `Running`) to `subresource`
    patch_after: float | str | None = None
    patch_subresource: str = ""


def _since(value: str, source: str) -> int:
    major, _, minor = value.strip().lstrip("v").partition(".")
    if major != "1" or not minor.isdigit():
        raise ScenarioError(f"{source}: {SINCE} must be a version like 1.28, not {value!r}")
    return int(minor)


def _number(value: str, what: str, source: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ScenarioError(
            f"{source}: {what} must be a number of seconds, not {value!r}"
        ) from None
    if not 0 <= seconds <= MAX_OBSERVE:
        raise ScenarioError(f"{source}: {what} must be between 0 and {MAX_OBSERVE:.0f} s")
    return seconds


def parse_scenario(text: str, source: str) -> Scenario:
    """A scenario from a file's text (YAML or JSON, one Pod and maybe ConfigMaps/Secrets)."""
    try:
        documents = [doc for doc in yaml_text.load_all(text) if doc is not None]
    except yaml_text.YAMLError as exc:
        raise ScenarioError(f"{source}: not YAML or JSON: {yaml_text.error_line(exc)}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: not YAML or JSON: nested too deeply") from None
    for doc in documents:
        _check_shape(doc, source)
    pods = [doc for doc in documents if doc.get("kind", "Pod") == "Pod"]
    if len(pods) != 1:
        raise ScenarioError(f"{source}: needs exactly one Pod, found {len(pods)}")
    objects = []
    for doc in documents:
        kind = doc.get("kind", "Pod")
        if kind == "Pod":
            continue
        if kind not in OBJECT_KINDS or not (doc.get("metadata") or {}).get("name"):
            raise ScenarioError(
                f"{source}: beside the pod only named {' and '.join(OBJECT_KINDS)}s, not {kind}"
            )
        objects.append(_without_server_fields(doc))
    pod = _without_server_fields(pods[0])
    meta: Json = pod.setdefault("metadata", {})
    name = str(meta.get("name") or Path(source).stem)
    if not _NAME.match(name) or len(name) > MAX_NAME:
        raise ScenarioError(
            f"{source}: the pod's name {name!r} must be lowercase letters, digits and '-',"
            f" at most {MAX_NAME} characters"
        )
    if not (pod.get("spec") or {}).get("containers"):
        raise ScenarioError(f"{source}: the pod has no containers")
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    ours = {k: v for k, v in annotations.items() if k.startswith(PREFIX)}
    unknown = set(ours) - {OBSERVE, DELETE_AFTER, DESCRIPTION, SINCE, PATCH, PATCH_AFTER}
    unknown -= {PATCH_SUBRESOURCE}
    if unknown:
        raise ScenarioError(f"{source}: unknown annotations {sorted(unknown)}")
    rest = {k: v for k, v in annotations.items() if k not in ours}
    if rest:
        meta["annotations"] = rest
    else:
        meta.pop("annotations", None)
    meta["name"] = name
    delete_after = _when(ours, DELETE_AFTER, source)
    patch = _patch(ours, source)
    observe = _number(ours.get(OBSERVE, str(DEFAULT_OBSERVE)), OBSERVE, source)
    return Scenario(
        name=name,
        pod=pod,
        observe=observe,
        delete_after=delete_after,
        description=ours.get(DESCRIPTION, ""),
        objects=tuple(objects),
        source=source,
        annotations=ours,
        since=_since(ours[SINCE], source) if SINCE in ours else 0,
        patch=patch,
        patch_after=_when(ours, PATCH_AFTER, source) if patch is not None else None,
        patch_subresource=ours.get(PATCH_SUBRESOURCE, ""),
    )


def _check_shape(doc: object, source: str) -> None:
    """Each document an object whose metadata, annotations and spec are of the types the API
    takes, so that a malformed file is one line of error, never a traceback."""
    if not isinstance(doc, dict):
        raise ScenarioError(f"{source}: every document must be an object")
    for key in ("metadata", "spec"):
        if not isinstance(doc.get(key) or {}, dict):
            raise ScenarioError(f"{source}: {key} must be an object")
    meta = doc.get("metadata") or {}
    if not isinstance(meta.get("name") or "", str):
        raise ScenarioError(f"{source}: metadata.name must be a string")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(v, str | int | float) for v in annotations.values()
    ):
        raise ScenarioError(f"{source}: metadata.annotations must map names to strings")
    containers = (doc.get("spec") or {}).get("containers") or []
    if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        raise ScenarioError(f"{source}: spec.containers must be a list of objects")


def _when(ours: dict[str, str], key: str, source: str) -> float | str | None:
    """Seconds after the pod's creation, `Running`, or None where the annotation is absent."""
    if key not in ours:
        return None
    value = ours[key].strip()
    if value.lower() == WHEN_RUNNING.lower():
        return WHEN_RUNNING
    return _number(value, key, source)


def _patch(ours: dict[str, str], source: str) -> Json | None:
    if PATCH not in ours:
        if PATCH_AFTER in ours or PATCH_SUBRESOURCE in ours:
            raise ScenarioError(f"{source}: {PATCH_AFTER} and {PATCH_SUBRESOURCE} need {PATCH}")
        return None
    if PATCH_AFTER not in ours:
        raise ScenarioError(f"{source}: {PATCH} needs {PATCH_AFTER} (seconds or Running)")
    if ours.get(PATCH_SUBRESOURCE, "") not in SUBRESOURCES:
        raise ScenarioError(f"{source}: {PATCH_SUBRESOURCE} may only be resize")
    try:
        patch = json.loads(ours[PATCH])
    except ValueError:
        raise ScenarioError(f"{source}: {PATCH} must be a JSON object") from None
    if not isinstance(patch, dict):
        raise ScenarioError(f"{source}: {PATCH} must be a JSON object")
    return patch


def _without_server_fields(doc: Json) -> Json:
    """A copy without what the server owns (status, uid, resourceVersion, …): a manifest
    taken from `kubectl get -o yaml` works as a scenario."""
    doc = copy.deepcopy(doc)
    doc.pop("status", None)
    meta: Json = doc.get("metadata") or {}
    for key in ("uid", "resourceVersion", "creationTimestamp", "namespace", "generation"):
        meta.pop(key, None)
    meta.pop("managedFields", None)
    meta.pop("ownerReferences", None)
    return doc


def load_scenario_file(path: str | Path) -> Scenario:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"cannot read scenario {path}: not UTF-8 text") from None
    return parse_scenario(text, str(path))


def _builtin_files() -> list[Any]:
    folder = resources.files(__package__ or "kubelet_sim.compare") / "builtin"
    return sorted(
        (item for item in folder.iterdir() if item.name.endswith((".yaml", ".json"))),
        key=lambda item: item.name,
    )


def builtin_scenarios() -> list[Scenario]:
    """Every scenario shipped with the package, by file name."""
    return [parse_scenario(item.read_text(), f"builtin/{item.name}") for item in _builtin_files()]


def builtin_names() -> list[str]:
    return [scenario.name for scenario in builtin_scenarios()]


def resolve(specs: Sequence[str]) -> list[Scenario]:
    """`--scenario` values: each the name of a shipped scenario or a file; none: all shipped."""
    shipped = {scenario.name: scenario for scenario in builtin_scenarios()}
    if not specs:
        return list(shipped.values())
    chosen = []
    for spec in specs:
        if spec in shipped and not Path(spec).exists():
            chosen.append(shipped[spec])
        elif Path(spec).exists():
            chosen.append(load_scenario_file(spec))
        else:
            raise ScenarioError(
                f"no scenario {spec!r}: neither a file nor one of {', '.join(shipped)}"
            )
    names = [scenario.name for scenario in chosen]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ScenarioError(f"two scenarios named {', '.join(twice)} (the pod's name)")
    return chosen


def tolerations_for(taints: Iterable[Json]) -> list[Json]:
    """A toleration of each taint (any value), so a pinned pod is never refused nor evicted."""
    seen: list[Json] = []
    for taint in taints:
        toleration: Json = {"key": taint.get("key"), "operator": "Exists"}
        if taint.get("effect"):
            toleration["effect"] = taint["effect"]
        if toleration not in seen:
            seen.append(toleration)
    return seen


def pod_for(
    scenario: Scenario,
    *,
    name: str,
    node: str,
    image: str,
    tolerations: Sequence[Json] = (),
    labels: dict[str, str] | None = None,
) -> Json:
    """The pod to create: the scenario's manifest named `name`, pinned to `node` (spec.nodeName),
    with `{image}` replaced and `tolerations` added to its own."""
    pod: Json = json.loads(json.dumps(scenario.pod))  # a deep copy, plain JSON types
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    meta: Json = pod.setdefault("metadata", {})
    meta["name"] = name
    if labels:
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
    spec: Json = pod.setdefault("spec", {})
    spec["nodeName"] = node
    for key in _CONTAINER_LISTS:
        for container in spec.get(key) or []:
            if isinstance(container.get("image"), str):
                container["image"] = container["image"].replace(IMAGE_PLACEHOLDER, image)
    own: list[Json] = list(spec.get("tolerations") or [])
    spec["tolerations"] = own + [t for t in tolerations if t not in own]
    if not spec["tolerations"]:
        del spec["tolerations"]
    return pod
