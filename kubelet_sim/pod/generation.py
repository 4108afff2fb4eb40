"""Which kubelet's status rules the node follows: the one of its API server's minor version.

A kubelet is never newer than its API server (the version skew policy), so on a v1.24 server
a user diffing our pods against a real node's compares with a v1.24 kubelet, and the rules
that changed since must be that kubelet's. Each rule says the version that brought it, and
what `kubelet-sim compare` showed of it on the rig's two real kubelets, v1.24 and v1.34.9
(docs/compare.md); the version between them where a rule begins is read from the sources,
not seen: no kubelet of v1.25 to v1.33 has been compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubelet_sim.formats.versions import server_minor

LATEST = 99  # a server whose version says nothing: today's rules


@dataclass(frozen=True)
class KubeletGeneration:
    minor: int = LATEST

    @property
    def ready_to_start_condition(self) -> bool:
        """The PodReadyToStartContainers condition (beta and on by default in v1.29). Seen:
        written by the v1.34 kubelet in every scenario, never by the v1.24 one."""
        return self.minor >= 29

    @property
    def terminal_phase(self) -> bool:
        """v1.27: a pod the node finished (deleted, or killed for good) ends Succeeded or
        Failed, Ready and ContainersReady say PodFailed for a Failed pod, and TerminatePod
        defaults only the containers that could have run. Before, a deleted pod kept its
        phase (Running), readiness came from the containers alone, and TerminatePod gave
        every container without an end ContainerStatusUnknown. Seen: `sigterm-ignored` ends
        Failed with Ready False/PodFailed on v1.34; `init-fails-never` ends with the app
        container `terminated: ContainerStatusUnknown (137)` on v1.24 (5 of 5 runs) and
        `waiting: PodInitializing` on v1.34."""
        return self.minor >= 27

    @property
    def kube_proxy_version(self) -> bool:
        """Until v1.30 the kubelet wrote its own version as nodeInfo.kubeProxyVersion; since
        v1.31 (DisableNodeKubeProxyVersion) it leaves it empty (the rig's v1.24 kubelet writes
        it, its v1.34 one does not)."""
        return self.minor <= 30

    @property
    def sidecars(self) -> bool:
        """v1.28 (sidecar containers): `started` on init container statuses, and a pod whose
        regular containers have run is Initialized whatever its init containers say. Seen:
        `started: false` on init containers on v1.34, no `started` on v1.24 (the Initialized
        part is not in a shipped scenario)."""
        return self.minor >= 28

    @property
    def in_place_resize(self) -> bool:
        """InPlacePodVerticalScaling, beta and on by default in v1.33: the `resize` subresource
        changes a running pod's resources, and the kubelet decides and applies it
        (pod/resize.py). Before, the API server keeps resources immutable."""
        return self.minor >= 33

    @property
    def spam_key_by_type(self) -> bool:
        """v1.32 (client-go's tools/record/events_cache.go getSpamKey): the recorder's spam
        filter (25 events at once per object, then one per 5 minutes) keeps a bucket per
        event type, so Warnings (BackOff, Unhealthy, MissingClusterDNS) no longer use up the
        Normal events' tokens, nor Normals theirs. Before, one bucket per object. Seen: the
        v1.34 kubelet gave one `liveness-fails` pod 25 Warnings (BackOff among them) and 20
        Normals; the v1.24 kubelet 25 events in all."""
        return self.minor >= 32

    @property
    def terminal_phase_after_termination(self) -> bool:
        """status_manager.go mergePodStatus: a write that would take the pod's phase in the API
        from Pending or Running to Succeeded or Failed keeps the API's phase, reason and
        message while the pod worker could still have running containers (until its
        SyncTerminatingPod has returned); the terminal phase goes out with the terminated
        sync's status (sandbox down: PodReadyToStartContainers False). Seen on the v1.34
        kubelet (exit 0 and 1 under Never, a failed init container, an OOM kill, a deadline);
        the v1.24 kubelet of the rig wrote the terminal phase at once."""
        return self.minor >= 27


CURRENT = KubeletGeneration()


def generation_of(git_version: str | None, knows: set[str] | None = None) -> KubeletGeneration:
    """From the server's /version gitVersion ("v1.24.3"); a build that stamped none
    ("v0.0.0-master") is placed by the status fields its schema knows (`knows`:
    "Definition.property" names; formats/versions.py)."""
    minor = server_minor(git_version, lambda: knows or set())
    # Nothing read: assume a current server, as the schema's pruning does.
    return CURRENT if minor is None else KubeletGeneration(minor)
