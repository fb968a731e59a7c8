"""Readers that turn trace files into kant's job tables and clusters."""

from kant.traces._csv import Problems
from kant.traces.inventory import BUILTIN_CLUSTERS, load_cluster, parse_cluster_spec, read_inventory
from kant.traces.philly import bundled_philly_path, read_philly

__all__ = [
    "BUILTIN_CLUSTERS",
    "Problems",
    "bundled_philly_path",
    "load_cluster",
    "parse_cluster_spec",
    "read_inventory",
    "read_philly",
]
