"""Cluster topologies: presets and custom graphs as directed, capacitated links with routes."""

from ddpsim.topology.build import TRANSPORTS, Route, Topology, build_topology

__all__ = ["TRANSPORTS", "Route", "Topology", "build_topology"]
