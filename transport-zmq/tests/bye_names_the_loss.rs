//! A node that stops because it lost a peer says which in its goodbye, and the nodes it leaves
//! behind report that peer failed first, then the one that left: what waits on them fails
//! naming the failure, not the node that left because of it.
//!
//! Three nodes whose links run through proxies. The proxy between nodes 1 and 2 stops
//! forwarding, so node 1 finds node 2 silent while node 0 still hears both. Node 1 closes; node
//! 0 must report node 2 failed, then node 1, long before it could find anything by itself.
//!
//! `cargo test --release -p parma-transport-zmq --test bye_names_the_loss -- --nocapture`
#![forbid(unsafe_code)]

mod support;

use std::time::{Duration, Instant};

use parma_core::transport::{Transport, TransportEvent};
use parma_core::NodeId;
use parma_transport_zmq::ZmqTransport;
use support::{options, Proxied, DIGEST};

const PEER_TIMEOUT_MS: u64 = 1000;

/// Polls `t` (receiving and dropping frames) for up to `limit`, until it has reported `n`
/// failed peers; those peers, in the order reported.
fn failures(t: &mut ZmqTransport, n: usize, limit: Duration) -> Vec<NodeId> {
    let end = Instant::now() + limit;
    let mut failed = Vec::new();
    while failed.len() < n && Instant::now() < end {
        let _ = t.poll_recv(1024, &mut |_, _| {});
        while let Some(ev) = t.poll_event() {
            if let TransportEvent::PeerFailed(p) = ev {
                failed.push(p);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    failed
}

#[test]
fn the_goodbye_of_a_node_that_lost_a_peer_names_it() {
    let mut c = Proxied::start(3, &options(PEER_TIMEOUT_MS), DIGEST);
    let mut ts = std::mem::take(&mut c.transports);
    // Every link carries a frame: all up.
    for i in 0..3u16 {
        for j in (0..3u16).filter(|j| *j != i) {
            ts[usize::from(i)].try_send(NodeId(j), 8, &mut |b| b.fill(1)).expect("a first frame");
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let link_12 = c.proxies.iter().find(|((i, j), _)| (*i, *j) == (1, 2)).map(|(_, p)| p).expect("proxy 1-2");
    link_12.stall(true);
    let stalled = Instant::now();

    let mut t2 = ts.pop().expect("node 2");
    let mut t1 = ts.pop().expect("node 1");
    let mut t0 = ts.pop().expect("node 0");
    let lost_by_1 = failures(&mut t1, 1, Duration::from_millis(PEER_TIMEOUT_MS * 3));
    assert_eq!(lost_by_1, [NodeId(2)], "node 1 finds node 2 silent");
    let noticed = stalled.elapsed();
    t1.close();

    // Node 2 keeps talking to node 0 meanwhile: node 0 has nothing of its own to find.
    let keep_2 = std::thread::spawn(move || {
        let _ = failures(&mut t2, 2, Duration::from_millis(PEER_TIMEOUT_MS * 2));
        t2
    });
    let lost_by_0 = failures(&mut t0, 2, Duration::from_millis(PEER_TIMEOUT_MS / 2));
    let reported = stalled.elapsed();
    eprintln!("node 1 noticed after {noticed:?}; node 0 reported {lost_by_0:?} {reported:?} after the stall");
    assert_eq!(lost_by_0, [NodeId(2), NodeId(1)], "node 0 names the failure first, then the node that left");
    assert!(t0.stats().peers_failed == 2, "{:?}", t0.stats());
    let t2 = keep_2.join().expect("node 2's thread");
    drop((t0, t1, t2));
}
