"""Networking: the service proxy and its rules, routes to other nodes' pods, the Docker network of
kind's shape, DNS and /etc/hosts, service-link env."""
