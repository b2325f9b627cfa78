"""parma: a parameter manager for sparse, skewed training, from Python.

A model's parameters are keys, each with a float32 vector whose length the ``Layout`` gives.
They live spread over the nodes of a cluster; every training thread holds a ``Worker`` that
pulls (reads) and pushes (adds to) any key. Under adaptive management (the default) the
worker announces which keys its coming steps use, and the node moves or replicates them in
time, so that almost every access is a local memory access.

Two ways to get nodes:

- ``LocalCluster(config)``: every node in this process;
- ``start_node(config)``: this process as one node of a multi-process cluster started by
  torchrun, Slurm, MPI or ``parma launch``.

Arrays are NumPy arrays (keys uint64 or int64, values float32). ``parma.torch`` adds an
``nn.Embedding`` whose rows live in parma. Every call that waits releases the GIL.
"""

from ._parma import (
    LOOKAHEAD_EXAMPLES,
    LOOKAHEAD_MAX,
    Config,
    Layout,
    LocalCluster,
    Node,
    PullTicket,
    Ticket,
    Worker,
    checkpoint_table,
    default_lookahead,
    free_port,
    start_node,
)
from .errors import (
    CheckpointError,
    ClosedError,
    ParmaError,
    PeerFailedError,
    RefusedError,
    StartupError,
    StartupTimeoutError,
    TimeoutError,
)

__all__ = [
    "LOOKAHEAD_EXAMPLES",
    "LOOKAHEAD_MAX",
    "CheckpointError",
    "ClosedError",
    "Config",
    "Layout",
    "LocalCluster",
    "Node",
    "ParmaError",
    "PeerFailedError",
    "PullTicket",
    "RefusedError",
    "StartupError",
    "StartupTimeoutError",
    "Ticket",
    "TimeoutError",
    "Worker",
    "checkpoint_table",
    "default_lookahead",
    "free_port",
    "start_node",
]
