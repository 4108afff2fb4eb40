"""REST semantics on top of the store: the strategies of the real registry, per resource."""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.fakeapi import controllers, defaults, errors, openapi, patch, resources, services
from tests.fakeapi.errors import ApiError
from tests.fakeapi.resources import NAMESPACES, NODES, PODS, Resource
from tests.fakeapi.store import Store

Obj = dict[str, Any]

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC)
CREATE_ON_UPDATE = frozenset({"events", "leases"})  # AllowCreateOnUpdate() in their strategies
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


def now(offset: float = 0) -> str:
    """RFC 3339 at seconds precision, like metav1.Time."""
    moment = datetime.now(UTC) + timedelta(seconds=go_seconds(offset))
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def go_seconds(seconds: float) -> float:
    """`time.Duration(seconds) * time.Second` as Go computes it: int64 nanoseconds that wrap.
    A real v1.24 server marks a pod deleted with a grace of 10**10 s in 1759, and one of
    2**63 - 1 s a second ago; so does the fake."""
    nanos = (int(seconds) * 10**9 + 2**63) % 2**64 - 2**63
    return nanos / 10**9


def typed(res: Resource, obj: Obj) -> Obj:
    """The object as served alone: `kind` and `apiVersion` first."""
    return {"kind": res.kind, "apiVersion": res.api_version, **obj}


def success_status(res: Resource, obj: Obj, code: int | None = None) -> Obj:
    """The `Status` a delete (or a binding) answers with when it does not return the object."""
    status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if code is not None:
        status["code"] = code
        return status
    meta = obj.get("metadata", {})
    details: Obj = {"name": meta.get("name", "")}
    if res.group:
        details["group"] = res.group
    details.update({"kind": res.name, "uid": meta.get("uid", "")})
    status["details"] = details
    return status


def _untyped(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


class Registry:
    """Create/get/list/update/patch/delete with the real server's rules."""

    def __init__(self, store: Store, types: openapi.Schema) -> None:
        self.cluster_ips = services.ClusterIPs()
        self.store = store
        self.types = types  # the server version's schema: what a write is decoded into

    # --- create -----------------------------------------------------------------------------

    def create(self, res: Resource, namespace: str, body: Any) -> Obj:
        """POST: name generation, defaulting/admission, validation, server-owned metadata."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj = self._decoded(res, _untyped(copy.deepcopy(body)))
        meta = _meta(obj)
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"][:58] + defaults.random_suffix()
        with self.store.lock:
            if res.namespaced:
                self._check_namespace(namespace)
            self._admit_create(res, obj)
            name = meta.get("name") or ""
            if self.store.get(res.name, namespace if res.namespaced else "", name) is not None:
                raise errors.already_exists(res, name)
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                meta.pop(key, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta.pop("generation", None)
            if res is PODS and self.types.minor >= 33:  # v1.24 keeps none for pods
                meta["generation"] = 1
            created = self.store.put(res.name, obj, None)
        if res is NAMESPACES:
            for resource, child in controllers.namespace_objects(name):
                child_res = resources.lookup("", resource)
                assert child_res is not None
                with contextlib.suppress(ApiError):
                    self.create(child_res, name, child)
        return created

    def _check_namespace(self, namespace: str) -> None:
        """NamespaceLifecycle admission."""
        ns = self.store.get("namespaces", "", namespace)
        if ns is None:
            raise errors.not_found(NAMESPACES, namespace)
        if (ns.get("status") or {}).get("phase") == "Terminating":
            raise ApiError(
                403,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                "Forbidden",
            )

    def _admit_create(self, res: Resource, obj: Obj) -> None:
        name = obj["metadata"].get("name") or ""
        if res is PODS:
            self._admit_service_account(obj)
            defaults.admit_new_pod(obj)
            problems = defaults.validate_pod(obj) + defaults.proc_mounts(obj, self.types.minor)
        elif res is NAMESPACES:
            problems = defaults.validate_name(obj, label=True)
            if not problems:
                defaults.default_namespace(obj)
        else:
            problems = defaults.validate_name(obj)
            if res.name == "secrets":
                defaults.default_secret(obj)
            if res.name == "services" and not problems:
                problems = services.default_service(obj, self.cluster_ips)
            if res.has_status:
                obj.setdefault("status", {})
            if res is NODES:
                controllers.taint_new_node(obj)
        if problems:
            raise errors.invalid(res, name, problems)

    def _admit_service_account(self, pod: Obj) -> None:
        """ServiceAccount admission: the pod's service account must exist."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if defaults.is_mirror_pod(pod):  # no account: plugin/pkg/admission/serviceaccount
            if spec.get("serviceAccountName") or spec.get("serviceAccount"):
                raise ApiError(
                    403,
                    f'pods "{meta.get("name") or ""}" is forbidden: a mirror pod may not'
                    " reference service accounts",
                    "Forbidden",
                )
            return
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        namespace = meta.get("namespace") or ""
        if self.store.get("serviceaccounts", namespace, account) is None:
            name = meta.get("name") or meta.get("generateName") or ""
            raise ApiError(
                403,
                f'pods "{name}" is forbidden: error looking up service account'
                f' {namespace}/{account}: serviceaccount "{account}" not found',
                "Forbidden",
            )

    # --- token requests -----------------------------------------------------------------------

    def token_request(self, namespace: str, name: str, body: Any) -> Obj:
        """serviceaccounts/token: a bound token for an existing service account."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self.get(resources.SERVICEACCOUNTS, namespace, name)
        return controllers.issue_token(namespace, name, body)

    # --- read -------------------------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        """GET one object, 404 when absent."""
        obj = self.store.get(res.name, namespace, name)
        if obj is None:
            raise errors.not_found(res, name)
        return obj

    def list(
        self,
        res: Resource,
        namespace: str | None,
        match: Callable[[Obj], bool],
        rv: str | None,
        rv_match: str | None,
    ) -> Obj:
        """LIST: current state, or exactly at `rv` with resourceVersionMatch=Exact."""
        with self.store.lock:
            current = self.store.current_rv()
            if rv_match == "Exact":
                wanted = _parse_rv(rv)
                if wanted is None or wanted == 0:
                    raise errors.bad_request(
                        'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is '
                        'forbidden for resourceVersion "0"'
                    )
                items, list_rv = self.store.list_at(res.name, namespace, wanted), wanted
            else:
                wanted = _parse_rv(rv)
                if wanted is not None and wanted > current:
                    raise ApiError(
                        504, f"Too large resource version: {wanted}, current: {current}", "Timeout"
                    )
                items, list_rv = self.store.list_objects(res.name, namespace), current
        return {
            "kind": res.list_kind,
            "apiVersion": res.api_version,
            "metadata": {"resourceVersion": str(list_rv)},
            "items": [i for i in items if match(i)],
        }

    # --- update / patch ---------------------------------------------------------------------

    def update(
        self, res: Resource, namespace: str, name: str, body: Any, sub: str
    ) -> tuple[Obj, int]:
        """PUT (main resource or /status); returns the object and the HTTP code."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        with self.store.lock:
            current = self.store.get(res.name, namespace, name)
            if current is None:
                if res.name in CREATE_ON_UPDATE and not sub:
                    created_body = copy.deepcopy(body)
                    _meta(created_body).pop("resourceVersion", None)
                    return self.create(res, namespace, created_body), 201
                raise errors.not_found(res, name)
            return self._apply_update(res, current, _untyped(copy.deepcopy(body)), sub), 200

    def patch(
        self, res: Resource, namespace: str, name: str, content_type: str, raw: bytes, sub: str
    ) -> Obj:
        """PATCH with one of the three patch types, then the update rules."""
        if content_type not in PATCH_TYPES:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml, application/strategic-merge-patch+json",
                "UnsupportedMediaType",
            )
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        with self.store.lock:
            current = self.store.get(res.name, namespace, name)
            if current is None:
                raise errors.not_found(res, name)
            patched = self._apply_patch(res, typed(res, current), content_type, body)
            return self._apply_update(res, current, _untyped(patched), sub)

    def _decoded(self, res: Resource, obj: Obj) -> Obj:
        """The body as the server decodes it into its type: unknown fields dropped, or a 400."""
        try:
            return self.types.prune_object(res, obj)
        except openapi.DecodeError as exc:
            raise errors.bad_request(
                f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: {exc}'
            ) from None

    def _apply_patch(self, res: Resource, doc: Obj, content_type: str, body: Any) -> Obj:
        try:
            if content_type == JSON_PATCH:
                result = patch.json_patch(doc, body)
            elif not isinstance(body, dict):
                raise errors.bad_request("the patch must be a JSON object")
            elif content_type == MERGE:
                result = patch.merge_patch(doc, body)
            else:
                result = patch.strategic_merge(doc, body, openapi.definition_of(res), self.types)
        except patch.PatchServerError as exc:
            raise ApiError(500, str(exc), "InternalError") from None
        except patch.PatchError as exc:
            raise ApiError(
                422 if content_type == JSON_PATCH else 400,
                "the server rejected our request due to an error in our request"
                if content_type == JSON_PATCH
                else str(exc),
            ) from None
        if not isinstance(result, dict):
            raise errors.bad_request("the patched object is not a JSON object")
        return result

    def _apply_update(self, res: Resource, current: Obj, new: Obj, sub: str) -> Obj:
        """Preconditions, strategy PrepareForUpdate, validation, no-op detection, finalizers."""
        new = self._decoded(res, new)
        name = current["metadata"]["name"]
        meta, cur_meta = _meta(new), current["metadata"]
        if meta.get("uid") and meta["uid"] != cur_meta["uid"]:
            raise errors.uid_immutable(res, name, meta["uid"])
        if meta.get("resourceVersion") and meta["resourceVersion"] != cur_meta["resourceVersion"]:
            raise errors.stale(res, name)
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        new = self._prepare(res, current, new, sub)
        if "generation" in cur_meta and new.get("spec") != current.get("spec"):
            new["metadata"]["generation"] = cur_meta["generation"] + 1  # a pod's, v1.33+
        if new == current:
            return current  # etcd skips identical writes: no new RV, no event
        meta = new["metadata"]
        gone = (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and meta.get("deletionGracePeriodSeconds") == 0
        )
        if gone:
            removed = self.store.remove(res.name, current)
            if res is PODS:
                self._finish_namespace(removed["metadata"].get("namespace") or "")
            return removed
        return self.store.put(res.name, new, current)

    def _prepare(self, res: Resource, current: Obj, new: Obj, sub: str) -> Obj:
        if sub == "ephemeralcontainers":
            return defaults.update_ephemeral_containers(current, new)
        if sub == "resize":
            return defaults.update_resize(current, new)
        if sub == "status":
            return self._prepare_status(res, current, new)
        meta = new["metadata"]
        for key in (
            "name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
            "deletionGracePeriodSeconds", "generation", "resourceVersion",
        ):  # fmt: skip
            if key in current["metadata"]:
                meta[key] = current["metadata"][key]
            else:
                meta.pop(key, None)
        if res.has_status:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        if res is PODS:
            self._prepare_pod(current, new)
        elif res.name == "secrets":
            defaults.default_secret(new)
        return new

    @staticmethod
    def _prepare_status(res: Resource, current: Obj, new: Obj) -> Obj:
        # v1.24's status strategies keep the spec (and a pod's ownerReferences) but take
        # labels, annotations and finalizers from the write; newer servers reset all metadata.
        result = copy.deepcopy(current)
        result["status"] = new.get("status") or {}
        for key in ("labels", "annotations", "finalizers"):
            if new["metadata"].get(key):
                result["metadata"][key] = new["metadata"][key]
            else:
                result["metadata"].pop(key, None)
        if res is NODES:
            controllers.sync_not_ready_taint(result)
        if res is PODS:
            defaults.normalize_pod_ips(result["status"])
            problems = defaults.validate_pod_status(result["status"], current)
            if problems:
                raise errors.invalid(PODS, current["metadata"]["name"], problems)
        if res is PODS and not result["status"].get("qosClass"):
            result["status"]["qosClass"] = (current.get("status") or {}).get("qosClass")
        return result

    def _prepare_pod(self, current: Obj, new: Obj) -> None:
        spec = new.setdefault("spec", {})
        defaults.default_pod_spec(spec)
        problems = defaults.validate_pod_update(new, current, self.types.minor)
        if problems:
            raise errors.invalid(PODS, current["metadata"]["name"], problems)

    # --- delete -----------------------------------------------------------------------------

    def delete(self, res: Resource, namespace: str, name: str, options: Obj) -> Obj:
        """DELETE: preconditions, graceful pod deletion, finalizers, namespace cascade."""
        with self.store.lock:
            current = self.store.get(res.name, namespace, name)
            if current is None:
                raise errors.not_found(res, name)
            self._check_preconditions(res, current, options.get("preconditions") or {})
            if res is NAMESPACES:
                return self._delete_namespace(current)
            if res is PODS:
                return typed(res, self._delete_pod(current, options.get("gracePeriodSeconds")))
            meta = current["metadata"]
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return typed(res, current)
                marked = copy.deepcopy(current)
                marked["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=0)
                return typed(res, self.store.put(res.name, marked, current))
            if res.name == "services":
                self.cluster_ips.release(str((current.get("spec") or {}).get("clusterIP") or ""))
            return success_status(res, self.store.remove(res.name, current))

    @staticmethod
    def _check_preconditions(res: Resource, current: Obj, pre: Obj) -> None:
        meta, name = current["metadata"], current["metadata"]["name"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.uid_precondition(res, name, pre["uid"], meta["uid"])
        rv = pre.get("resourceVersion")
        if rv and rv != meta["resourceVersion"]:
            raise errors.rv_precondition(res, name, rv, meta["resourceVersion"])

    def _delete_pod(self, current: Obj, requested: int | None) -> Obj:
        """rest.BeforeDelete + podStrategy.CheckGracefulDelete."""
        meta, spec = current["metadata"], current.get("spec") or {}
        if requested is not None and requested < 0:
            requested = 1
        if meta.get("deletionTimestamp"):
            old_grace = meta.get("deletionGracePeriodSeconds")
            if old_grace and (requested is None or requested >= old_grace):
                return current  # graceful deletion already pending, may only be shortened
            grace = requested or 0
            started = datetime.strptime(meta["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
            shorter_by = go_seconds(old_grace or 0) - go_seconds(grace)
            stamp = started.replace(tzinfo=UTC) - timedelta(seconds=shorter_by)
            deletion_time = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            grace = (
                requested if requested is not None else spec.get("terminationGracePeriodSeconds", 0)
            )
            if grace < 0:  # a negative terminationGracePeriodSeconds is stored as given
                grace = 1
            phase = (current.get("status") or {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            deletion_time = now(grace)
        marked = copy.deepcopy(current)
        marked["metadata"].update(deletionTimestamp=deletion_time, deletionGracePeriodSeconds=grace)
        if "generation" in meta and not meta.get("deletionTimestamp"):
            marked["metadata"]["generation"] += 1  # v1.34: the deletion's start is a change
        updated = self.store.put("pods", marked, current)
        if grace == 0 and not meta.get("finalizers"):
            # Pod deletion is always graceful: the update (a MODIFIED event with grace 0) comes
            # before the removal (DELETED), even for a first delete with grace 0.
            removed = self.store.remove("pods", updated)
            self._finish_namespace(removed["metadata"].get("namespace") or "")
            return removed
        return updated

    def _delete_namespace(self, current: Obj) -> Obj:
        """Mark Terminating and delete the contents as the namespace controller does: pods
        gracefully (a bound pod waits for its node's final DELETE), the rest at once; the
        namespace goes when its last pod has gone."""
        name = current["metadata"]["name"]
        if name in PROTECTED_NAMESPACES:
            raise ApiError(
                403,
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                "Forbidden",
                {"name": name, "kind": "namespaces"},
            )
        if (current.get("status") or {}).get("phase") == "Terminating":
            return typed(NAMESPACES, current)
        marked = copy.deepcopy(current)
        marked["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=0)
        marked["status"] = {"phase": "Terminating"}
        terminating = self.store.put("namespaces", marked, current)
        for res in resources.ALL:
            if res.namespaced and res is not PODS:
                for obj in self.store.list_objects(res.name, name):
                    self.store.remove(res.name, obj)
        for pod in self.store.list_objects("pods", name):
            if not pod["metadata"].get("deletionTimestamp"):
                self._delete_pod(pod, None)
        self._finish_namespace(name)
        return typed(NAMESPACES, terminating)

    def _finish_namespace(self, name: str) -> None:
        """The namespace controller's last step, once a terminating namespace has no pods."""
        ns = self.store.get("namespaces", "", name)
        if ns is None or (ns.get("status") or {}).get("phase") != "Terminating":
            return
        if not self.store.list_objects("pods", name):
            self.store.remove("namespaces", ns)

    # --- binding ----------------------------------------------------------------------------

    def bind(self, namespace: str, name: str | None, body: Any) -> Obj:
        """pods/binding: set spec.nodeName once and the PodScheduled condition."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        name = name or (body.get("metadata") or {}).get("name") or ""
        target = body.get("target") or {}
        if not target.get("name"):
            cause = errors.cause("FieldValueRequired", "target.name", "Required value")
            raise errors.invalid(resources.BINDINGS, name, [cause])
        with self.store.lock:
            pod = self.get(PODS, namespace, name)
            meta, spec = pod["metadata"], pod.setdefault("spec", {})
            if meta.get("deletionTimestamp"):
                why = f"pod {name} is being deleted, cannot be assigned to a host"
                raise errors.conflict(PODS, name, why, "binding")
            if spec.get("nodeName"):
                why = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
                raise errors.conflict(PODS, name, why, "binding")
            updated = copy.deepcopy(pod)
            updated["spec"]["nodeName"] = target["name"]
            annotations = (body.get("metadata") or {}).get("annotations") or {}
            if annotations:
                updated["metadata"].setdefault("annotations", {}).update(annotations)
            conditions = updated.setdefault("status", {}).setdefault("conditions", [])
            scheduled = {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now(),
            }
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append(scheduled)
            self.store.put("pods", updated, pod)
        return success_status(PODS, updated, 201)


def _parse_rv(rv: str | None) -> int | None:
    if rv in (None, ""):
        return None
    if not str(rv).isdigit():  # what the storage layer's strconv.ParseUint fails on: a 500
        raise ApiError(
            500,
            f'resourceVersion: Invalid value: "{rv}": strconv.ParseUint: parsing "{rv}": '
            "invalid syntax",
            "",
        )
    return int(str(rv))
