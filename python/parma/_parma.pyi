"""Type stubs of parma's compiled module (``parma._parma``); ``parma`` re-exports all of it.

Every docstring here says what the compiled call's own docstring says, so that an editor
shows the same text as ``help()``. ``python/tests/test_stubs.py`` checks that the names here
and the module's names are the same.
"""

from os import PathLike
from types import TracebackType
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
import numpy.typing as npt

Keys = Union[npt.NDArray[np.uint64], npt.NDArray[np.int64], Sequence[int]]
"""Keys: a 1-D NumPy array of uint64 or int64, or a sequence of ints."""

Values = npt.NDArray[np.float32]
"""Values: a C-contiguous float32 array holding the keys' total length, any shape."""

Init = Union[str, Tuple[str, float]]
"""``"zero"`` or ``("uniform", scale)``."""

StrPath = Union[str, "PathLike[str]"]

LOOKAHEAD_EXAMPLES: int
"""Examples whose keys a loop announces ahead by default (1,024): ``default_lookahead``."""

LOOKAHEAD_MAX: int
"""The largest look-ahead, in steps, a prefetcher accepts (65,536): it keeps one entry per
step."""

class Layout:
    """Which keys exist and how many float32s each key's value holds.

    Make one with ``Layout.uniform(key_end, value_len)`` (keys ``0..key_end``, every value
    ``value_len`` floats) or ``Layout.ranges(key_end, [(first_key, value_len), ...])``
    (consecutive ranges, the first starting at key 0, each lasting until the next starts).
    """

    @staticmethod
    def uniform(key_end: int, value_len: int) -> Layout:
        """Keys ``0..key_end``, every value ``value_len`` floats long."""
    @staticmethod
    def ranges(key_end: int, ranges: Sequence[Tuple[int, int]]) -> Layout:
        """Keys ``0..key_end`` in ranges: ``ranges`` is a list of ``(first_key, value_len)``
        pairs, the first at key 0, first keys strictly increasing; a range lasts until the
        next starts."""
    @property
    def key_end(self) -> int:
        """One past the largest key."""
    @property
    def uniform_len(self) -> Optional[int]:
        """The value length every key shares, or ``None`` for a layout of ranges."""
    def len_of(self, key: int) -> int:
        """The value length of ``key``; ``IndexError`` for a key outside the layout."""
    def range_list(self) -> List[Tuple[int, int]]:
        """``(first_key, value_len)`` of every range (one range for a uniform layout)."""

class Config:
    """The configuration every node of a cluster shares.

    - ``technique``: ``adaptive`` (AdaPM, the default), ``adaptive-no-replication``,
      ``adaptive-no-relocation``, ``static``, ``relocation``, ``full-replication``,
      ``multi-technique``;
    - ``gate``: ``async``, ``bsp``, ``ssp:S``, ``bounded-delay:T``, ``sparse-ssp:S:P``;
    - ``placement``: ``dense`` or ``hashed``;
    - ``init``: ``"zero"``, or ``("uniform", scale)`` for values uniform in
      ``[-scale, scale)``, a function of (seed, key, element), so the same on every
      cluster size;
    - ``request_timeout``: seconds after which a remote operation fails with
      ``parma.TimeoutError``.

    Invalid values raise ``ValueError`` here, before any node starts.
    """

    def __init__(
        self,
        nodes: int,
        workers_per_node: int,
        layout: Layout,
        *,
        technique: str = "adaptive",
        gate: str = "async",
        placement: str = "dense",
        seed: int = 0x5EED,
        init: Optional[Init] = None,
        request_timeout: float = 60.0,
    ) -> None: ...
    @property
    def nodes(self) -> int:
        """Number of nodes."""
    @property
    def workers_per_node(self) -> int:
        """Workers (training threads) per node."""
    @property
    def layout(self) -> Layout:
        """The layout."""
    @property
    def technique(self) -> str:
        """The technique's name."""
    @property
    def gate(self) -> str:
        """The gate's name."""
    @property
    def seed(self) -> int:
        """The seed."""

class Ticket:
    """An operation in flight (``Worker.push``, ``set``, ``localize``);
    ``Worker.wait(ticket)`` waits for it. A ticket may be dropped without waiting: the
    worker then waits for it later."""

    @property
    def done(self) -> bool:
        """Whether the operation completed in the call that issued it (every key was local)
        or was already waited for."""

class PullTicket:
    """A pull whose remote keys are on their way (``Worker.pull_async``); keeps its output
    array alive. ``wait()`` fills in the rest and returns the array."""

    @property
    def done(self) -> bool:
        """Whether every value is in the output array already."""
    def wait(self) -> npt.NDArray[np.float32]:
        """Waits for the remote keys' values (GIL released) and returns the output array,
        then complete. Waiting twice returns the array again."""

class Worker:
    """One training thread's handle on its node: pull, push, announce, advance the clock.

    Every call that may wait (a pull of remote keys, ``wait``, ``barrier``, a gated
    ``advance_clock``, ``finalize``, checkpoints) releases the GIL while it waits. Use one
    worker per thread: calls on one worker from two threads are serialized.
    """

    @property
    def id(self) -> int:
        """This worker's id within its node."""
    @property
    def node(self) -> int:
        """The node (rank) this worker belongs to."""
    @property
    def nodes(self) -> int:
        """The number of nodes in the cluster."""
    @property
    def workers_per_node(self) -> int:
        """The number of workers of each node."""
    @property
    def rank(self) -> int:
        """This worker's index among all the cluster's workers:
        ``node * workers_per_node + id``."""
    @property
    def clock(self) -> int:
        """This worker's clock (the number of ``advance_clock`` calls so far)."""
    @property
    def finalized(self) -> bool:
        """Whether ``finalize`` ran (or the cluster shut down): every call then raises
        ``ClosedError``."""
    def pull(self, keys: Keys, out: Optional[Values] = None) -> npt.NDArray[np.float32]:
        """Reads the values of ``keys`` and waits for the remote ones, the GIL released.

        Into ``out`` if given (a C-contiguous float32 array of any shape holding exactly the
        keys' total length, written in place and returned); else into a new array, of shape
        ``(len(keys), value_len)`` when every key has the same length, else 1-D with the
        values concatenated. A key may appear more than once. Raises IndexError for a key
        outside the layout, ValueError for an ``out`` of the wrong size or not contiguous,
        TypeError for a wrong dtype; nothing is read then.
        """
    def pull_async(self, keys: Keys, out: Optional[Values] = None) -> PullTicket:
        """Starts a pull: the values of local keys are copied into the output array now
        (``out``, or a new array shaped as ``pull`` shapes it), the remote ones are asked
        for; ``PullTicket.wait()`` fills them in and returns the array. The ticket keeps the
        array alive. Compute on something else meanwhile; don't read the array before
        ``wait``."""
    def push(self, keys: Keys, values: Values) -> Ticket:
        """Adds ``values`` (float32, C-contiguous, any shape, the keys' total length: each
        key's delta in key order) to ``keys``. Local keys are updated now; the ticket
        completes when the rest were applied at their owners. Bad input raises before
        anything changed."""
    def set(self, keys: Keys, values: Values) -> Ticket:
        """Replaces the values of ``keys`` with ``values``, like ``push``. A key named twice
        keeps the last value."""
    def wait(self, ticket: Ticket) -> None:
        """Waits (GIL released) for an operation this worker issued. Raises
        ``parma.TimeoutError``, ``parma.PeerFailedError`` or ``parma.ClosedError`` if it
        failed; ValueError for a ticket of another worker. Waiting twice returns at once."""
    def announce(self, keys: Keys, start: int, end: int) -> Optional[Ticket]:
        """Tells the node that this worker will access ``keys`` while its clock is in
        ``[start, end)``; the node makes them local in time (intent under adaptive
        management, a ``localize`` under relocation, whose ticket is returned; nothing
        under static partitioning). Never waits. ValueError if ``start >= end``."""
    def intent(self, keys: Keys, start: int, end: int) -> None:
        """Signals intent to access ``keys`` while the clock is in ``[start, end)`` (what
        ``announce`` does under the adaptive techniques). Never waits. ValueError if
        ``start >= end``."""
    def localize(self, keys: Keys) -> Ticket:
        """Asks the node to move ``keys`` here (relocation); the ticket completes when they
        are."""
    def advance_clock(self) -> int:
        """Advances this worker's clock by one and returns it. Under a clock gate (bsp,
        ssp, ...) it then waits, GIL released, until the gate lets the worker go on."""
    def barrier(self) -> None:
        """Waits (GIL released) until every worker of every node entered the barrier, after
        this worker's own operations completed. Raises ``PeerFailedError`` if a node
        failed."""
    def wait_sync(self) -> None:
        """Returns after two more sync rounds of this node: every replica here was
        synchronized with its owner at least once after the call."""
    def register_uniform(self, start: int, end: int, conformity: str = "conform") -> int:
        """Registers the uniform distribution over keys ``[start, end)`` for sampling under
        the conformity level (``conform``, ``bounded``, ``long-term``, ``non-conform``) and
        returns its id. Every node registers the same distributions in the same order."""
    def register_weighted(
        self,
        weights: Union[Sequence[float], npt.NDArray[np.floating[Any]]],
        first_key: int = 0,
        conformity: str = "conform",
    ) -> int:
        """Registers a distribution over keys ``first_key .. first_key + len(weights)``,
        each key drawn with probability proportional to its weight (a sequence or array of
        floats)."""
    def prepare_sample(self, dist: int, n: int, start: int, end: int) -> int:
        """Prepares ``n`` samples of distribution ``dist`` that this worker will use while
        its clock is in ``[start, end)``; returns a handle for ``pull_sample``. Never
        waits."""
    def pull_sample(
        self, handle: int, k: int
    ) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """The next ``k`` samples of ``handle``: their keys (uint64) and values (shape
        ``(k, len)``)."""
    def finish_sample(self, handle: int) -> None:
        """Ends ``handle``; samples not pulled are dropped."""
    def checkpoint(self, dir: StrPath, extra: Optional[Dict[str, str]] = None) -> None:
        """Writes a consistent snapshot of the whole model to the directory ``dir``
        (collective: every worker of every node calls it at the same point with the same
        ``dir``); ``extra``, a dict of strings, is recorded in the manifest. Waits with the
        GIL released."""
    def restore(self, dir: StrPath) -> Dict[str, Any]:
        """Replaces the whole model with the checkpoint in ``dir``, written by a cluster of
        any size (collective, like ``checkpoint``). A checkpoint that is damaged or of
        another model is refused before anything changed. Returns the manifest as a dict."""
    def stats(self) -> Dict[str, int]:
        """This worker's counters: keys pulled and pushed, locally and remotely, and
        commands that waited for room in the queue to the node."""
    def finalize(self) -> None:
        """Finishes this worker (collective: every worker of the cluster finalizes): waits
        for its operations, ends its intents, passes the last barriers. Afterwards every
        call raises ``ClosedError``. A cluster's ``shutdown`` finalizes the workers not
        finalized yet."""

class LocalCluster:
    """An in-process cluster: ``config.nodes`` nodes in this process, each with
    ``config.workers_per_node`` workers, on the threaded in-memory transport.

    ``workers()`` gives the workers (node 0's first), one per training thread.
    ``shutdown()`` finalizes the workers not finalized yet and stops the nodes. As a
    context manager, leaving the block shuts it down (after an exception: aborts it, so
    that no wait hangs).
    """

    def __init__(self, config: Config) -> None: ...
    def workers(self) -> List[Worker]:
        """The workers, node 0's first: ``workers_per_node`` per node."""
    def stats(self) -> List[Dict[str, Any]]:
        """Every node's counters (a list of dicts, node 0 first), now."""
    def abort(self) -> None:
        """Aborts every node: every wait of every worker ends at once with
        ``ClosedError``."""
    def shutdown(self) -> List[Dict[str, Any]]:
        """Finalizes every worker not finalized yet (concurrently: finalize is collective),
        stops every node and returns their counters. GIL released while it waits."""
    def __enter__(self) -> LocalCluster: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]] = None,
        _exc: Optional[BaseException] = None,
        _tb: Optional[TracebackType] = None,
    ) -> bool: ...

class Node:
    """This process as one node of a multi-process cluster (``start_node``)."""

    @property
    def rank(self) -> int:
        """This node's rank (its node id)."""
    @property
    def world(self) -> int:
        """The number of nodes."""
    def workers(self) -> List[Worker]:
        """This node's workers, one per training thread."""
    def stats(self) -> Dict[str, Any]:
        """This node's counters (a dict)."""
    def failed_peers(self) -> List[int]:
        """The ranks of the peers this node found failed."""
    def abort(self) -> None:
        """Aborts this node: every wait of its workers ends at once with ``ClosedError``."""
    def shutdown(self) -> Dict[str, Any]:
        """Finalizes this node's workers not finalized yet (collective with every other
        node), stops the node and returns its counters."""
    def __enter__(self) -> Node: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]] = None,
        _exc: Optional[BaseException] = None,
        _tb: Optional[TracebackType] = None,
    ) -> bool: ...

def start_node(
    config: Config,
    *,
    transport: str = "zmq",
    bind: Optional[str] = None,
    advertise: Optional[str] = None,
    peer_timeout: float = 5.0,
    startup_timeout: float = 60.0,
    job_digest: int = 0,
    rank: Optional[int] = None,
    world: Optional[int] = None,
    rendezvous: Optional[str] = None,
    token: Optional[Union[str, bytes]] = None,
) -> Optional[Node]:
    """Starts this process as one node of a multi-process cluster.

    Reads the launcher's environment (torchrun, Slurm, Open MPI, MPICH, ``parma launch``,
    ps-lite's variables) and the cluster token (``PARMA_TOKEN_FILE`` or ``PARMA_TOKEN``),
    meets the other nodes at rank 0's rendezvous (under torchrun at ``MASTER_PORT``+1: torch
    keeps ``MASTER_PORT``) and connects to them. ``rank``, ``world`` and ``rendezvous``
    ("host:port") given together replace the environment; ``token`` (str or bytes) replaces
    the token's variables. Every node passes the same configuration and ``job_digest``; a
    node that differs is refused (``RefusedError``). Returns None when this process is no
    node (a ps-lite worker). Waits with the GIL released; at most ``startup_timeout``
    seconds (``StartupTimeoutError``).
    """

def checkpoint_table(dir: StrPath, start: int, end: int) -> npt.NDArray[np.float32]:
    """The rows of keys ``[start, end)`` of the checkpoint in ``dir`` as one
    ``(end - start, len)`` float32 array (keys never written hold their initial value),
    after checking the checkpoint. Every key of the range must have the same value
    length."""

def default_lookahead(examples_per_step: int) -> int:
    """How many steps ahead to announce keys when each step uses ``examples_per_step``
    examples: about 1,024 examples' worth, at least 8 and at most 1,024 steps."""

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago, outside the ephemeral range: for a
    program that picks the rendezvous port itself and hands it to every node."""
