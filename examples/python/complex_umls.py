"""ComplEx knowledge-graph embeddings on UMLS, with the entity and relation tables in parma.

Trains ComplEx (Trouillon et al. 2016) on UMLS as shipped in ``train/data/kg/umls`` with the
hyper-parameters of parma's own ``parma train kge --data umls`` (``train/src/kge.rs``): 50
complex dimensions (100 reals), logistic loss summed over each triple's positive score and 6
corrupted heads and 6 corrupted tails drawn uniformly, L2 regularization 1e-3 on the positive
triple's three embeddings, AdaGrad with learning rate 0.1, N(0, 0.1²) initialization, 32
triples per step, 30 epochs. At the end it prints the filtered test MRR and Hits@1/3/10 and
the median epoch time (training only).

    python examples/python/complex_umls.py                      # rows in parma (1 process)
    python examples/python/complex_umls.py --embedding torch    # torch.nn.Embedding(sparse=True)
    torchrun --nproc-per-node 2 examples/python/complex_umls.py [--embedding torch]

Under torchrun each process is one parma node and trains on its half of the triples; the
tables live in parma, spread over the nodes. With ``--embedding torch`` under torchrun the
tables are replicated and their sparse gradients all-reduced by DistributedDataParallel (gloo),
the plain data-parallel baseline. ComplEx has no dense parameters, so with parma nothing is
wrapped in DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import Dist, IntArray, Tables  # noqa: E402


class ComplEx(nn.Module):
    """ComplEx: an embedding of ``dim`` reals is ``dim/2`` complex numbers, real parts first;
    ``s(h, r, t) = Re(Σ h_k r_k conj(t_k))``."""

    def __init__(self, tables: Tables, entities: int, relations: int, dim: int, init_std: float,
                 seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.dim = dim
        self.ent = tables.embedding(entities, dim, torch.randn(entities, dim, generator=g) * init_std)
        self.rel = tables.embedding(relations, dim, torch.randn(relations, dim, generator=g) * init_std)

    def forward(self, batch: torch.Tensor, neg_heads: torch.Tensor, neg_tails: torch.Tensor,
             reg: float) -> torch.Tensor:
        """The summed logistic loss of a step (``train/src/kge.rs``, ``step_bce``): each
        triple's positive score, its corrupted heads and its corrupted tails, plus
        ``reg/2 · (|h|² + |r|² + |t|²)`` of each positive triple."""
        b, n = neg_heads.shape
        ents = self.ent(torch.cat([batch[:, 0], batch[:, 2], neg_heads.reshape(-1), neg_tails.reshape(-1)]))
        h, t = ents[:b], ents[b : 2 * b]
        nh = ents[2 * b : 2 * b + b * n].view(b, n, self.dim)
        nt = ents[2 * b + b * n :].view(b, n, self.dim)
        r = self.rel(batch[:, 1])
        k = self.dim // 2
        hr, hi, rr, ri, tr, ti = h[:, :k], h[:, k:], r[:, :k], r[:, k:], t[:, :k], t[:, k:]
        # Tail query h∘r and head query r∘conj(t): a candidate's score is a dot product.
        q_tail = torch.cat([hr * rr - hi * ri, hr * ri + hi * rr], dim=1)
        q_head = torch.cat([rr * tr + ri * ti, rr * ti - ri * tr], dim=1)
        pos = (q_tail * t).sum(dim=1)
        s_nh = torch.bmm(nh, q_head.unsqueeze(2)).squeeze(2)
        s_nt = torch.bmm(nt, q_tail.unsqueeze(2)).squeeze(2)
        loss = F.softplus(-pos).sum() + F.softplus(s_nh).sum() + F.softplus(s_nt).sum()
        if reg > 0:
            loss = loss + (reg / 2) * (h.pow(2).sum() + r.pow(2).sum() + t.pow(2).sum())
        return loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.common_args(p, epochs=30, lr=0.1, batch=32)
    p.add_argument("--data", type=Path, default=common.REPO / "train" / "data" / "kg" / "umls",
                   help="a directory with train.txt, valid.txt, test.txt (LibKGE layout)")
    p.add_argument("--dim", type=int, default=100, help="reals per embedding (even)")
    p.add_argument("--negatives", type=int, default=6, help="corrupted heads, and tails, per triple")
    p.add_argument("--reg", type=float, default=1e-3, help="L2 weight on the positive triple's embeddings")
    p.add_argument("--init-std", type=float, default=0.1, help="std of the normal initialization")
    p.add_argument("--eval-every", type=int, default=0,
                   help="validation MRR every this many epochs (0: none; not timed)")
    args = p.parse_args()
    if args.dim % 2:
        p.error("--dim must be even (ComplEx stores dim/2 complex numbers)")

    d = common.init_dist()
    common.seed_all(args.seed, d)
    kg = common.load_kg(args.data)
    tables = Tables(args.embedding, "adagrad", args.lr, d, technique=args.technique)
    model = ComplEx(tables, kg.entities, kg.relations, args.dim, args.init_std, args.seed)
    tables.start(model)
    # With torch's tables under torchrun, DDP all-reduces their sparse gradients; parma's
    # tables need no DDP (and ComplEx has no dense parameters).
    net: nn.Module = common.wrap_dense(d, model) if args.embedding == "torch" else model
    common.log(d, f"ComplEx on {args.data.name}: {kg.entities} entities, {kg.relations} relations, "
                  f"{len(kg.train)} training triples; embeddings: {args.embedding}, "
                  f"{d.world} process(es)")

    def scores(triples: IntArray) -> tuple[torch.Tensor, torch.Tensor]:
        ent, rel = tables.table(model.ent), tables.table(model.rel)
        x = torch.from_numpy(triples)
        h, r, t = ent[x[:, 0]], rel[x[:, 1]], ent[x[:, 2]]
        k = args.dim // 2
        hr, hi, rr, ri, tr, ti = h[:, :k], h[:, k:], r[:, :k], r[:, k:], t[:, :k], t[:, k:]
        q_tail = torch.cat([hr * rr - hi * ri, hr * ri + hi * rr], dim=1)
        q_head = torch.cat([rr * tr + ri * ti, rr * ti - ri * tr], dim=1)
        return q_tail @ ent.T, q_head @ ent.T

    train = torch.from_numpy(kg.train)
    timer = common.EpochTimer()
    gen = torch.Generator().manual_seed(args.seed * 1000 + d.rank)
    for epoch in range(1, args.epochs + 1):
        order = common.shard(d, len(kg.train), epoch, args.seed)
        total = 0.0
        with timer:
            for idx in common.batches(order, args.batch):
                batch = train[torch.from_numpy(idx)]
                negs = torch.randint(0, kg.entities, (2, len(idx), args.negatives), generator=gen)
                tables.zero_grad()
                loss: torch.Tensor = net(batch, negs[0], negs[1], args.reg)
                loss.backward()
                tables.step()
                total += loss.item()
        if args.eval_every and epoch % args.eval_every == 0:
            tables.barrier()
            v = common.ranking(d, kg, kg.valid, scores)
            common.log(d, f"epoch {epoch}: loss {total / max(len(order), 1):.4f}, "
                          f"valid MRR {v.mrr:.4f}, {timer.times[-1]:.3f} s")
        else:
            common.log(d, f"epoch {epoch}: loss {total / max(len(order), 1):.4f}, {timer.times[-1]:.3f} s")

    tables.barrier()
    r = common.ranking(d, kg, kg.test, scores)
    med = timer.median(d)
    common.log(d, f"median epoch {med:.4f} s ({len(kg.train) / med:,.0f} triples/s over "
                  f"{d.world} process(es)); total training {timer.total(d):.2f} s")
    common.log(d, f"test (filtered): MRR {r.mrr:.4f}  Hits@1 {r.hits1:.4f}  Hits@3 {r.hits3:.4f}  "
                  f"Hits@10 {r.hits10:.4f}  MR {r.mr:.2f}")
    common.log(d, f"RESULT complex_umls embedding={args.embedding} world={d.world} "
                  f"mrr={r.mrr:.4f} median_epoch_s={med:.4f}")
    tables.close()
    common.finish_dist(d)


if __name__ == "__main__":
    main()
