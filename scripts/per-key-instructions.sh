#!/usr/bin/env bash
# Instructions per local key read (pull) and write (push) through a `Worker`, under callgrind:
# the local_access bench's probe (runtime/benches/local_access/probe.rs), one thread, 1,000 keys
# per operation, warm-up left out. Instruction counts repeat exactly on these machines; times
# do not. Usage: scripts/per-key-instructions.sh [LEN] [KEYS...]
#   LEN: floats per key (default 2, LR on Adult's; the bench's timed rows use 64)
#   KEYS: any of plain home moved-in replica replica25 (default: plain home moved-in replica25)
# Needs valgrind. Prints one row per (keys, op): instructions per key access.
set -euo pipefail
cd "$(dirname "$0")/.."
len=${1:-2}
shift || true
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(plain home moved-in replica25)
bin=$(cargo bench -p parma-runtime --bench local_access --no-run 2>&1 \
    | sed -n 's/.*Executable .*(\(.*local_access-[0-9a-f]*\)).*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "could not find the local_access bench binary" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-10s %-5s %4s %14s\n' keys op len 'instr/key'
for kind in "${kinds[@]}"; do
    for op in pull push; do
        log=$(PARMA_CALLGRIND="$kind:$op:$len" valgrind --tool=callgrind \
            --toggle-collect='*Probe::measured*' --callgrind-out-file="$out/cg.out" "$bin" 2>/dev/null)
        accesses=$(sed -n 's/^PARMA_CALLGRIND .*: \([0-9]*\) key accesses measured$/\1/p' <<<"$log")
        ir=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$out/cg.out")
        [ -n "$accesses" ] && [ -n "$ir" ] || { echo "$kind $op: no result" >&2; exit 1; }
        printf '%-10s %-5s %4s %14.1f\n' "$kind" "$op" "$len" "$(echo "$ir / $accesses" | bc -l)"
        cp "$out/cg.out" "${PARMA_CALLGRIND_KEEP:-$out}/callgrind.$kind.$op.$len" 2>/dev/null || true
    done
done
