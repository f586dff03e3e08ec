"""fakegpu.cluster: multi-node rehearsals on one Docker Engine (controller, merged reports)."""

from fakegpu.cluster.models import Cluster, ClusterError, ClusterSpec, Node, NodeFailed

__all__ = ["Cluster", "ClusterError", "ClusterSpec", "Node", "NodeFailed"]
