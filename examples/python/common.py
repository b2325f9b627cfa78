"""Shared code of the Python examples: data reading, distributed set-up, the two embedding
back-ends (parma and ``torch.nn.Embedding(sparse=True)``), timing, filtered link-prediction
ranking and AUC.

Not an example itself: ``complex_umls.py``, ``mf_movielens.py`` and ``dlrm_clicks.py`` import it
(run them from any directory; they put this one on ``sys.path`` themselves).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
from torch import nn

REPO = Path(__file__).resolve().parents[2]
"""The repository's root (examples/python/ is two levels below it)."""

Backend = Literal["parma", "torch"]
OptName = Literal["sgd", "adagrad", "adam"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


# --------------------------------------------------------------------------------------------
# Processes


@dataclass
class Dist:
    """This process's place among the training processes (one when not under torchrun)."""

    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_dist() -> Dist:
    """Joins torch's process group (gloo, CPU) if torchrun started this process with more
    than one process; one process otherwise. Also pins torch's intra-op threads to this
    process's share of the cores, so that two processes on a 2-core machine do not fight."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cores = os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // max(world, 1)))
    if world > 1:
        dist.init_process_group("gloo")
        return Dist(rank=dist.get_rank(), world=dist.get_world_size())
    return Dist(rank=rank, world=1)


def finish_dist(d: Dist) -> None:
    if d.distributed:
        dist.barrier()
        dist.destroy_process_group()


def log(d: Dist, *args: object) -> None:
    """Prints on rank 0 only (every rank computes the same global figures)."""
    if d.main:
        print(*args, flush=True)


def all_sum(d: Dist, values: Sequence[float]) -> list[float]:
    """The sums over every process of ``values`` (float64)."""
    t = torch.tensor(list(values), dtype=torch.float64)
    if d.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [float(x) for x in t.tolist()]


def all_max(d: Dist, values: Sequence[float]) -> list[float]:
    """The maxima over every process of ``values`` (float64)."""
    t = torch.tensor(list(values), dtype=torch.float64)
    if d.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]


def wrap_dense(d: Dist, module: nn.Module) -> nn.Module:
    """``module`` wrapped in ``DistributedDataParallel`` under torchrun (gradients averaged
    over the processes), itself otherwise. Only for modules with dense parameters."""
    if not d.distributed:
        return module
    return nn.parallel.DistributedDataParallel(module)


def shard(d: Dist, n: int, epoch: int, seed: int) -> IntArray:
    """This process's training examples of ``epoch``: one permutation of ``range(n)`` drawn by
    every process alike from ``(seed, epoch)``, cut to a multiple of the world size, and every
    ``world``-th entry from ``rank`` (so every process takes as many steps)."""
    perm = np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64)
    perm = perm[: n - n % d.world]
    return perm[d.rank :: d.world]


def batches(order: IntArray, batch: int) -> Iterator[IntArray]:
    for start in range(0, len(order), batch):
        yield order[start : start + batch]


def seed_all(seed: int, d: Dist) -> None:
    """torch's and NumPy's global generators from ``seed`` (and the rank: each process draws
    its own negatives)."""
    torch.manual_seed(seed * 1000 + d.rank)
    np.random.seed((seed * 1000 + d.rank) % 2**32)


# --------------------------------------------------------------------------------------------
# Command line


def common_args(p: argparse.ArgumentParser, *, epochs: int, lr: float, batch: int) -> None:
    p.add_argument(
        "--embedding",
        choices=["parma", "torch"],
        default="parma",
        help="where the embedding rows live: parma (parma.torch.Embedding), or "
        "torch.nn.Embedding(sparse=True) with the same optimizer (the baseline)",
    )
    p.add_argument("--epochs", type=int, default=epochs, help="passes over the training data")
    p.add_argument("--lr", type=float, default=lr, help="learning rate of the embeddings")
    p.add_argument("--batch", type=int, default=batch, help="training examples per step (per process)")
    p.add_argument("--seed", type=int, default=1, help="seed of initialization, data order, negatives")
    p.add_argument(
        "--technique",
        default="adaptive",
        help="parma's management technique (--embedding parma only)",
    )


# --------------------------------------------------------------------------------------------
# Embedding back-ends


def parma_torch() -> Any:
    """``parma.torch``, with a message saying how to get it if it is missing."""
    try:
        import parma.torch as pt
    except ImportError as e:  # pragma: no cover - depends on the installation
        sys.exit(
            f"--embedding parma needs the parma Python package with parma.torch ({e}); "
            "install it with `pip install python/` from the repository root, "
            "or run with --embedding torch"
        )
    return pt


@dataclass
class Tables:
    """The embedding tables of a model, on one back-end.

    Create every table with :meth:`embedding` inside the model's constructor, then call
    :meth:`start` once the model exists (for parma this starts the cluster or this process's
    node and writes the initial rows), then per step :meth:`zero_grad` / backward /
    :meth:`step`. :meth:`table` reads a whole table for evaluation.
    """

    backend: Backend
    opt: OptName
    lr: float
    d: Dist
    technique: str = "adaptive"
    embeddings: list[nn.Module] = field(default_factory=list)
    inits: list[torch.Tensor] = field(default_factory=list)
    _torch_opt: torch.optim.Optimizer | None = None
    _parma_opt: Any = None
    _cluster: Any = None
    _node: Any = None
    _worker: Any = None

    def embedding(self, num: int, dim: int, init: torch.Tensor) -> nn.Module:
        """A table of ``num`` rows of ``dim`` starting at ``init`` (the same initial values on
        both back-ends; every process passes the same)."""
        assert tuple(init.shape) == (num, dim), (init.shape, num, dim)
        emb: nn.Module
        if self.backend == "torch":
            emb = nn.Embedding(num, dim, sparse=True)
            with torch.no_grad():
                emb.weight.copy_(init)
        else:
            pt = parma_torch()
            make = {"sgd": pt.SGD, "adagrad": pt.Adagrad, "adam": pt.Adam}[self.opt]
            emb = pt.Embedding(num, dim, optimizer=make(lr=self.lr))
        self.embeddings.append(emb)
        self.inits.append(init)
        return emb

    def start(self, model: nn.Module) -> None:
        """Builds the optimizer of the embeddings (and for parma, its cluster or node)."""
        if self.backend == "torch":
            params = [p for e in self.embeddings for p in e.parameters()]
            if self.opt == "sgd":
                self._torch_opt = torch.optim.SGD(params, lr=self.lr)
            elif self.opt == "adagrad":
                self._torch_opt = torch.optim.Adagrad(params, lr=self.lr)
            else:
                self._torch_opt = torch.optim.SparseAdam(params, lr=self.lr)
            return
        import parma

        pt = parma_torch()
        layout = pt.layout(*self.embeddings)
        cfg = parma.Config(
            nodes=self.d.world, workers_per_node=1, layout=layout, technique=self.technique
        )
        if self.d.distributed:
            self._node = pt.start_node(cfg)
            if self._node is None:
                sys.exit("this process is not a parma node (launcher environment)")
            self._worker = self._node.workers()[0]
        else:
            self._cluster = parma.LocalCluster(cfg)
            self._worker = self._cluster.workers()[0]
        pt.use_worker(self._worker)
        # Every row's initial value, written once by rank 0 (the others wait for it).
        if self.d.main:
            for emb, init in zip(self.embeddings, self.inits):
                getattr(emb, "load_weights")(init)
        self._worker.barrier()
        self._parma_opt = pt.EmbeddingOptimizer(model)

    def barrier(self) -> None:
        """With parma: waits for this process's last pushes, then (under torchrun) for every
        process to get here, so that a read after it sees every update before it."""
        if self._parma_opt is not None:
            self._parma_opt.flush()
        if self._worker is not None and self.d.distributed:
            self._worker.barrier()

    def zero_grad(self) -> None:
        if self._torch_opt is not None:
            self._torch_opt.zero_grad(set_to_none=True)
        if self._parma_opt is not None:
            self._parma_opt.zero_grad()

    def step(self) -> None:
        if self._torch_opt is not None:
            self._torch_opt.step()
        if self._parma_opt is not None:
            self._parma_opt.step()

    def table(self, emb: nn.Module) -> torch.Tensor:
        """Every row of ``emb`` as one tensor (for evaluation, without gradient)."""
        if self.backend == "torch":
            assert isinstance(emb, nn.Embedding)
            return emb.weight.detach()
        out: torch.Tensor = getattr(emb, "weights")()
        return out

    def close(self) -> None:
        if self._parma_opt is not None:
            self.barrier()
        if self._node is not None:
            self._node.shutdown()
            self._node = None
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None


# --------------------------------------------------------------------------------------------
# Timing


class EpochTimer:
    """Wall time per epoch of this process; :meth:`median` is the median over epochs of the
    slowest process's epoch."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def __enter__(self) -> "EpochTimer":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.times.append(time.perf_counter() - self._start)

    def median(self, d: Dist) -> float:
        return statistics.median(all_max(d, self.times))

    def total(self, d: Dist) -> float:
        return sum(all_max(d, self.times))


# --------------------------------------------------------------------------------------------
# Knowledge graphs


@dataclass
class Kg:
    """A knowledge graph in LibKGE's layout: ``(n, 3)`` arrays of ``head, relation, tail``,
    entities and relations numbered in order of first appearance, train, then valid, then test
    (as parma's ``train/src/kg.rs`` numbers them)."""

    entities: int
    relations: int
    train: IntArray
    valid: IntArray
    test: IntArray


def load_kg(directory: Path) -> Kg:
    ents: dict[str, int] = {}
    rels: dict[str, int] = {}
    splits: list[IntArray] = []
    for name in ("train.txt", "valid.txt", "test.txt"):
        rows: list[tuple[int, int, int]] = []
        with open(directory / name, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                parts = line.split("\t")
                if len(parts) != 3:
                    sys.exit(f"{directory / name}:{lineno}: expected head<TAB>relation<TAB>tail")
                h, r, t = parts
                hi = ents.setdefault(h, len(ents))
                ri = rels.setdefault(r, len(rels))
                ti = ents.setdefault(t, len(ents))
                rows.append((hi, ri, ti))
        splits.append(np.array(rows, dtype=np.int64).reshape(-1, 3))
    return Kg(len(ents), len(rels), splits[0], splits[1], splits[2])


@dataclass
class Ranking:
    mrr: float
    hits1: float
    hits3: float
    hits10: float
    mr: float


def filter_masks(kg: Kg, triples: IntArray) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """For each triple, the entities to leave out of its tail query ``(h, r, ?)`` and of its
    head query ``(?, r, t)``: every other known answer, from train, valid and test."""
    known = np.concatenate([kg.train, kg.valid, kg.test])
    tails: dict[tuple[int, int], list[int]] = {}
    heads: dict[tuple[int, int], list[int]] = {}
    for h, r, t in known.tolist():
        tails.setdefault((h, r), []).append(t)
        heads.setdefault((r, t), []).append(h)
    n = len(triples)
    mt = np.zeros((n, kg.entities), dtype=bool)
    mh = np.zeros((n, kg.entities), dtype=bool)
    for i, (h, r, t) in enumerate(triples.tolist()):
        mt[i, tails[(h, r)]] = True
        mh[i, heads[(r, t)]] = True
        mt[i, t] = True  # the answer itself is handled apart
        mh[i, h] = True
    return mt, mh


RankScores = Callable[[IntArray], tuple[torch.Tensor, torch.Tensor]]
"""Given triples ``(n, 3)``: scores of every entity as the tail ``(n, E)`` and as the head
``(n, E)``."""


def rank_sums(
    kg: Kg, triples: IntArray, scores: RankScores, chunk: int = 1024
) -> tuple[float, float, float, float, float, float]:
    """Filtered ranking sums (Bordes et al. 2013, as parma's ``train/src/eval.rs``): for each
    triple its tail among all entities for ``(h, r, ?)`` and its head for ``(?, r, t)``, other
    known answers left out, ties counting half. Returns ``(Σ 1/rank, Σ rank, hits@1, hits@3,
    hits@10, queries)``, to be summed over parts and processes."""
    out = np.zeros(6, dtype=np.float64)
    for start in range(0, len(triples), chunk):
        part = triples[start : start + chunk]
        st, sh = scores(part)
        mt, mh = filter_masks(kg, part)
        rows = np.arange(len(part))
        for s, mask, answer in ((st, mt, part[:, 2]), (sh, mh, part[:, 0])):
            sc = s.detach().to(torch.float32).numpy()
            truth = sc[rows, answer][:, None]
            keep = ~mask
            greater = ((sc > truth) & keep).sum(axis=1)
            equal = ((sc == truth) & keep).sum(axis=1)
            rank = 1.0 + greater + equal / 2.0
            out += [
                (1.0 / rank).sum(),
                rank.sum(),
                (rank <= 1).sum(),
                (rank <= 3).sum(),
                (rank <= 10).sum(),
                len(rank),
            ]
    return tuple(float(x) for x in out)  # type: ignore[return-value]


def ranking(d: Dist, kg: Kg, triples: IntArray, scores: RankScores) -> Ranking:
    """Filtered ranking of ``triples``, split over the processes and summed."""
    mine = triples[d.rank :: d.world]
    rr, rank, h1, h3, h10, q = all_sum(d, rank_sums(kg, mine, scores))
    q = max(q, 1.0)
    return Ranking(rr / q, h1 / q, h3 / q, h10 / q, rank / q)


# --------------------------------------------------------------------------------------------
# MovieLens-100k


def cache_dir() -> Path:
    """parma's data cache, as ``train/src/fetch.rs`` finds it: ``$XDG_CACHE_HOME/parma``, else
    ``~/.cache/parma``, else ``./.parma-cache``."""
    x = os.environ.get("XDG_CACHE_HOME")
    if x:
        return Path(x) / "parma"
    home = os.environ.get("HOME")
    if home:
        return Path(home) / ".cache" / "parma"
    return Path(".parma-cache")


def ml100k_dir() -> Path:
    """The cached MovieLens-100k files, or exits saying how to fetch them."""
    d = cache_dir() / "ml-100k"
    missing = [f for f in ("ml-100k.inter", "ml-100k.user", "ml-100k.item") if not (d / f).exists()]
    if missing:
        sys.exit(
            f"MovieLens-100k is not in parma's cache ({d}: {', '.join(missing)} missing).\n"
            "Fetch it once from the repository root with:\n"
            "    cargo run --release -p parma-cli -- data fetch ml-100k\n"
            "(GroupLens' terms forbid redistributing it; the command takes it from the "
            "recbole==1.2.1 wheel and checks its sha256)."
        )
    return d


def read_atomic(path: Path) -> tuple[list[str], list[list[str]]]:
    """A RecBole atomic file: column names (without ``:type``) and rows of fields."""
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline().rstrip("\n").split("\t")
        names = [c.split(":")[0].strip() for c in header]
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return names, rows


@dataclass
class Ratings:
    """MovieLens-100k ratings, users and items numbered from 0 in order of first appearance,
    split 80/20 by a seeded shuffle."""

    users: int
    items: int
    train: IntArray  # (n, 2) user, item
    train_y: npt.NDArray[np.float32]
    test: IntArray
    test_y: npt.NDArray[np.float32]
    order: IntArray  # the rows of ml-100k.inter in train then test order
    user_ids: list[str]  # RecBole's user_id of each user number
    item_ids: list[str]  # and item_id of each item number


def load_ratings(split_seed: int) -> Ratings:
    d = ml100k_dir()
    names, rows = read_atomic(d / "ml-100k.inter")
    cu, ci, cr = names.index("user_id"), names.index("item_id"), names.index("rating")
    users: dict[str, int] = {}
    items: dict[str, int] = {}
    ui = np.empty((len(rows), 2), dtype=np.int64)
    y = np.empty(len(rows), dtype=np.float32)
    for k, f in enumerate(rows):
        ui[k, 0] = users.setdefault(f[cu], len(users))
        ui[k, 1] = items.setdefault(f[ci], len(items))
        y[k] = float(f[cr])
    order = np.random.default_rng(split_seed).permutation(len(rows)).astype(np.int64)
    cut = len(rows) * 4 // 5
    tr, te = order[:cut], order[cut:]
    return Ratings(len(users), len(items), ui[tr], y[tr], ui[te], y[te], order,
                   list(users), list(items))


# --------------------------------------------------------------------------------------------
# Metrics


def auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Area under the ROC curve (Mann-Whitney U; tied scores count half), 0.5 if a class is
    missing; the same definition as parma's ``train/src/lr.rs``."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    # Average rank (from 1) of each run of equal scores.
    ranks = np.empty(len(s), dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    ends = np.r_[starts[1:], len(ss)]
    mid = (starts + ends - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(mid, ends - starts)
    pos = float(y.sum())
    neg = float(len(y)) - pos
    if pos == 0 or neg == 0:
        return 0.5
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))
