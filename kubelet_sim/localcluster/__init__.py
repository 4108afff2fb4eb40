"""The one local cluster the demo and the pytest plugin's Cluster build on."""
