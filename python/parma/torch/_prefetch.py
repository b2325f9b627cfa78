"""Announcing each batch's rows ahead of its step: :class:`Prefetch`."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Generic, Iterable, Iterator, Mapping, Optional, Tuple, TypeVar, Union

import numpy as np
from torch import Tensor

import parma as _parma

from ._context import current_worker
from ._embedding import Embedding

if TYPE_CHECKING:
    import parma

__all__ = ["Prefetch", "default_lookahead", "LOOKAHEAD_EXAMPLES", "LOOKAHEAD_MAX"]

B = TypeVar("B")

#: Examples whose rows :class:`Prefetch` announces ahead by default (parma's rule).
LOOKAHEAD_EXAMPLES: int = _parma.LOOKAHEAD_EXAMPLES
#: The largest look-ahead, in batches, a :class:`Prefetch` accepts (it keeps one batch per step).
LOOKAHEAD_MAX: int = _parma.LOOKAHEAD_MAX

Indices = Union[Tensor, np.ndarray, Iterable[int]]
KeyFn = Union[
    Callable[[Any], Mapping[Embedding, Indices]],
    Mapping[Embedding, Callable[[Any], Indices]],
]


def default_lookahead(examples_per_batch: int) -> int:
    """The default look-ahead, in batches, for batches of ``examples_per_batch`` examples:
    :data:`LOOKAHEAD_EXAMPLES` examples' worth, at least 8 and at most 1,024 batches
    (``parma.default_lookahead``, the rule the Rust loops follow).

    Announcing early costs nothing until parma acts on it; announcing later than a sync
    round's round trip leaves rows remote when their step comes.
    """
    return _parma.default_lookahead(max(int(examples_per_batch), 0))


class Prefetch(Generic[B]):
    """Iterate over ``loader``'s batches, announcing each batch's rows before its step.

    Each batch is one clock of the worker: while the loop works on the batch at clock
    ``c``, the batches of the next ``lookahead`` clocks are already read from ``loader``
    and their rows announced (``worker.announce(keys, c + i, c + i + 1)``), so that parma's
    adaptive management moves or replicates them to this node in time and the lookups find
    them local. Taking the next batch advances the worker's clock (``advance_clock``), so do
    not advance it yourself in such a loop::

        batches = parma.torch.Prefetch(loader, lambda b: {users: b["user"], items: b["item"]})
        for batch in batches:
            loss = model(batch)
            loss.backward()
            sparse.step(); dense.step()

    Leaving the loop early (``break``, an exception that closes the iterator) ends the
    current step too. The worker is the thread's current one when iteration begins
    (:func:`parma.torch.use_worker`), unless ``worker`` is given.

    Args:
        loader: any iterable of batches (a ``DataLoader``, a list, a generator).
        keys: which rows a batch looks up: a function ``batch -> {embedding: indices}``, or
            a mapping ``{embedding: batch -> indices}``; indices as the embedding takes them.
        lookahead: batches announced beyond the current one; by default
            :func:`default_lookahead` of the first batch's examples (the first dimension of
            its first indices).
        worker: the worker to announce on, instead of the current one.
    """

    def __init__(
        self,
        loader: Iterable[B],
        keys: KeyFn,
        lookahead: Optional[int] = None,
        *,
        worker: "Optional[parma.Worker]" = None,
    ) -> None:
        if lookahead is not None and not 0 <= int(lookahead) <= LOOKAHEAD_MAX:
            raise ValueError(f"lookahead must be in 0..={LOOKAHEAD_MAX} batches, not {lookahead}")
        if not callable(keys) and not isinstance(keys, Mapping):
            raise TypeError("keys must be a function batch -> {embedding: indices} or a mapping {embedding: function}")
        self.loader = loader
        self._keys = keys
        self.lookahead = None if lookahead is None else int(lookahead)
        self._worker = worker

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def indices(self, batch: B) -> Mapping[Embedding, Indices]:
        """The rows ``batch`` looks up, per embedding (what ``keys`` says)."""
        if isinstance(self._keys, Mapping):
            return {e: fn(batch) for e, fn in self._keys.items()}
        return self._keys(batch)

    def batch_keys(self, batch: B) -> Tuple[np.ndarray, int]:
        """The distinct parma keys of ``batch`` (int64) and its examples (the first
        dimension of its first indices, 1 for none)."""
        parts = []
        examples = 0
        for e, idx in self.indices(batch).items():
            if not isinstance(e, Embedding):
                raise TypeError(f"Prefetch's keys must map parma.torch.Embedding modules, not {type(e).__name__}")
            k = e.keys(idx)
            if not examples:
                examples = k.shape[0] if k.ndim else 1
            parts.append(k.reshape(-1))
        keys = np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
        return keys.astype(np.int64, copy=False), max(examples, 1)

    def __iter__(self) -> Iterator[B]:
        w = self._worker if self._worker is not None else current_worker()
        source = iter(self.loader)
        lookahead = self.lookahead
        queue: Deque[Tuple[B, Any]] = deque()
        in_step = False
        try:
            while True:
                if in_step:
                    in_step = False
                    w.advance_clock()
                while lookahead is None or len(queue) <= lookahead:
                    try:
                        batch = next(source)
                    except StopIteration:
                        break
                    keys, examples = self.batch_keys(batch)
                    if lookahead is None:
                        lookahead = default_lookahead(examples)
                    # The queue's first batch is consumed at the current clock, each later one
                    # a clock after.
                    start = int(w.clock) + len(queue)
                    ticket = w.announce(keys, start, start + 1) if keys.shape[0] else None
                    queue.append((batch, ticket))
                if not queue:
                    return
                batch, ticket = queue.popleft()
                in_step = True
                _wait(w, ticket)
                yield batch
        finally:
            if in_step:
                w.advance_clock()
            for _, ticket in queue:
                _wait(w, ticket)

    def __repr__(self) -> str:
        return f"parma.torch.Prefetch({self.loader!r}, lookahead={self.lookahead})"


def _wait(w: "parma.Worker", ticket: Any) -> None:
    """Wait for an announcement's ``localize`` ticket, if the binding returned one."""
    if ticket is not None and not isinstance(ticket, (bool, int)):
        w.wait(ticket)
