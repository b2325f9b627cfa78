#!/usr/bin/env bash
# The RDMA transport's figures, in one boot of the rdma-vm, each beside the device's own
# tool: one-way throughput at 1 KiB and 64 KiB frames against ib_send_bw, and the round trip
# of a one-key remote pull against ib_send_lat; then ZeroMQ on the same VM for scale.
# Under the VM's CPU emulation absolute figures mean nothing: the ratios are the result.
#
# From the repository root (the VM sees only the directory it shares, here the whole
# repository, so the bench binary under target/ is visible inside):
#
#   (cd transport-rdma && cargo bench --no-run)      # builds target/release/deps/rbench-<hash>
#   ROUNDS=3 ../shared/tools/rdma-vm/run-in-vm -e ROUNDS . -- ./transport-rdma/benches/vm-bench.sh
#
# An argument names the rbench binary to run; without one the newest target/release/deps/rbench-*.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
RB=${1:-$(ls -t "$here"/../../target/release/deps/rbench-* 2>/dev/null | grep -v '\.d$' | head -1 || true)}
[ -n "$RB" ] && [ -x "$RB" ] || {
    echo "vm-bench.sh: no rbench binary; build one with (cd transport-rdma && cargo bench --no-run)" >&2
    exit 2
}
echo "rbench: $RB"
DEV=${RDMA_VM_DEVICE:-rxe0}
GID=${RDMA_VM_GID_INDEX:-1}
ROUNDS=${ROUNDS:-3}

# perftest: a server and a client on the same device, over 127.0.0.1 for its own set-up.
perftest() { # tool bytes iterations -> the client's result line
    local tool=$1 bytes=$2 iters=$3
    "$tool" -d "$DEV" -x "$GID" -s "$bytes" -n "$iters" -F >/dev/null 2>&1 &
    local srv=$!
    sleep 1
    "$tool" -d "$DEV" -x "$GID" -s "$bytes" -n "$iters" -F 127.0.0.1 2>/dev/null | awk -v b="$bytes" '$1 == b'
    wait "$srv" || true
}

for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r"
    for spec in "1024 20000" "65536 2000"; do
        set -- $spec
        bw=$(perftest ib_send_bw "$1" "$2" | awk '{print $4}')
        ours=$("$RB" oneway rdma "$1" "$2" | awk '{print $4}')
        zmq=$("$RB" oneway zmq "$1" "$2" | awk '{print $4}')
        echo "oneway $1 B: ib_send_bw $bw MB/s, parma rdma $ours MB/s, parma zmq $zmq MB/s," \
            "rdma/ib_send_bw $(awk -v a="$ours" -v b="$bw" 'BEGIN{printf "%.2f", a/b}')," \
            "zmq/ib_send_bw $(awk -v a="$zmq" -v b="$bw" 'BEGIN{printf "%.2f", a/b}')"
    done
    # ib_send_lat prints half the round trip (t_typical, column 5): twice it is the round trip.
    lat=$(perftest ib_send_lat 64 2000 | awk '{print $5}')
    rdma=$(RBENCH_COMPLETION=channel "$RB" pull rdma 2000)
    polled=$(RBENCH_COMPLETION=poll "$RB" pull rdma 2000)
    bwc=$(RBENCH_COMPLETION=channel "$RB" oneway rdma 1024 20000 | awk '{print $4}')
    zmq=$("$RB" pull zmq 2000)
    rm=$(echo "$rdma" | awk '{print $4}')
    pm=$(echo "$polled" | awk '{print $4}')
    zm=$(echo "$zmq" | awk '{print $4}')
    # A run of ib_send_lat that printed no finite figure (it sometimes prints inf) gives no ratio.
    case $lat in '' | *[!0-9.]*) lat=0 ;; esac
    rt() { awk -v a="$1" -v l="$lat" 'BEGIN{ if (l > 0 && a != "") printf "%.2f", a/(2*l); else print "-" }'; }
    echo "pull round trip: ib_send_lat 64 B round trip $(awk -v l="$lat" 'BEGIN{ if (l > 0) printf "%.1f", 2*l; else print "(none printed)" }') µs," \
        "parma rdma median $pm µs polling (the default), $rm µs with the completion channel," \
        "parma zmq median $zm µs;" \
        "rdma polling/ib_send_lat $(rt "$pm"), rdma channel/ib_send_lat $(rt "$rm"), zmq/ib_send_lat $(rt "$zm")"
    echo "oneway 1024 B with the completion channel: $bwc MB/s (polling: above)"
done
