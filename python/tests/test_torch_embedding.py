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


class RowwiseSparseAdam:
    """The reference of ``Adam(step="row")``: one ``torch.optim.SparseAdam`` per row, stepped
    when the row is in the step's sparse gradient, so each row corrects its bias by its own
    count of updates."""

    def __init__(self, params, lr):
        (self.weight,) = list(params)
        self.lr = lr
        self.rows = {}

    def zero_grad(self):
        self.weight.grad = None

    def step(self):
        g = self.weight.grad.coalesce()
        with torch.no_grad():
            for r, gr in zip(g.indices()[0].tolist(), g.values()):
                if r not in self.rows:
                    p = torch.nn.Parameter(self.weight.data[r : r + 1].clone())
                    self.rows[r] = (p, torch.optim.SparseAdam([p], lr=self.lr))
                p, opt = self.rows[r]
                p.data.copy_(self.weight.data[r : r + 1])
                p.grad = torch.sparse_coo_tensor(torch.zeros(1, 1, dtype=torch.long), gr.unsqueeze(0), (1, gr.numel()))
                opt.step()
                self.weight.data[r] = p.data[0]


@pytest.mark.parametrize(
    "make_opt,make_ref",
    [
        (lambda: pt.SGD(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
        (lambda: pt.Adagrad(0.1), lambda p: torch.optim.Adagrad(p, lr=0.1)),
        (lambda: pt.Adam(0.01, step="global"), lambda p: torch.optim.SparseAdam(p, lr=0.01)),
        (lambda: pt.Adam(0.01), lambda p: RowwiseSparseAdam(p, lr=0.01)),
    ],
    ids=["sgd", "adagrad", "sparse_adam", "adam_row"],
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


def test_two_embeddings_in_one_model_match_torch():
    """Two tables in one layout, one EmbeddingOptimizer over the model, gradients from both
    and from two lookups of one table in the same loss."""
    torch.manual_seed(0)
    users, items = pt.Embedding(30, 3, optimizer=pt.Adagrad(0.2)), pt.Embedding(50, 3, optimizer=pt.Adagrad(0.2))
    model = torch.nn.ModuleDict({"u": users, "i": items})
    ref_u, ref_i = torch.nn.Embedding(30, 3, sparse=True), torch.nn.Embedding(50, 3, sparse=True)
    cfg = parma.Config(nodes=1, workers_per_node=1, layout=pt.layout(users, items))
    with parma.LocalCluster(cfg) as cluster:
        w = cluster.workers()[0]
        with pt.use_worker(w):
            users.initialize(seed=1, part=0, parts=1)
            items.initialize(seed=2, part=0, parts=1)
            w.barrier()
            ref_u.weight.data[:] = users.weights()
            ref_i.weight.data[:] = items.weights()
            sparse = pt.EmbeddingOptimizer(model)
            assert sparse.embeddings == [users, items]
            ref_opt = torch.optim.Adagrad([ref_u.weight, ref_i.weight], lr=0.2)
            g = torch.Generator().manual_seed(3)
            for _ in range(100):
                u = torch.randint(0, 30, (6,), generator=g)
                i, j = torch.randint(0, 50, (6,), generator=g), torch.randint(0, 50, (6,), generator=g)
                for uu, ii, opt in ((users, items, sparse), (ref_u, ref_i, ref_opt)):
                    opt.zero_grad()
                    eu = uu(u)
                    loss = torch.nn.functional.softplus(-(eu * ii(i)).sum(1) + (eu * ii(j)).sum(1)).sum()
                    loss.backward()
                    opt.step()
            torch.testing.assert_close(users.weights(), ref_u.weight.detach(), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(items.weights(), ref_i.weight.detach(), atol=1e-5, rtol=1e-5)


def test_initialize_shares_rows_among_all_workers_by_default(run_on_workers):
    """initialize() without part/parts on 2 nodes x 2 workers writes every row once, with
    the same weights a single worker writes (they depend on the seed, not on the world)."""
    rows = 5 * pt.INIT_BLOCK_ROWS + 17
    emb = pt.Embedding(rows, 2, optimizer=pt.Adam())
    with parma.LocalCluster(parma.Config(1, 1, pt.layout(emb))) as one:
        w = one.workers()[0]
        with pt.use_worker(w):
            emb.initialize(seed=9, part=0, parts=1)
            w.barrier()
            want = emb.values()
    with parma.LocalCluster(parma.Config(2, 2, pt.layout(emb))) as four:
        ws = four.workers()
        assert [w.rank for w in ws] == [0, 1, 2, 3]
        assert {(w.nodes, w.workers_per_node) for w in ws} == {(2, 2)}
        def run(w):
            with pt.use_worker(w):
                emb.initialize(seed=9)
                written = w.stats()["keys_pushed_local"] + w.stats()["keys_pushed_remote"]
                w.barrier()
                return written

        written = run_on_workers(run, ws)
        assert sum(written) == rows and all(n > 0 for n in written)
        with pt.use_worker(ws[0]):
            got = emb.values()
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert got[:, 2:].abs().max() == 0  # Adam's state starts at zero


def test_initialize_rejects_half_a_share():
    emb = pt.Embedding(10, 2)
    with parma.LocalCluster(parma.Config(1, 1, pt.layout(emb))) as c:
        with pt.use_worker(c.workers()[0]):
            with pytest.raises(ValueError, match="both part and parts"):
                emb.initialize(part=0)
            with pytest.raises(ValueError, match="part must be in"):
                emb.initialize(part=3, parts=2)
