"""Embedding tables whose rows live in parma: :class:`Embedding`, :func:`layout` and
:class:`EmbeddingOptimizer`."""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import parma as _parma

from ._context import current_worker
from ._optim import SGD, RowOptimizer

if TYPE_CHECKING:
    import parma

__all__ = ["Embedding", "EmbeddingOptimizer", "layout"]

#: Rows that one ``set`` or ``pull`` of :meth:`Embedding.load_weights`,
#: :meth:`Embedding.weights` and :meth:`Embedding.initialize` moves at most.
CHUNK_ROWS = 1 << 16

#: Rows drawn from one generator by :meth:`Embedding.initialize`; a row's initial weights
#: depend on the seed, the key of its block's first row and its place in the block only.
INIT_BLOCK_ROWS = 1024

_init_rng_lock = threading.Lock()

InitFn = Callable[..., Any]


@dataclass
class _Lookup:
    """One forward pass's rows: their keys, their pulled values and the leaf of their weights."""

    keys: np.ndarray  # int64 (n,), distinct and sorted
    values: np.ndarray  # float32 (n, value_len): the values pulled, weights first
    weights: Tensor  # (n, dim), a view of `values`, requires grad


@dataclass
class _ThreadState:
    """What one thread's lookups of an embedding left for its next ``step()``."""

    worker: "Optional[parma.Worker]" = None
    lookups: List[_Lookup] = field(default_factory=list)
    #: The ticket of the last push, waited for at the next one.
    ticket: Any = None


def _accepts_generator(fn: InitFn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "generator" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _block_seed(seed: int, first_key: int) -> int:
    words = np.random.SeedSequence([seed & (2**64 - 1), first_key]).generate_state(2, np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


class Embedding(nn.Module):
    """An embedding table like ``torch.nn.Embedding`` whose rows live in parma.

    Each row is one parma key whose value is ``[weights (embedding_dim) | optimizer
    state]``, so the row's optimizer state moves, is replicated and is checkpointed with it.
    The module holds no tensor of its own: a forward pass pulls the rows it needs from the
    current worker (:func:`parma.torch.use_worker`), and :meth:`step` (or
    :class:`EmbeddingOptimizer`) pushes one update per row looked up since the last step.

    Put every embedding's key range in the cluster's layout with :func:`parma.torch.layout`
    before the first lookup::

        users = parma.torch.Embedding(10_000, 32, optimizer=parma.torch.Adagrad(lr=0.1))
        items = parma.torch.Embedding(5_000, 32, optimizer=parma.torch.Adagrad(lr=0.1))
        cfg = parma.Config(nodes=1, workers_per_node=1, layout=parma.torch.layout(users, items))
        with parma.LocalCluster(cfg) as cluster:
            w = cluster.workers()[0]
            parma.torch.use_worker(w)
            users.initialize(); items.initialize(); w.barrier()
            score = (users(u) * items(i)).sum(-1)
            loss = torch.nn.functional.softplus(-score).mean()
            loss.backward()
            users.step(); items.step()

    Args:
        num_embeddings: rows in the table; indices are ``0 .. num_embeddings - 1``.
        embedding_dim: floats of weights per row.
        optimizer: the rows' update rule, :class:`parma.torch.SGD` (the default, with
            torch's default learning rate), :class:`parma.torch.Adagrad` or
            :class:`parma.torch.Adam`; it fixes the length of a row's value.
        init: fills a tensor of rows in place, called by :meth:`initialize` on blocks of
            rows; with a ``generator`` keyword (as ``torch.nn.init.normal_`` and
            ``uniform_`` take) it gets a seeded ``torch.Generator``, else it runs with
            torch's global generator seeded and restored around it. Default:
            ``torch.nn.init.normal_`` (N(0, 1), as ``nn.Embedding``).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        optimizer: Optional[RowOptimizer] = None,
        init: Optional[InitFn] = None,
    ) -> None:
        super().__init__()
        if int(num_embeddings) <= 0 or int(embedding_dim) <= 0:
            raise ValueError(
                f"num_embeddings and embedding_dim must be positive (got {num_embeddings}, {embedding_dim})"
            )
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.optimizer = optimizer if optimizer is not None else SGD()
        if not isinstance(self.optimizer, RowOptimizer):
            raise TypeError(
                f"optimizer must be a parma.torch row optimizer (SGD, Adagrad, Adam), not {type(self.optimizer).__name__}"
            )
        self.init = init if init is not None else nn.init.normal_
        self.key_offset: Optional[int] = None
        self._setup_runtime_state()
        self._steps = 0

    def _setup_runtime_state(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()

    # -- what the module is ---------------------------------------------------------------

    @property
    def value_len(self) -> int:
        """Floats per row in parma: the weights and the optimizer's state."""
        return self.embedding_dim + self.optimizer.state_len(self.embedding_dim)

    @property
    def key_range(self) -> range:
        """The parma keys of the rows, ``key_offset .. key_offset + num_embeddings``."""
        return range(self._offset(), self._offset() + self.num_embeddings)

    @property
    def steps(self) -> int:
        """How many ``step()`` calls applied a gradient (:class:`Adam`'s ``"global"`` count)."""
        return self._steps

    def _offset(self) -> int:
        if self.key_offset is None:
            raise RuntimeError(
                f"{self._name()} has no key range yet: build the cluster's layout with "
                "parma.torch.layout(...) over every parma.torch.Embedding first"
            )
        return self.key_offset

    def _name(self) -> str:
        return f"parma.torch.Embedding({self.num_embeddings}, {self.embedding_dim})"

    def extra_repr(self) -> str:
        offset = "unassigned" if self.key_offset is None else str(self.key_offset)
        return f"{self.num_embeddings}, {self.embedding_dim}, optimizer={self.optimizer!r}, key_offset={offset}"

    def keys(self, indices: Union[Tensor, np.ndarray, Iterable[int]]) -> np.ndarray:
        """The parma keys (int64 NumPy array, same shape) of the rows ``indices``.

        Raises:
            TypeError: the indices are not integers.
            IndexError: an index is outside ``0 .. num_embeddings - 1``.
        """
        if isinstance(indices, Tensor):
            idx = self._checked(indices).cpu().numpy()
        else:
            arr = np.asarray(indices)
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(f"{self._name()} takes integer indices, not {arr.dtype}")
            idx = arr.astype(np.int64, copy=False)
            self._check_range(int(idx.min()) if idx.size else 0, int(idx.max()) if idx.size else 0)
        return idx + self._offset()

    def _checked(self, indices: Tensor) -> Tensor:
        self._check_dtype(indices)
        if indices.numel():
            self._check_range(int(indices.min()), int(indices.max()))
        return indices.long()

    def _check_dtype(self, indices: Tensor) -> None:
        if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype == torch.bool:
            raise TypeError(
                f"{self._name()} takes integer indices (a LongTensor or IntTensor), not {indices.dtype}"
            )

    def _check_range(self, lo: int, hi: int) -> None:
        if lo < 0 or hi >= self.num_embeddings:
            bad = lo if lo < 0 else hi
            raise IndexError(
                f"index {bad} is out of range for {self._name()}: indices must be in "
                f"0..{self.num_embeddings - 1}"
            )

    # -- the forward pass and the update --------------------------------------------------

    def _state(self) -> _ThreadState:
        s = getattr(self._local, "state", None)
        if s is None:
            s = self._local.state = _ThreadState()
        return s

    def forward(self, indices: Tensor) -> Tensor:
        """The rows ``indices`` (integers of any shape): ``indices.shape + (embedding_dim,)``.

        Pulls each distinct row once from the current worker. While gradients are enabled,
        the lookup is kept for the next :meth:`step`, which applies the gradient that
        reaches its output.

        Raises:
            RuntimeError: no current worker (:func:`parma.torch.use_worker`), no key range
                (:func:`parma.torch.layout`), or the lookups since the last step used
                another worker.
            TypeError, IndexError: bad indices.
        """
        self._check_dtype(indices)
        offset = self._offset()
        w = current_worker()
        record = torch.is_grad_enabled()
        state = self._state()
        if record and state.lookups and state.worker is not w:
            raise RuntimeError(
                f"{self._name()} was looked up with another worker since its last step(): "
                "call step() (or zero_grad(set_to_none=True) and drop the outputs) before "
                "switching this thread's worker"
            )
        unique, inverse = torch.unique(indices.cpu().long(), sorted=True, return_inverse=True)
        if unique.numel():  # sorted: the ends are the smallest and the largest index
            self._check_range(int(unique[0]), int(unique[-1]))
        keys = unique.numpy() + offset
        values = np.empty((keys.shape[0], self.value_len), dtype=np.float32)
        if keys.shape[0]:
            w.pull(keys, values)
        weights = torch.from_numpy(values)[:, : self.embedding_dim]
        if record:
            weights.requires_grad_(True)
            state.worker = w
            state.lookups.append(_Lookup(keys, values, weights))
        out = F.embedding(inverse, weights)  # index_select: cheaper than weights[inverse]
        return out if out.device == indices.device else out.to(indices.device)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients this thread's pending lookups received so far.

        The lookups stay pending: a ``backward()`` after this call still reaches them (as in
        the usual ``out = model(x); opt.zero_grad(); loss.backward(); opt.step()``).
        """
        for lookup in self._state().lookups:
            if lookup.weights.grad is not None:
                if set_to_none:
                    lookup.weights.grad = None
                else:
                    lookup.weights.grad.zero_()
        super().zero_grad(set_to_none)

    def pending(self) -> int:
        """Lookups of this thread waiting for :meth:`step`."""
        return len(self._state().lookups)

    def step(self) -> None:
        """Apply the gradients of this thread's lookups since the last step and push them.

        Every row looked up by a lookup whose output received a gradient is updated once,
        with the sum of its gradients over all such lookups, even if that sum is zero (as
        torch's optimizers treat the rows of a sparse gradient). Lookups that received no
        gradient are dropped, like a parameter whose ``grad`` is ``None``. The deltas of
        weights and optimizer state go to parma in one ``push`` on the lookups' worker.
        """
        state = self._state()
        lookups = [lk for lk in state.lookups if lk.weights.grad is not None]
        worker = state.worker
        state.lookups = []
        if not lookups or worker is None:
            return
        with self._lock:
            self._steps += 1
            steps = self._steps
        keys, values, grads = self._coalesce(lookups)
        if keys.shape[0] == 0:
            return
        deltas = self.optimizer.deltas(torch.from_numpy(values), grads, steps)
        if state.ticket is not None:
            ticket, state.ticket = state.ticket, None
            worker.wait(ticket)
        state.ticket = worker.push(keys, np.ascontiguousarray(deltas.numpy(), dtype=np.float32))

    def _coalesce(self, lookups: List[_Lookup]) -> "tuple[np.ndarray, np.ndarray, Tensor]":
        grads = [_grad_of(lk.weights) for lk in lookups]
        if len(lookups) == 1:
            return lookups[0].keys, lookups[0].values, grads[0].contiguous()
        keys, inverse = np.unique(np.concatenate([lk.keys for lk in lookups]), return_inverse=True)
        inverse = inverse.reshape(-1)
        summed = torch.zeros(keys.shape[0], self.embedding_dim, dtype=torch.float32)
        summed.index_add_(0, torch.from_numpy(inverse), torch.cat(grads))
        values = np.empty((keys.shape[0], self.value_len), dtype=np.float32)
        start = 0
        for lk in lookups:  # the latest pull of a row wins (the keys of one lookup are distinct)
            n = lk.keys.shape[0]
            values[inverse[start : start + n]] = lk.values
            start += n
        return keys, values, summed

    def flush(self) -> None:
        """Wait until this thread's last push reached every row (errors surface here)."""
        state = self._state()
        if state.ticket is not None and state.worker is not None:
            ticket, state.ticket = state.ticket, None
            state.worker.wait(ticket)

    # -- writing and reading the whole table ----------------------------------------------

    def initialize(
        self,
        seed: int = 0,
        *,
        part: Optional[int] = None,
        parts: Optional[int] = None,
    ) -> None:
        """Write fresh rows: weights from ``init``, the optimizer's initial state.

        The table is cut into blocks of :data:`INIT_BLOCK_ROWS` rows, each drawn from its own
        generator seeded by ``seed`` and the block's first key, so a row's initial weights
        do not depend on how many workers there are. Each worker of the cluster writes the
        blocks ``b`` with ``b % parts == part``; call it on every worker, then
        ``worker.barrier()`` before the first lookup.

        Args:
            seed: the seed of the whole table.
            part, parts: this worker's share: ``part`` in ``0 .. parts - 1``. By default the
                worker's index among all the cluster's workers (``Worker.rank`` of
                ``Worker.nodes * Worker.workers_per_node``); pass both to decide yourself
                (``part=0, parts=1``: this worker writes every row).
        """
        w = current_worker()
        part, parts = _share(w, part, parts)
        offset = self._offset()
        blocks = range(part, -(-self.num_embeddings // INIT_BLOCK_ROWS), parts)
        pending: List[Any] = []
        with torch.no_grad():
            for first, last in _chunks_of_blocks(blocks, self.num_embeddings):
                keys = np.arange(first, last, dtype=np.int64) + offset
                weights = self._draw(first, last, seed)
                pending.append(w.set(keys, self._fresh_values(weights)))
        for t in pending:
            w.wait(t)

    def _draw(self, first: int, last: int, seed: int) -> Tensor:
        out = torch.empty(last - first, self.embedding_dim, dtype=torch.float32)
        offset = self._offset()
        with_generator = _accepts_generator(self.init)
        for start in range(first, last, INIT_BLOCK_ROWS):
            block = out[start - first : min(start + INIT_BLOCK_ROWS, last) - first]
            block_seed = _block_seed(seed, offset + start)
            if with_generator:
                self.init(block, generator=torch.Generator().manual_seed(block_seed))
            else:
                with _init_rng_lock, torch.random.fork_rng(devices=[]):
                    torch.manual_seed(block_seed)
                    self.init(block)
        return out

    def _fresh_values(self, weights: Tensor) -> np.ndarray:
        state = self.optimizer.initial_state(weights.shape[0], self.embedding_dim)
        return torch.cat([weights.to(torch.float32), state], dim=1).contiguous().numpy()

    def load_weights(self, weights: Tensor) -> None:
        """Set every row's weights from ``weights`` (``(num_embeddings, embedding_dim)``)
        and its optimizer state to the initial one, through the current worker.

        Call it on one worker, then ``barrier()`` on all.
        """
        weights = torch.as_tensor(weights).detach().cpu()
        if tuple(weights.shape) != (self.num_embeddings, self.embedding_dim):
            raise ValueError(
                f"{self._name()} takes weights of shape ({self.num_embeddings}, {self.embedding_dim}), "
                f"not {tuple(weights.shape)}"
            )
        w = current_worker()
        offset = self._offset()
        pending = []
        for first in range(0, self.num_embeddings, CHUNK_ROWS):
            last = min(first + CHUNK_ROWS, self.num_embeddings)
            keys = np.arange(first + offset, last + offset, dtype=np.int64)
            pending.append(w.set(keys, self._fresh_values(weights[first:last])))
        for t in pending:
            w.wait(t)

    def values(self) -> Tensor:
        """Every row's whole value, weights then optimizer state, pulled through the current
        worker: float32 ``(num_embeddings, value_len)``."""
        w = current_worker()
        offset = self._offset()
        out = np.empty((self.num_embeddings, self.value_len), dtype=np.float32)
        for first in range(0, self.num_embeddings, CHUNK_ROWS):
            last = min(first + CHUNK_ROWS, self.num_embeddings)
            w.pull(np.arange(first + offset, last + offset, dtype=np.int64), out[first:last])
        return torch.from_numpy(out)

    def weights(self) -> Tensor:
        """Every row's weights, pulled through the current worker: float32
        ``(num_embeddings, embedding_dim)`` (a copy: changing it changes nothing in parma)."""
        return self.values()[:, : self.embedding_dim].contiguous()

    # -- torch's module protocol ----------------------------------------------------------

    def get_extra_state(self) -> Dict[str, int]:
        """What ``state_dict()`` saves: the step count (the rows themselves are in parma;
        save them with ``worker.checkpoint``)."""
        return {"steps": self._steps}

    def set_extra_state(self, state: Dict[str, int]) -> None:
        """Restore the step count saved by :meth:`get_extra_state`."""
        self._steps = int(state["steps"])

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_local", None)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        self._setup_runtime_state()


def _grad_of(weights: Tensor) -> Tensor:
    """The gradient backward left on a lookup's rows (float32)."""
    if weights.grad is None:
        raise RuntimeError("a parma.torch.Embedding lookup has no gradient: call backward() before the optimizer's step")
    return weights.grad.detach().to(torch.float32)


def _share(w: "parma.Worker", part: Optional[int], parts: Optional[int]) -> "tuple[int, int]":
    if (part is None) != (parts is None):
        raise ValueError("pass both part and parts, or neither")
    if part is None:
        part, parts = _global_worker_index(w)
    assert parts is not None
    if not 0 <= part < parts:
        raise ValueError(f"part must be in 0..{parts - 1}, not {part}")
    return part, parts


def _global_worker_index(w: "parma.Worker") -> "tuple[int, int]":
    """This worker's index among all the cluster's workers, and their number."""
    return int(w.rank), int(w.nodes) * int(w.workers_per_node)


def _chunks_of_blocks(blocks: range, rows: int) -> Iterator["tuple[int, int]"]:
    """Row ranges covering ``blocks`` of :data:`INIT_BLOCK_ROWS`, at most :data:`CHUNK_ROWS`
    rows each (adjacent blocks merged when a worker owns consecutive ones)."""
    first: Optional[int] = None
    last = 0
    for b in blocks:
        lo, hi = b * INIT_BLOCK_ROWS, min((b + 1) * INIT_BLOCK_ROWS, rows)
        if first is not None and lo == last and hi - first <= CHUNK_ROWS:
            last = hi
            continue
        if first is not None:
            yield first, last
        first, last = lo, hi
    if first is not None:
        yield first, last


def layout(*embeddings: Embedding) -> "parma.Layout":
    """Give each embedding its key range and return the cluster's layout.

    The ranges are consecutive from key 0, in the order given, each with its embedding's
    value length (weights and optimizer state); pass the result as ``parma.Config``'s
    ``layout``. Every worker must use the same embeddings in the same order.

    Raises:
        ValueError: no embeddings, or one given twice.
    """
    if not embeddings:
        raise ValueError("parma.torch.layout needs at least one parma.torch.Embedding")
    if len({id(e) for e in embeddings}) != len(embeddings):
        raise ValueError("parma.torch.layout got the same embedding twice")
    ranges = []
    key = 0
    for e in embeddings:
        if not isinstance(e, Embedding):
            raise TypeError(f"parma.torch.layout takes parma.torch.Embedding modules, not {type(e).__name__}")
        ranges.append((key, e.value_len))
        e.key_offset = key
        key += e.num_embeddings
    return _parma.Layout.ranges(key, ranges)


class EmbeddingOptimizer:
    """Steps every :class:`parma.torch.Embedding` of a model, like a torch optimizer.

    Use it beside the torch optimizer of the dense parameters::

        sparse = parma.torch.EmbeddingOptimizer(model)
        dense = torch.optim.Adam(model.parameters())
        for batch in batches:
            sparse.zero_grad(); dense.zero_grad()
            loss(model, batch).backward()
            sparse.step(); dense.step()

    Args:
        modules: a module (its parma embeddings are found with ``modules()``), or an
            iterable of modules; each embedding is stepped once, in the order found.
    """

    def __init__(self, modules: Union[nn.Module, Iterable[nn.Module]]) -> None:
        roots = [modules] if isinstance(modules, nn.Module) else list(modules)
        found: Dict[int, Embedding] = {}
        for root in roots:
            if not isinstance(root, nn.Module):
                raise TypeError(f"EmbeddingOptimizer takes torch modules, not {type(root).__name__}")
            for m in root.modules():
                if isinstance(m, Embedding):
                    found.setdefault(id(m), m)
        if not found:
            raise ValueError("EmbeddingOptimizer found no parma.torch.Embedding")
        self.embeddings: List[Embedding] = list(found.values())

    def step(self) -> None:
        """:meth:`Embedding.step` on every embedding."""
        for e in self.embeddings:
            e.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """:meth:`Embedding.zero_grad` on every embedding."""
        for e in self.embeddings:
            e.zero_grad(set_to_none)

    def flush(self) -> None:
        """:meth:`Embedding.flush` on every embedding: wait for the last pushes."""
        for e in self.embeddings:
            e.flush()

    def __repr__(self) -> str:
        inner = ", ".join(e._name() for e in self.embeddings)
        return f"parma.torch.EmbeddingOptimizer([{inner}])"
