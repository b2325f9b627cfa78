"""The exceptions parma raises for what happened to the cluster (bad input raises the built-in
IndexError, ValueError and TypeError instead)."""

import builtins


class ParmaError(Exception):
    """Base of every exception about the cluster: a node, a peer, a checkpoint."""


class PeerFailedError(ParmaError):
    """A peer node failed (stopped answering within the peer timeout) or a worker left."""


class TimeoutError(ParmaError, builtins.TimeoutError):
    """An operation, barrier or gate did not complete in time."""


class ClosedError(ParmaError):
    """The node was shut down or aborted, or the worker finalized."""


class StartupError(ParmaError):
    """A node could not start: the launcher's environment, the token, the transport."""


class StartupTimeoutError(StartupError, builtins.TimeoutError):
    """Not every node arrived at the rendezvous within the start-up timeout."""


class RefusedError(StartupError):
    """The rendezvous refused the job: another token, configuration, world size or version."""


class CheckpointError(ParmaError):
    """A checkpoint could not be written or read (damaged, incomplete, of another model)."""
