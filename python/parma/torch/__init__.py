"""PyTorch modules whose parameters live in parma.

``parma.torch`` puts embedding tables in a parma cluster: each row is a parma key whose
value holds the row's weights and its optimizer state, so a model larger than one machine
trains with every worker reading and updating any row, and parma moves each row to the node
about to use it. Dense layers stay ordinary torch parameters with ordinary torch optimizers.

The pieces:

- :class:`Embedding`: an ``nn.Module`` like ``nn.Embedding``; a lookup pulls the distinct
  rows it needs, autograd gives their gradient, :meth:`Embedding.step` pushes one update per
  row.
- :func:`layout`: gives each embedding its key range and returns the ``parma.Layout`` of the
  cluster's ``parma.Config``.
- :class:`SGD`, :class:`Adagrad`, :class:`Adam`: the rows' update rules, equal to
  ``torch.optim.SGD``, ``Adagrad`` and ``SparseAdam`` on ``nn.Embedding(sparse=True)``.
- :class:`EmbeddingOptimizer`: steps every parma embedding of a model.
- :func:`use_worker`: the parma worker of the current thread, which the modules use.
- :class:`Prefetch`: wraps a data loader, announcing each batch's rows ahead of its step.

A complete program on one in-process node::

    import torch, parma, parma.torch as pt

    emb = pt.Embedding(1000, 16, optimizer=pt.Adagrad(lr=0.1))
    head = torch.nn.Linear(16, 1)
    cfg = parma.Config(nodes=1, workers_per_node=1, layout=pt.layout(emb))
    with parma.LocalCluster(cfg) as cluster:
        w = cluster.workers()[0]
        with pt.use_worker(w):
            emb.initialize(seed=0)
            w.barrier()
            sparse, dense = pt.EmbeddingOptimizer(emb), torch.optim.SGD(head.parameters(), lr=0.1)
            batches = [torch.randint(0, 1000, (32, 2)) for _ in range(100)]
            for x in pt.Prefetch(batches, {emb: lambda b: b}):
                sparse.zero_grad(); dense.zero_grad()
                loss = head(emb(x).sum(1)).pow(2).mean()
                loss.backward()
                sparse.step(); dense.step()
            w.barrier()
"""

from ._context import current_worker, use_worker
from ._dist import start_node
from ._embedding import CHUNK_ROWS, INIT_BLOCK_ROWS, Embedding, EmbeddingOptimizer, layout
from ._optim import SGD, Adagrad, Adam, RowOptimizer
from ._prefetch import LOOKAHEAD_EXAMPLES, LOOKAHEAD_MAX, Prefetch, default_lookahead

__all__ = [
    "start_node",
    "Adagrad",
    "Adam",
    "CHUNK_ROWS",
    "Embedding",
    "EmbeddingOptimizer",
    "INIT_BLOCK_ROWS",
    "LOOKAHEAD_EXAMPLES",
    "LOOKAHEAD_MAX",
    "Prefetch",
    "RowOptimizer",
    "SGD",
    "current_worker",
    "default_lookahead",
    "layout",
    "use_worker",
]
