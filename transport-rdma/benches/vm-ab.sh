#!/usr/bin/env bash
# One-way throughput of several builds or settings of rbench (say, before and after a change)
# in one boot of the rdma-vm, taking turns, each round between two runs of `ib_send_bw` on the
# same device: the ratios within a round are the result (absolute figures under the VM's CPU
# emulation mean nothing). Each argument is a command (an rbench binary, or a script that
# runs one with RBENCH_* settings).
#
#   ../shared/tools/rdma-vm/run-in-vm . -- ./transport-rdma/benches/vm-ab.sh <rbench A> <rbench B> ...
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: vm-ab.sh <rbench A> <rbench B> ..." >&2; exit 2; }
DEV=${RDMA_VM_DEVICE:-rxe0}
GID=${RDMA_VM_GID_INDEX:-1}
ROUNDS=${ROUNDS:-3}

bw() { # bytes iterations -> ib_send_bw's average MB/s
    ib_send_bw -d "$DEV" -x "$GID" -s "$1" -n "$2" -F >/dev/null 2>&1 &
    local srv=$!
    sleep 1
    ib_send_bw -d "$DEV" -x "$GID" -s "$1" -n "$2" -F 127.0.0.1 2>/dev/null | awk -v b="$1" '$1 == b {print $4}'
    wait "$srv" || true
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }'; }

cmds=("$@")
n=${#cmds[@]}
for r in $(seq 1 "$ROUNDS"); do
    for spec in "1024 20000" "65536 2000"; do
        set -- $spec
        ref=$(bw "$1" "$2")
        declare -A got=()
        # Each round starts one later in the list, so that no build always follows ib_send_bw.
        for k in $(seq 0 $((n - 1))); do
            i=$(((k + r - 1) % n))
            got[$i]=$("${cmds[$i]}" oneway rdma "$1" "$2" 2>/dev/null | awk '{print $4}')
        done
        ref2=$(bw "$1" "$2")
        line="round $r, $1 B: ib_send_bw $ref / $ref2 MB/s"
        for i in $(seq 0 $((n - 1))); do
            line+="; $(basename "${cmds[$i]}") ${got[$i]} MB/s ($(ratio "${got[$i]}" "$ref") / $(ratio "${got[$i]}" "$ref2"))"
        done
        echo "$line"
        unset got
    done
done
