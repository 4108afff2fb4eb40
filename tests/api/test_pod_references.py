"""Which ConfigMaps and Secrets the node must watch for a pod."""

from __future__ import annotations

from kubelet_sim.pod.references import ObjectRef, referenced_objects


def test_every_kind_of_reference_is_found() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
            "containers": [
                {
                    "name": "c",
                    "env": [
                        {"name": "A", "value": "plain"},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                        {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "envFrom": [{"configMapRef": {"name": "cm-all"}}],
                }
            ],
            "volumes": [
                {"name": "v1", "configMap": {"name": "cm-vol"}},
                {"name": "v2", "secret": {"secretName": "s-vol"}},
                {"name": "v3", "emptyDir": {}},
                {
                    "name": "v4",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt"}},
                            {"secret": {"name": "s-proj"}},
                        ]
                    },
                },
            ],
        },
    }
    assert referenced_objects(pod) == {
        ObjectRef("Secret", "ns", "pull"),
        ObjectRef("Secret", "ns", "init-env"),
        ObjectRef("ConfigMap", "ns", "cm"),
        ObjectRef("Secret", "ns", "s"),
        ObjectRef("ConfigMap", "ns", "cm-all"),
        ObjectRef("ConfigMap", "ns", "cm-vol"),
        ObjectRef("Secret", "ns", "s-vol"),
        ObjectRef("ConfigMap", "ns", "kube-root-ca.crt"),
        ObjectRef("Secret", "ns", "s-proj"),
    }


def test_pod_without_references() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}}
    assert referenced_objects(pod) == set()
