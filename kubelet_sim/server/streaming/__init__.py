"""exec, attach and port-forward: the SPDY/3.1 streams an API server proxies to a kubelet."""
