"""The worker a thread's parma modules use: :func:`use_worker` and :func:`current_worker`."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Optional, Type

if TYPE_CHECKING:
    import parma

_local = threading.local()


def current_worker() -> "parma.Worker":
    """Return the worker this thread's parma modules use.

    Raises:
        RuntimeError: no worker was set in this thread with :func:`use_worker`.
    """
    w = getattr(_local, "worker", None)
    if w is None:
        raise RuntimeError(
            "no parma worker is set in this thread: call parma.torch.use_worker(worker) "
            "(once, or as `with parma.torch.use_worker(worker):`) before using parma.torch "
            "modules; each training thread needs its own parma.Worker"
        )
    worker: "parma.Worker" = w
    return worker


def _peek_worker() -> "Optional[parma.Worker]":
    return getattr(_local, "worker", None)


class use_worker:  # noqa: N801 (used like a function)
    """Make ``worker`` the current parma worker of this thread.

    The worker is set as soon as ``use_worker(worker)`` is called, so it works as a plain
    call::

        parma.torch.use_worker(workers[0])

    and as a context manager, which restores the previously current worker (or none) on
    exit::

        with parma.torch.use_worker(w):
            loss = model(batch).sum()

    Every :class:`parma.torch.Embedding` and :class:`parma.torch.Prefetch` looks its
    worker up here when it needs one, so a model shared by several training threads uses
    each thread's own worker (one ``parma.Worker`` per thread, as parma requires).

    Args:
        worker: a ``parma.Worker`` (from ``LocalCluster.workers()`` or ``Node.workers()``),
            or ``None`` to clear the current worker.
    """

    def __init__(self, worker: "Optional[parma.Worker]") -> None:
        self._previous = _peek_worker()
        self._worker = worker
        _local.worker = worker

    @property
    def worker(self) -> "Optional[parma.Worker]":
        """The worker this call made current."""
        return self._worker

    def __enter__(self) -> "Optional[parma.Worker]":
        return self._worker

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _local.worker = self._previous

    def __repr__(self) -> str:
        return f"parma.torch.use_worker({self._worker!r})"
