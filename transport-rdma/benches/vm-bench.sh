#!/usr/bin/env bash
# The RDMA transport's figures, in one boot of the rdma-vm, each beside the device's own
# tool: one-way throughput at 1 KiB and 64 KiB frames against ib_send_bw, and the round trip
# of a one-key remote pull against ib_send_lat; then ZeroMQ on the same VM for scale.
# Under the VM's CPU emulation absolute figures mean nothing: the ratios are the result.
#
#   cargo bench --no-run (in transport-rdma/), then
#   ../shared/tools/rdma-vm/run-in-vm transport-rdma/benches -- ./vm-bench.sh <rbench binary>
set -euo pipefail
RB=${1:?usage: vm-bench.sh <path of the rbench binary>}
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
    zm=$(echo "$zmq" | awk '{print $4}')
    echo "pull round trip: ib_send_lat 64 B round trip $(awk -v l="$lat" 'BEGIN{printf "%.1f", 2*l}') µs," \
        "parma rdma median $rm µs, parma zmq median $zm µs," \
        "rdma/ib_send_lat $(awk -v a="$rm" -v l="$lat" 'BEGIN{printf "%.2f", a/(2*l)}')," \
        "zmq/ib_send_lat $(awk -v a="$zm" -v l="$lat" 'BEGIN{printf "%.2f", a/(2*l)}')"
    echo "completion modes: pull median channel $rm µs / polling $(echo "$polled" | awk '{print $4}') µs;" \
        "oneway 1024 B with the channel $bwc MB/s (polling: above)"
done
