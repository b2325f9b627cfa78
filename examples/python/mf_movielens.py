"""Biased matrix factorization on MovieLens-100k, with the user and item tables in parma.

Predicts user u's rating of item i as ``mu + b_u + b_i + <p_u, q_i>`` (Koren et al. 2009;
Surprise's SVD), ``mu`` the training mean, with the hyper-parameters of parma's own
``parma train mf`` (``train/src/mf.rs``, Surprise's SVD defaults): 100 factors, SGD with
learning rate 0.005 on ``(r - prediction)²/2 + 0.02/2 · (b_u² + |p_u|² + b_i² + |q_i|²)``
summed over the step's ratings, factors from N(0, 0.1²), biases from 0, 32 ratings per step,
20 epochs, predictions clipped to the rating range. The split is an 80/20 shuffle of the
100,000 ratings by ``--split-seed`` (NumPy's generator, so not the very rows of parma's split,
which shuffles with Rust's). At the end it prints the test RMSE (and the mean's) and the median
epoch time.

Data: parma's cache (``$XDG_CACHE_HOME/parma`` or ``~/.cache/parma``); fetch it once with

    cargo run --release -p parma-cli -- data fetch ml-100k

Run:

    python examples/python/mf_movielens.py                      # rows in parma (1 process)
    python examples/python/mf_movielens.py --embedding torch    # torch.nn.Embedding(sparse=True)
    torchrun --nproc-per-node 2 examples/python/mf_movielens.py [--embedding torch]

Under torchrun each process is one parma node and trains on its half of the ratings. With
``--embedding torch`` under torchrun the tables are replicated and DistributedDataParallel
(gloo) all-reduces their sparse gradients. The model has no dense parameters.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import Tables  # noqa: E402


class BiasedMF(nn.Module):
    """A row of either table is ``[bias | factors]``."""

    def __init__(self, tables: Tables, users: int, items: int, dim: int, init_std: float,
                 mean: float, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)

        def init(rows: int) -> torch.Tensor:
            x = torch.randn(rows, dim + 1, generator=g) * init_std
            x[:, 0] = 0.0
            return x

        self.mean = mean
        self.user = tables.embedding(users, dim + 1, init(users))
        self.item = tables.embedding(items, dim + 1, init(items))

    def forward(self, ui: torch.Tensor, y: torch.Tensor, reg: float) -> torch.Tensor:
        """The step's summed loss: squared error over 2 plus the L2 term of each rating."""
        u, i = self.user(ui[:, 0]), self.item(ui[:, 1])
        pred = self.mean + u[:, 0] + i[:, 0] + (u[:, 1:] * i[:, 1:]).sum(dim=1)
        loss = 0.5 * (y - pred).pow(2).sum()
        if reg > 0:
            loss = loss + (reg / 2) * (u.pow(2).sum() + i.pow(2).sum())
        out: torch.Tensor = loss
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.common_args(p, epochs=20, lr=0.005, batch=32)
    p.add_argument("--dim", type=int, default=100, help="factors per user and item")
    p.add_argument("--reg", type=float, default=0.02, help="L2 weight (Surprise's SVD: 0.02)")
    p.add_argument("--init-std", type=float, default=0.1, help="std of the factors' initialization")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the 80/20 split")
    args = p.parse_args()

    d = common.init_dist()
    common.seed_all(args.seed, d)
    data = common.load_ratings(args.split_seed)
    mean = float(data.train_y.astype(np.float64).mean())
    lo, hi = float(data.train_y.min()), float(data.train_y.max())
    tables = Tables(args.embedding, "sgd", args.lr, d, technique=args.technique)
    model = BiasedMF(tables, data.users, data.items, args.dim, args.init_std, mean, args.seed)
    tables.start(model)
    net: nn.Module = common.wrap_dense(d, model) if args.embedding == "torch" else model
    common.log(d, f"biased MF on MovieLens-100k: {data.users} users, {data.items} items, "
                  f"{len(data.train)} training and {len(data.test)} test ratings; "
                  f"embeddings: {args.embedding}, {d.world} process(es)")

    def test_rmse() -> float:
        users, items = tables.table(model.user), tables.table(model.item)
        mine = np.arange(len(data.test))[d.rank :: d.world]
        x = torch.from_numpy(data.test[mine])
        u, i = users[x[:, 0]], items[x[:, 1]]
        pred = (mean + u[:, 0] + i[:, 0] + (u[:, 1:] * i[:, 1:]).sum(dim=1)).clamp(lo, hi)
        err = (torch.from_numpy(data.test_y[mine]) - pred).double().pow(2).sum()
        total, n = common.all_sum(d, [float(err), float(len(mine))])
        return math.sqrt(total / max(n, 1.0))

    train, train_y = torch.from_numpy(data.train), torch.from_numpy(data.train_y)
    timer = common.EpochTimer()
    for epoch in range(1, args.epochs + 1):
        order = common.shard(d, len(data.train), epoch, args.seed)
        total = 0.0
        with timer:
            for idx in common.batches(order, args.batch):
                b = torch.from_numpy(idx)
                tables.zero_grad()
                loss: torch.Tensor = net(train[b], train_y[b], args.reg)
                loss.backward()
                tables.step()
                total += loss.item()
        common.log(d, f"epoch {epoch}: loss {total / max(len(order), 1):.4f}, {timer.times[-1]:.3f} s")

    tables.barrier()
    rmse = test_rmse()
    mean_rmse = math.sqrt(float(np.mean((data.test_y.astype(np.float64) - mean) ** 2)))
    med = timer.median(d)
    common.log(d, f"median epoch {med:.4f} s ({len(data.train) / med:,.0f} ratings/s over "
                  f"{d.world} process(es)); total training {timer.total(d):.2f} s")
    common.log(d, f"test RMSE {rmse:.4f} (predicting the training mean: {mean_rmse:.4f}; target <= 0.94)")
    common.log(d, f"RESULT mf_movielens embedding={args.embedding} world={d.world} "
                  f"rmse={rmse:.4f} median_epoch_s={med:.4f}")
    tables.close()
    common.finish_dist(d)


if __name__ == "__main__":
    main()
