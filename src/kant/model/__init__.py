"""Pure domain types: cluster inventory and topology, jobs, and the mutable cluster state."""

from kant.model.cluster import Cluster, NodeSpec
from kant.model.job import InferenceService, JobKind, JobTable, JobTableBuilder, split_gang
from kant.model.state import ClusterState, Placement

__all__ = [
    "Cluster",
    "ClusterState",
    "InferenceService",
    "JobKind",
    "JobTable",
    "JobTableBuilder",
    "NodeSpec",
    "Placement",
    "split_gang",
]
