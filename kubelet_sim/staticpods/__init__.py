"""Static pods: pods from manifest files on the node (`--pod-manifest-path`) and their mirror
pods in the API (source.py), their status written to the mirrors (status.py)."""
