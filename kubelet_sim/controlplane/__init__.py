"""A real control plane on loopback (etcd, kube-apiserver, controllers) for demos and tests."""
