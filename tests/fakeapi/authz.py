"""Authorization as a real server does it for a kubelet's credentials: the Node authorizer and
the NodeRestriction admission plugin, for the requests a node agent makes.

Users named `system:node:<name>` get only what `plugin/pkg/auth/authorizer/node` grants: its
static rules (NodeRules), and ConfigMaps, Secrets and ServiceAccount tokens only through the
pods bound to that node (the authorizer's graph). NodeRestriction then limits writes to the
node's own Node, Lease and pods. Every other user may do everything (an admin).
"""

from __future__ import annotations

from typing import Any

from tests.fakeapi.errors import ApiError
from tests.fakeapi.routes import Route
from tests.fakeapi.store import Store

Obj = dict[str, Any]

NODE_USER = "system:node:"
NODE_LEASE_NAMESPACE = "kube-node-lease"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# NodeRules (plugin/pkg/auth/authorizer/node/node_authorizer.go → bootstrappolicy.NodeRules),
# for the resources the fake serves: (resource, subresource) → verbs.
STATIC_RULES: dict[tuple[str, str], frozenset[str]] = {
    ("nodes", ""): frozenset({"create", "get", "list", "watch", "update", "patch"}),
    ("nodes", "status"): frozenset({"update", "patch"}),
    ("pods", ""): frozenset({"get", "list", "watch", "create", "delete"}),
    ("pods", "status"): frozenset({"update", "patch"}),
    ("events", ""): frozenset({"create", "update", "patch"}),
    ("services", ""): frozenset({"get", "list", "watch"}),
    ("leases", ""): frozenset({"get", "create", "update", "patch", "delete"}),
    ("tokenreviews", ""): frozenset({"create"}),
    ("subjectaccessreviews", ""): frozenset({"create"}),
}
GRAPH_VERBS = frozenset({"get", "list", "watch"})


def check(user: str | None, route: Route, params: dict[str, str], body: Any, store: Store) -> None:
    """Raise the 403 a real server answers, or return if the request is allowed."""
    if not user or not user.startswith(NODE_USER) or route.resource is None:
        return
    node = user[len(NODE_USER) :]
    res, sub, verb = route.resource.name, route.sub or "", route.verb
    name = route.name or _name_from_selector(params.get("fieldSelector"))
    if res in ("configmaps", "secrets"):
        if not name:
            raise _forbidden(user, route, ": No Object name found")
        if verb in GRAPH_VERBS and _referenced(store, node, route.namespace, res, name):
            return
        raise _forbidden(
            user, route, f": no relationship found between node '{node}' and this object"
        )
    if res == "serviceaccounts" and sub == "token" and verb == "create":
        if _uses_account(store, node, route.namespace or "", route.name or ""):
            return
        raise _forbidden(
            user, route, f": no relationship found between node '{node}' and this object"
        )
    if verb not in STATIC_RULES.get((res, sub), frozenset()):
        raise _forbidden(user, route)
    if isinstance(body, dict) and route.verb == "create" and route.name is None:
        name = ((body.get("metadata") or {}).get("name")) or None
    if res == "pods" and verb == "create" and not sub:
        _admit_pod_create(node, route, body, store)
    _restrict(node, route, name, store)


def _restrict(node: str, route: Route, name: str | None, store: Store) -> None:
    """NodeRestriction admission: writes only to the node's own objects."""
    res, verb = route.resource.name if route.resource else "", route.verb
    if verb in ("get", "list", "watch"):
        return
    if res == "nodes" and name not in (None, node):
        raise _refused(route, name, f'node "{node}" is not allowed to modify node "{name}"')
    if res == "leases" and (route.namespace != NODE_LEASE_NAMESPACE or name not in (None, node)):
        why = "can only access node lease with the same name as the requesting node"
        raise _refused(route, name, why)
    if res == "pods" and name is not None:
        pod = store.get("pods", route.namespace or "", name)
        bound = ((pod or {}).get("spec") or {}).get("nodeName")
        if pod is not None and bound != node:
            action = "update pod status for pods" if route.sub == "status" else f"{verb} pods"
            why = f'node "{node}" can only {action} with spec.nodeName set to itself'
            raise _refused(route, name, why)


def _admit_pod_create(node: str, route: Route, body: Any, store: Store) -> None:
    """NodeRestriction's admitPodCreate: a node creates only mirror pods, bound to itself,
    owned by its Node (one controller reference with its UID), referring to no other object."""
    pod = body if isinstance(body, dict) else {}
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name") or None
    if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
        why = f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only'
        raise _refused(route, name, f"{why} create mirror pods")
    if spec.get("nodeName") != node:
        why = f'node "{node}" can only create pods with spec.nodeName set to itself'
        raise _refused(route, name, why)
    owners = meta.get("ownerReferences") or []
    if len(owners) > 1:
        why = f'node "{node}" can only create pods with a single owner reference set to itself'
        raise _refused(route, name, why)
    if owners:
        owner = owners[0]
        if (owner.get("apiVersion"), owner.get("kind"), owner.get("name")) != ("v1", "Node", node):
            why = f'node "{node}" can only create pods with an owner reference set to itself'
            raise _refused(route, name, why)
        if not owner.get("controller"):
            why = f'node "{node}" can only create pods with a controller owner reference set to'
            raise _refused(route, name, f"{why} itself")
        if owner.get("blockOwnerDeletion"):
            why = f'node "{node}" must not set blockOwnerDeletion on an owner reference'
            raise _refused(route, name, why)
        node_uid = ((store.get("nodes", "", node) or {}).get("metadata") or {}).get("uid")
        if owner.get("uid") != node_uid:
            why = f"node {node} UID mismatch: expected {owner.get('uid')} got {node_uid}"
            raise _refused(route, name, why)
    if spec.get("serviceAccountName"):
        why = f'node "{node}" can not create pods that reference a service account'
        raise _refused(route, name, why)
    for kind, what in (("secret", "secrets"), ("configMap", "configmaps")):
        if _references(pod, kind):
            why = f'node "{node}" can not create pods that reference {what}'
            raise _refused(route, name, why)
    if any("persistentVolumeClaim" in v for v in spec.get("volumes") or []):
        why = f'node "{node}" can not create pods that reference persistentvolumeclaims'
        raise _refused(route, name, why)


def _refused(route: Route, name: str | None, why: str) -> ApiError:
    """An admission plugin's refusal, worded as admission.NewForbidden words it."""
    assert route.resource is not None
    subject = f'{route.resource.qualified} "{name}"' if name else route.resource.qualified
    return ApiError(403, f"{subject} is forbidden: {why}", "Forbidden")


def _name_from_selector(selector: str | None) -> str | None:
    """A list or watch of one object by `metadata.name=` is authorized as a get of it."""
    for term in (selector or "").split(","):
        key, _, value = term.partition("=")
        if key.strip() == "metadata.name" and value:
            return value.lstrip("=").strip()
    return None


def _pods_on(store: Store, node: str, namespace: str | None) -> list[Obj]:
    return [
        p
        for p in store.list_objects("pods", namespace)
        if (p.get("spec") or {}).get("nodeName") == node
    ]


def _referenced(store: Store, node: str, namespace: str | None, res: str, name: str) -> bool:
    kind = "configMap" if res == "configmaps" else "secret"
    return any(name in _references(pod, kind) for pod in _pods_on(store, node, namespace))


def _uses_account(store: Store, node: str, namespace: str, account: str) -> bool:
    for pod in _pods_on(store, node, namespace):
        spec = pod.get("spec") or {}
        if (spec.get("serviceAccountName") or spec.get("serviceAccount") or "default") == account:
            return True
    return False


def _references(pod: Obj, kind: str) -> set[str]:
    """Names of the ConfigMaps (`configMap`) or Secrets (`secret`) a pod refers to."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    name_key = "name" if kind == "configMap" else "secretName"
    for volume in spec.get("volumes") or []:
        if kind in volume:
            names.add(volume[kind].get(name_key) or volume[kind].get("name") or "")
        for source in (volume.get("projected") or {}).get("sources") or []:
            if kind in source:
                names.add(source[kind].get("name") or "")
    if kind == "secret":
        names.update(s.get("name", "") for s in spec.get("imagePullSecrets") or [])
    containers = [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]
    ref_key = f"{kind}KeyRef"
    env_key = f"{kind}Ref"
    for c in containers:
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get(ref_key)
            if ref:
                names.add(ref.get("name", ""))
        for source in c.get("envFrom") or []:
            if env_key in source:
                names.add(source[env_key].get("name", ""))
    names.discard("")
    return names


def _forbidden(user: str, route: Route, why: str = "") -> ApiError:
    res = route.resource
    assert res is not None
    resource = f"{res.name}/{route.sub}" if route.sub else res.name
    subject = f'{res.qualified} "{route.name}"' if route.name else res.qualified
    namespace = route.namespace or (route.name if res.name == "namespaces" else None)
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return ApiError(
        403,
        f'{subject} is forbidden: User "{user}" cannot {route.verb} resource "{resource}" '
        f'in API group "{res.group}" {scope}{why}',
        "Forbidden",
        {"name": route.name, "kind": res.name} if route.name else {"kind": res.name},
    )
