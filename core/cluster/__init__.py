"""More than one process: gateways hold the platform connections, workers run the pipeline and the plugins,
and NATS JetStream carries the messages between them (`hookchat run --role gateway|worker`, `hookchat status`).
See docs/scale-out.md. The default single-process mode needs none of this."""

from core.cluster._bus import Bus, ClusterError, partition_of
from core.cluster._gateway import Gateway
from core.cluster._ownership import owner_of
from core.cluster._replies import RemoteAdapter
from core.cluster._state import ClusterHistory, ClusterPluginStore
from core.cluster._status import cluster_status, render_status
from core.cluster._worker import Worker

__all__ = [
    "Bus",
    "ClusterError",
    "ClusterHistory",
    "ClusterPluginStore",
    "Gateway",
    "RemoteAdapter",
    "Worker",
    "cluster_status",
    "owner_of",
    "partition_of",
    "render_status",
]
