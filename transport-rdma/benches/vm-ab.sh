#!/usr/bin/env bash
# One-way throughput of two builds of rbench (say, before and after a change) in one boot of
# the rdma-vm, alternating, each round beside `ib_send_bw` on the same device: the ratios
# within a round are the result (absolute figures under the VM's CPU emulation mean nothing).
#
#   ../shared/tools/rdma-vm/run-in-vm . -- ./transport-rdma/benches/vm-ab.sh <rbench A> <rbench B>
set -euo pipefail
A=${1:?usage: vm-ab.sh <rbench A> <rbench B>}
B=${2:?usage: vm-ab.sh <rbench A> <rbench B>}
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

for r in $(seq 1 "$ROUNDS"); do
    for spec in "1024 20000" "65536 2000"; do
        set -- $spec
        # A and B take turns going first, so neither always follows ib_send_bw.
        if [ $((r % 2)) = 1 ]; then first=$A; second=$B; else first=$B; second=$A; fi
        ref=$(bw "$1" "$2")
        x=$("$first" oneway rdma "$1" "$2" | awk '{print $4}')
        y=$("$second" oneway rdma "$1" "$2" | awk '{print $4}')
        ref2=$(bw "$1" "$2")
        if [ "$first" = "$A" ]; then a=$x; b=$y; else a=$y; b=$x; fi
        echo "round $r, $1 B: ib_send_bw $ref / $ref2 MB/s; A $a MB/s ($(ratio "$a" "$ref") / $(ratio "$a" "$ref2")); B $b MB/s ($(ratio "$b" "$ref") / $(ratio "$b" "$ref2"))"
    done
done
