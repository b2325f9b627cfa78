"""Two processes under a real torchrun: exact sums beside torch.distributed, a killed node."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("torchrun_job.py")
pytestmark = pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not installed")


def torchrun(mode: str, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARMA_")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "0",
        # The agent looks at its children rarely, so that rank 0 finds the dead peer itself.
        "--monitor-interval",
        "30",
        str(JOB),
        mode,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def test_sums_across_two_processes_beside_torch_distributed():
    r = torchrun("sums", 180)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "SUMS OK rank 0" in out and "SUMS OK rank 1" in out, out


def test_killed_node_makes_the_other_raise():
    r = torchrun("kill", 180)
    out = r.stdout + r.stderr
    assert "PEER FAILED after" in out, out
    line = next(l for l in out.splitlines() if "PEER FAILED after" in l)
    waited = float(line.split("after ")[1].split(" s")[0])
    # The peer timeout is 1 s; this only rules out a hang (no wall-clock performance bound).
    assert waited < 60, line
