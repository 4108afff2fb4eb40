"""The kubelet API server: what `kubectl logs`, metrics-server and the API server's node proxy
reach on the port the Node advertises."""
