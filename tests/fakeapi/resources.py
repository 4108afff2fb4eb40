"""The resources the fake serves and their static properties."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """A REST resource (plural name) with what routing and strategies need to know."""

    name: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()
    has_status: bool = False  # main resource ignores .status, /status changes only .status
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """`apiVersion` of the objects of this resource."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """Resource name as error messages spell it (`leases.coordination.k8s.io`)."""
        return f"{self.name}.{self.group}" if self.group else self.name

    @property
    def list_kind(self) -> str:
        """`kind` of a list response."""
        return f"{self.kind}List"


PODS = Resource(
    "pods",
    "Pod",
    subresources=frozenset(
        {
            "status",
            "binding",
            "exec",
            "attach",
            "portforward",
            "log",
            "ephemeralcontainers",
            "resize",  # v1.33+ servers only (routes.py)
        }
    ),
    has_status=True,
)
NAMESPACES = Resource(
    "namespaces",
    "Namespace",
    namespaced=False,
    subresources=frozenset({"status"}),
    has_status=True,
)
NODES = Resource(
    "nodes", "Node", namespaced=False, subresources=frozenset({"status"}), has_status=True
)
CONFIGMAPS = Resource("configmaps", "ConfigMap")
SECRETS = Resource("secrets", "Secret")
EVENTS = Resource("events", "Event")
BINDINGS = Resource("bindings", "Binding")
LEASES = Resource("leases", "Lease", group="coordination.k8s.io")
SERVICEACCOUNTS = Resource("serviceaccounts", "ServiceAccount", subresources=frozenset({"token"}))
SERVICES = Resource(
    "services", "Service", subresources=frozenset({"status"}), has_status=True, short_names=("svc",)
)
ENDPOINTSLICES = Resource("endpointslices", "EndpointSlice", group="discovery.k8s.io")
# Stored as any object (authorization reads none of them: see authz.py); the testing kit
# grants its nodes kube-proxy's role with one and removes it if it made it.
CLUSTERROLEBINDINGS = Resource(
    "clusterrolebindings", "ClusterRoleBinding", group="rbac.authorization.k8s.io", namespaced=False
)
# Create-only reviews: answered, never stored (as the real server's).
TOKENREVIEWS = Resource(
    "tokenreviews", "TokenReview", group="authentication.k8s.io", namespaced=False
)
SUBJECTACCESSREVIEWS = Resource(
    "subjectaccessreviews", "SubjectAccessReview", group="authorization.k8s.io", namespaced=False
)
REVIEWS = (TOKENREVIEWS, SUBJECTACCESSREVIEWS)

ALL: tuple[Resource, ...] = (
    PODS,
    NAMESPACES,
    NODES,
    CONFIGMAPS,
    SECRETS,
    EVENTS,
    LEASES,
    SERVICEACCOUNTS,
    SERVICES,
    ENDPOINTSLICES,
    CLUSTERROLEBINDINGS,
)

BY_GROUP: dict[tuple[str, str], Resource] = {
    (r.group, r.name): r for r in (*ALL, BINDINGS, *REVIEWS)
}


def lookup(group: str, name: str) -> Resource | None:
    """Find a resource by API group and plural name."""
    return BY_GROUP.get((group, name))
