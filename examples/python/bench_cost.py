"""Side-by-side cost of the Python examples: parma's embedding against torch's, and two
processes against one, measured in one sitting with the runs alternating.

Each round runs the example once per variant, in alternating order (ABAB...), and reads the
``median_epoch_s=`` of its ``RESULT`` line. The report is each variant's median over the
rounds and the ratio of the medians against the first variant, plus every round's figures,
so that a noisy round is visible.

    python examples/python/bench_cost.py                       # UMLS: parma vs torch, 1 process
    python examples/python/bench_cost.py --vs world            # UMLS parma: torchrun 2 vs 1
    python examples/python/bench_cost.py --example mf_movielens.py --rounds 3 -- --epochs 5

Arguments after ``--`` go to the example. This is a benchmark, not a test: the figures are
only as quiet as the machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT = re.compile(r"^RESULT .*\bmedian_epoch_s=([0-9.]+)")
QUALITY = re.compile(r"\b(mrr|rmse|auc)=([0-9.]+)")


def variants(vs: str, example: Path, extra: list[str]) -> list[tuple[str, list[str]]]:
    """The commands to compare: the baseline first."""
    py = [sys.executable, str(example)]
    if vs == "embedding":
        return [
            ("torch", py + ["--embedding", "torch"] + extra),
            ("parma", py + ["--embedding", "parma"] + extra),
        ]
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [
        ("1 process", run + ["--nproc-per-node", "1", str(example)] + extra),
        ("2 processes", run + ["--nproc-per-node", "2", str(example)] + extra),
    ]


def run_once(name: str, cmd: list[str]) -> tuple[float, str]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in out.stdout.splitlines():
        m = RESULT.match(line)
        if m:
            q = QUALITY.search(line)
            return float(m.group(1)), f"{q.group(1)} {q.group(2)}" if q else ""
    sys.exit(f"{name}: no RESULT line (exit {out.returncode})\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--example", default="complex_umls.py", help="an example in examples/python/")
    p.add_argument("--vs", choices=["embedding", "world"], default="embedding",
                   help="embedding: torch.nn.Embedding(sparse=True) vs parma.torch.Embedding, one "
                   "process; world: parma under torchrun, 1 vs 2 processes")
    p.add_argument("--rounds", type=int, default=5, help="runs of each variant")
    p.add_argument("extra", nargs="*", help="arguments for the example (after --)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    example = HERE / args.example
    if not example.is_file():
        p.error(f"no example {example}")
    vs = variants(args.vs, example, args.extra)
    times: dict[str, list[float]] = {name: [] for name, _ in vs}
    for r in range(args.rounds):
        order = vs if r % 2 == 0 else vs[::-1]
        for name, cmd in order:
            t, q = run_once(name, cmd)
            times[name].append(t)
            print(f"round {r + 1}: {name:<12} median epoch {t:.4f} s  {q}", flush=True)
    base = statistics.median(times[vs[0][0]])
    print(f"\n{args.example} {' '.join(args.extra)}, {args.rounds} rounds, medians of the rounds' median epochs:")
    for name, _ in vs:
        m = statistics.median(times[name])
        print(f"  {name:<12} {m:.4f} s  {m / base:.3f}x {vs[0][0]}")


if __name__ == "__main__":
    main()
