"""Probes of running containers: results that feed the status writer and the kills."""
