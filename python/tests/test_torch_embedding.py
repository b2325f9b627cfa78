"""parma.torch against torch's own sparse embeddings, on a one-worker LocalCluster."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import parma  # noqa: E402
import parma.torch as pt  # noqa: E402


def _train(make_opt, make_ref, steps=100):
    torch.manual_seed(0)
    emb = pt.Embedding(20, 4, optimizer=make_opt())
    cfg = parma.Config(nodes=1, workers_per_node=1, layout=pt.layout(emb))
    ref = torch.nn.Embedding(20, 4, sparse=True)
    head, ref_head = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    ref_head.load_state_dict(head.state_dict())
    with parma.LocalCluster(cfg) as cluster:
        w = cluster.workers()[0]
        with pt.use_worker(w):
            emb.initialize(part=0, parts=1)
            w.barrier()
            ref.weight.data[:] = emb.weights()
            sparse, ref_sparse = pt.EmbeddingOptimizer(emb), make_ref(ref.parameters())
            dense, ref_dense = torch.optim.SGD(head.parameters(), lr=0.05), torch.optim.SGD(ref_head.parameters(), lr=0.05)
            g = torch.Generator().manual_seed(1)
            for _ in range(steps):
                a = torch.randint(0, 20, (8, 3), generator=g)  # duplicates within and across lookups
                b = torch.randint(0, 20, (5,), generator=g)
                for m, h, opts in ((emb, head, (sparse, dense)), (ref, ref_head, (ref_sparse, ref_dense))):
                    for o in opts:
                        o.zero_grad()
                    loss = h(m(a)).pow(2).mean() + 0.0 * m(b).sum()  # b's rows: zero gradient, still present
                    loss.backward()
                    for o in opts:
                        o.step()
            got = emb.weights()
    return got, ref.weight.detach(), head, ref_head


@pytest.mark.parametrize(
    "make_opt,make_ref",
    [
        (lambda: pt.SGD(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
        (lambda: pt.Adagrad(0.1), lambda p: torch.optim.Adagrad(p, lr=0.1)),
        (lambda: pt.Adam(0.01, step="global"), lambda p: torch.optim.SparseAdam(p, lr=0.01)),
    ],
    ids=["sgd", "adagrad", "sparse_adam"],
)
def test_matches_torch_sparse_embedding(make_opt, make_ref):
    got, want, head, ref_head = _train(make_opt, make_ref)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(head.weight, ref_head.weight, atol=1e-5, rtol=1e-5)


def test_bad_indices_raise():
    emb = pt.Embedding(10, 2)
    cfg = parma.Config(nodes=1, workers_per_node=1, layout=pt.layout(emb))
    with parma.LocalCluster(cfg) as cluster:
        with pt.use_worker(cluster.workers()[0]):
            with pytest.raises(IndexError, match="out of range"):
                emb(torch.tensor([3, 10]))
            with pytest.raises(IndexError):
                emb(torch.tensor([-1]))
            with pytest.raises(TypeError):
                emb(torch.tensor([1.0]))


def test_no_worker_is_a_clear_error():
    emb = pt.Embedding(10, 2)
    pt.layout(emb)
    pt.use_worker(None)
    with pytest.raises(RuntimeError, match="use_worker"):
        emb(torch.tensor([1]))


def test_prefetch_announces_and_advances_the_clock():
    emb = pt.Embedding(50, 2)
    cfg = parma.Config(nodes=1, workers_per_node=1, layout=pt.layout(emb))
    with parma.LocalCluster(cfg) as cluster:
        w = cluster.workers()[0]
        with pt.use_worker(w):
            emb.initialize(part=0, parts=1)
            batches = [torch.tensor([i, i + 1]) for i in range(0, 40, 2)]
            seen = []
            for batch in pt.Prefetch(batches, {emb: lambda b: b}, lookahead=3):
                seen.append(w.clock)
                emb(batch)
            assert seen == list(range(20))
            assert w.clock == 20
