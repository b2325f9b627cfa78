"""A small DLRM-style click model on MovieLens-100k as clicks, with its embedding tables in parma.

The data is what ``parma train lr --data ml-clicks`` trains on (``train/src/lr/data.rs``): each
of the 100,000 ratings is an example, its label a click when the rating is at least 4; its
categorical fields are the user, the item, the user's age decade, gender and occupation and the
item's genres (several per item); the split is the 80/20 shuffle of ``mf_movielens.py``
(``--split-seed``; NumPy's shuffle, so not the very rows of parma's split, which shuffles with
Rust's generator).

The model follows DLRM (Naumov et al. 2019) at a small size: one embedding table per field
(16 dimensions; the genres of an item averaged), a bottom MLP over the two numeric features
(age and the item's release year, standardized), the pairwise dot products of the bottom
MLP's output and the six embeddings, and a top MLP over those and the bottom output that gives
the logit; logistic loss. The tables are trained with AdaGrad (learning rate 0.05), the MLPs
with Adam (1e-3); 128 examples per step, 2 epochs (test AUC peaked at epoch 2 and fell after: 0.779, 0.785, 0.781, 0.776 ... 0.751 at 8). At the end it prints the test AUC (computed
here with NumPy) and log loss, and the median epoch time.

Data: parma's cache (``$XDG_CACHE_HOME/parma`` or ``~/.cache/parma``); fetch it once with

    cargo run --release -p parma-cli -- data fetch ml-100k

Run:

    python examples/python/dlrm_clicks.py                      # tables in parma (1 process)
    python examples/python/dlrm_clicks.py --embedding torch    # torch.nn.Embedding(sparse=True)
    torchrun --nproc-per-node 2 examples/python/dlrm_clicks.py [--embedding torch]

Under torchrun each process is one parma node and trains on its half of the examples; the MLPs
are wrapped in DistributedDataParallel (gloo), which averages their gradients. With
``--embedding torch`` under torchrun the whole model is one DistributedDataParallel module:
the tables are replicated and their sparse gradients all-reduced.

For comparison, parma's logistic regression on the same fields (hashed into 2^18 weights,
AdaGrad 0.1, 10 epochs): ``cargo run --release -p parma-cli -- train lr --data ml-clicks``
reports test AUC 0.7716, log loss 0.5667 (on its own 80/20 shuffle).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import Dist, IntArray, Tables  # noqa: E402

FIELDS = ("user", "item", "age", "gender", "occupation", "genre")


@dataclass
class Clicks:
    """Examples as index arrays: ``cats`` (n, 5) user, item, age decade, gender, occupation;
    ``genres`` (n, G) padded with ``sizes[5]`` (a row that is masked out); ``dense`` (n, 2);
    ``labels`` (n,)."""

    sizes: list[int]
    cats: IntArray
    genres: IntArray
    genre_mask: npt.NDArray[np.float32]
    dense: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32]

    def take(self, rows: IntArray) -> "Clicks":
        return Clicks(self.sizes, self.cats[rows], self.genres[rows], self.genre_mask[rows],
                      self.dense[rows], self.labels[rows])


def load_clicks(split_seed: int) -> tuple[Clicks, Clicks]:
    """MovieLens-100k as clicks, train and test (the split of :func:`common.load_ratings`)."""
    r = common.load_ratings(split_seed)
    d = common.ml100k_dir()
    names, rows = common.read_atomic(d / "ml-100k.user")
    cu, ca, cg, co = (names.index(c) for c in ("user_id", "age", "gender", "occupation"))
    ages: dict[str, int] = {}
    genders: dict[str, int] = {}
    occs: dict[str, int] = {}
    user_feat: dict[str, tuple[int, int, int, float]] = {}
    for f in rows:
        age = int(f[ca])
        user_feat[f[cu]] = (ages.setdefault(str(age // 10 * 10), len(ages)),
                            genders.setdefault(f[cg], len(genders)),
                            occs.setdefault(f[co], len(occs)), float(age))
    names, rows = common.read_atomic(d / "ml-100k.item")
    ci, cy, cc = (names.index(c) for c in ("item_id", "release_year", "class"))
    genres: dict[str, int] = {}
    item_feat: dict[str, tuple[list[int], float]] = {}
    for f in rows:
        gs = [genres.setdefault(g, len(genres)) for g in f[cc].split()]
        year = float(f[cy]) if f[cy].strip().isdigit() else float("nan")
        item_feat[f[ci]] = (gs, year)
    g_max = max(len(v[0]) for v in item_feat.values())
    n_users, n_items = r.users, r.items
    # Per user and per item number, their features.
    u_cat = np.array([user_feat[u][:3] for u in r.user_ids], dtype=np.int64)
    u_age = np.array([user_feat[u][3] for u in r.user_ids], dtype=np.float64)
    i_gen = np.full((n_items, g_max), len(genres), dtype=np.int64)
    i_mask = np.zeros((n_items, g_max), dtype=np.float32)
    i_year = np.empty(n_items, dtype=np.float64)
    for k, it in enumerate(r.item_ids):
        gs, year = item_feat[it]
        i_gen[k, : len(gs)] = gs
        i_mask[k, : len(gs)] = 1.0 / max(len(gs), 1)
        i_year[k] = year
    i_year = np.where(np.isnan(i_year), np.nanmean(i_year), i_year)
    sizes = [n_users, n_items, len(ages), len(genders), len(occs), len(genres) + 1]

    def build(ui: IntArray, y: npt.NDArray[np.float32]) -> Clicks:
        cats = np.concatenate([ui, u_cat[ui[:, 0]]], axis=1)
        dense = np.stack([u_age[ui[:, 0]], i_year[ui[:, 1]]], axis=1)
        return Clicks(sizes, cats, i_gen[ui[:, 1]], i_mask[ui[:, 1]], dense.astype(np.float32),
                      (y >= 4).astype(np.float32))

    train, test = build(r.train, r.train_y), build(r.test, r.test_y)
    mu, sd = train.dense.mean(axis=0), train.dense.std(axis=0) + 1e-6
    train.dense = (train.dense - mu) / sd
    test.dense = (test.dense - mu) / sd
    return train, test


def mlp(sizes: list[int], last_plain: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if not (last_plain and k == len(sizes) - 2):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Dense(nn.Module):
    """DLRM's dense part: the bottom MLP, the dot-product interaction, the top MLP."""

    iu0: torch.Tensor
    iu1: torch.Tensor

    def __init__(self, n_dense: int, dim: int, n_vectors: int, hidden: int) -> None:
        super().__init__()
        self.bottom = mlp([n_dense, hidden, dim], last_plain=False)
        pairs = n_vectors * (n_vectors - 1) // 2
        self.top = mlp([dim + pairs, hidden, hidden // 2, 1], last_plain=True)
        iu = torch.triu_indices(n_vectors, n_vectors, offset=1)
        self.register_buffer("iu0", iu[0], persistent=False)
        self.register_buffer("iu1", iu[1], persistent=False)

    def forward(self, dense: torch.Tensor, embs: torch.Tensor) -> torch.Tensor:
        """The logits of ``dense`` (n, n_dense) and the embeddings ``embs`` (n, k, dim)."""
        x = self.bottom(dense)
        v = torch.cat([x.unsqueeze(1), embs], dim=1)
        z = torch.bmm(v, v.transpose(1, 2))[:, self.iu0, self.iu1]
        out: torch.Tensor = self.top(torch.cat([x, z], dim=1)).squeeze(1)
        return out


class Dlrm(nn.Module):
    def __init__(self, tables: Tables, sizes: list[int], dim: int, hidden: int, init_std: float,
                 seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.tables = nn.ModuleList(
            [tables.embedding(n, dim, torch.randn(n, dim, generator=g) * init_std) for n in sizes]
        )
        torch.manual_seed(seed)  # the MLPs' initialization, alike in every process
        self.dense = Dense(2, dim, len(sizes), hidden)

    def forward(self, cats: torch.Tensor, genres: torch.Tensor, genre_mask: torch.Tensor,
                dense: torch.Tensor) -> torch.Tensor:
        embs = [self.tables[k](cats[:, k]) for k in range(cats.shape[1])]
        gen = self.tables[len(embs)](genres)  # (n, G, dim)
        embs.append((gen * genre_mask.unsqueeze(2)).sum(dim=1))
        out: torch.Tensor = self.dense(dense, torch.stack(embs, dim=1))
        return out


def tensors(c: Clicks, rows: IntArray | None = None) -> tuple[torch.Tensor, ...]:
    x = c if rows is None else c.take(rows)
    return (torch.from_numpy(x.cats), torch.from_numpy(x.genres), torch.from_numpy(x.genre_mask),
            torch.from_numpy(x.dense))


def evaluate(d: Dist, model: Dlrm, test: Clicks) -> tuple[float, float]:
    """Test AUC and log loss; each process scores its part, rank 0's AUC is of all scores."""
    model.eval()
    mine = np.arange(len(test.labels), dtype=np.int64)[d.rank :: d.world]
    with torch.no_grad():
        logits = torch.cat([model(*tensors(test, part)) for part in np.array_split(mine, 8)])
    scores = np.full(len(test.labels), 0.0, dtype=np.float64)
    scores[mine] = logits.double().numpy()
    scores = np.array(common.all_sum(d, scores.tolist()))
    model.train()
    y = test.labels
    p = 1.0 / (1.0 + np.exp(-scores))
    p = np.clip(p, 1e-12, 1 - 1e-12)
    logloss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return common.auc(scores, y), logloss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.common_args(p, epochs=2, lr=0.05, batch=128)
    p.add_argument("--dim", type=int, default=16, help="dimensions of every embedding")
    p.add_argument("--hidden", type=int, default=64, help="width of the MLPs")
    p.add_argument("--dense-lr", type=float, default=1e-3, help="Adam's learning rate for the MLPs")
    p.add_argument("--init-std", type=float, default=0.1, help="std of the tables' initialization")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the 80/20 split")
    p.add_argument("--eval-every", type=int, default=0,
                   help="test AUC every this many epochs (0: only at the end; not timed)")
    args = p.parse_args()

    d = common.init_dist()
    common.seed_all(args.seed, d)
    train, test = load_clicks(args.split_seed)
    tables = Tables(args.embedding, "adagrad", args.lr, d, technique=args.technique)
    model = Dlrm(tables, train.sizes, args.dim, args.hidden, args.init_std, args.seed)
    tables.start(model)
    if args.embedding == "torch":
        # Replicated tables: the whole model is one DDP module (sparse gradients all-reduced).
        net: nn.Module = common.wrap_dense(d, model)
    else:
        # Tables in parma: only the dense part is data-parallel.
        model.dense = common.wrap_dense(d, model.dense)  # type: ignore[assignment]
        net = model
    dense_opt = torch.optim.Adam(model.dense.parameters(), lr=args.dense_lr)
    common.log(d, f"DLRM on MovieLens-100k as clicks: tables {dict(zip(FIELDS, train.sizes))}, "
                  f"{len(train.labels)} training and {len(test.labels)} test examples "
                  f"({test.labels.mean():.3f} clicks); embeddings: {args.embedding}, "
                  f"{d.world} process(es)")

    labels = torch.from_numpy(train.labels)
    timer = common.EpochTimer()
    for epoch in range(1, args.epochs + 1):
        order = common.shard(d, len(train.labels), epoch, args.seed)
        total = 0.0
        with timer:
            for idx in common.batches(order, args.batch):
                tables.zero_grad()
                dense_opt.zero_grad(set_to_none=True)
                logits: torch.Tensor = net(*tensors(train, idx))
                loss = F.binary_cross_entropy_with_logits(logits, labels[torch.from_numpy(idx)])
                loss.backward()
                tables.step()
                dense_opt.step()
                total += loss.item() * len(idx)
        line = f"epoch {epoch}: loss {total / max(len(order), 1):.4f}, {timer.times[-1]:.3f} s"
        if args.eval_every and epoch % args.eval_every == 0 and epoch != args.epochs:
            tables.barrier()
            a, _ = evaluate(d, model, test)
            line += f", test AUC {a:.4f}"
        common.log(d, line)

    tables.barrier()
    a, ll = evaluate(d, model, test)
    med = timer.median(d)
    common.log(d, f"median epoch {med:.4f} s ({len(train.labels) / med:,.0f} examples/s over "
                  f"{d.world} process(es)); total training {timer.total(d):.2f} s")
    common.log(d, f"test AUC {a:.4f}, log loss {ll:.4f} (parma train lr --data ml-clicks: "
                  "AUC 0.7716, log loss 0.5667)")
    common.log(d, f"RESULT dlrm_clicks embedding={args.embedding} world={d.world} "
                  f"auc={a:.4f} median_epoch_s={med:.4f}")
    tables.close()
    common.finish_dist(d)


if __name__ == "__main__":
    main()
