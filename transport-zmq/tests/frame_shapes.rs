//! Frames of every size on both sides of the one-part bound (a small frame goes out in one
//! ZMTP part with its head, a large one in two): each arrives whole, in order, on both kinds
//! of link (node 0 dials node 1's ROUTER; node 1 answers through it).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use parma_core::transport::Transport;
use parma_core::NodeId;
use parma_runtime::startup::ClusterToken;
use parma_transport_zmq::{local_cluster, ZmqOptions};

const LENS: [usize; 8] = [1, 9, 1000, 8 << 10, (8 << 10) + 1, 20_000, 64 << 10, 300_000];

fn byte(from: usize, n: usize, i: usize) -> u8 {
    (from * 131 + n * 7 + i) as u8
}

#[test]
fn small_and_large_frames_arrive_whole_and_in_order() {
    let mut ends = local_cluster(2, &ZmqOptions::loopback(), 11, Arc::new(ClusterToken::generate()))
        .expect("two nodes on 127.0.0.1");
    let total = 4 * LENS.len();
    let (mut sent, mut next) = ([0usize; 2], [0usize; 2]);
    let until = Instant::now() + Duration::from_secs(30);
    while next != [total, total] {
        assert!(Instant::now() < until, "frames missing after 30 s: {next:?} of {total}");
        for i in 0..2 {
            while sent[i] < total {
                let n = sent[i];
                let len = LENS[n % LENS.len()];
                let fill = &mut |b: &mut [u8]| b.iter_mut().enumerate().for_each(|(j, x)| *x = byte(i, n, j));
                match ends[i].try_send(NodeId(1 - i as u16), len, fill) {
                    Ok(()) => sent[i] += 1,
                    Err(_) => break,
                }
            }
            let from = 1 - i;
            let mut got = Vec::new();
            ends[i].poll_recv(usize::MAX, &mut |p, f| got.push((p, f.to_vec()))).expect("open");
            for (p, f) in got {
                let n = next[i];
                assert_eq!(p, NodeId(from as u16));
                assert_eq!(f.len(), LENS[n % LENS.len()], "frame {n} from node {from}: wrong length");
                assert!(
                    f.iter().enumerate().all(|(j, x)| *x == byte(from, n, j)),
                    "frame {n} from node {from}"
                );
                next[i] += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
