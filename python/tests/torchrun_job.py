"""A job for test_torchrun.py, started by a real torchrun with 2 processes.

`sums`: torch.distributed (gloo) and parma side by side; every rank pushes known counts,
rank 0 checks the exact totals and torch's all_reduce agrees. `kill`: rank 1 kills itself
with SIGKILL after the first barrier; rank 0 must raise parma.PeerFailedError (no hang).
"""

import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import parma
import parma.torch as pt

KEYS, DIM, STEPS = 2000, 4, 300


def main(mode: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = parma.Config(world, 1, parma.Layout.uniform(KEYS, DIM))
    node = pt.start_node(cfg, peer_timeout=1.0)
    w = node.workers()[0]
    w.barrier()
    if mode == "kill":
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        try:
            for step in range(1_000_000):
                k = np.arange(step % 2, KEYS, 2, dtype=np.uint64)
                w.pull(k)
                w.barrier()
        except parma.PeerFailedError as e:
            print(f"PEER FAILED after {time.monotonic() - t0:.2f} s: {e}", flush=True)
            node.abort()
            os._exit(0)
        print("no error", flush=True)
        os._exit(3)
    rng = np.random.default_rng(rank)
    for step in range(STEPS):
        k = rng.integers(0, KEYS, size=8, dtype=np.uint64)
        w.announce(k, step, step + 1)
        w.push(k, np.ones((8, DIM), np.float32))
        w.advance_clock()
    w.barrier()
    expected = np.zeros(KEYS)
    for r in range(world):
        g = np.random.default_rng(r)
        for _ in range(STEPS):
            np.add.at(expected, g.integers(0, KEYS, size=8, dtype=np.uint64).astype(np.int64), 1)
    got = w.pull(np.arange(KEYS, dtype=np.uint64))
    assert np.array_equal(got[:, 0], expected), "sums differ"
    total = torch.tensor([float(STEPS * 8)])
    dist.all_reduce(total)
    assert total.item() == got[:, 0].sum(), (total.item(), got[:, 0].sum())
    node.shutdown()
    dist.destroy_process_group()
    print(f"SUMS OK rank {rank}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
