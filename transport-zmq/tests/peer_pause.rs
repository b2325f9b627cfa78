//! Issue 16, fault 3, in one process: a node paused for less than `peer_timeout`. The proxies
//! of its links stop forwarding (connections stay open, as when its process is stopped), for
//! 60 % of `peer_timeout`, then forward again: the run finishes with the exact result, and no
//! node reports a failed peer.
//!
//! `cargo test --release -p parma-transport-zmq --test peer_pause -- --nocapture`
#![forbid(unsafe_code)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parma_transport_zmq::ZmqStats;
use support::exchange::{exchange, Plan};
use support::workload::{self, check_sums, finalize_all, push_rounds};
use support::{options, wait_until, Proxied, DIGEST};

const PEER_TIMEOUT_MS: u64 = 2000;
/// 60 % of `peer_timeout`.
const PAUSE: Duration = Duration::from_millis(PEER_TIMEOUT_MS * 6 / 10);

/// Stops forwarding everything of node `node`'s links for [`PAUSE`]; when it resumed.
fn pause(c: &Proxied, node: u16) -> Instant {
    for p in c.proxies_of(node) {
        p.stall(true);
    }
    std::thread::sleep(PAUSE);
    for p in c.proxies_of(node) {
        p.stall(false);
    }
    Instant::now()
}

#[test]
fn numbered_frames_survive_a_paused_peer() {
    let mut c = Proxied::start(4, &options(PEER_TIMEOUT_MS), DIGEST);
    let mut transports = std::mem::take(&mut c.transports);
    let plan = Plan {
        frames_per_pair: None,
        frame_len: 512,
        limit: Duration::from_secs(20),
        burst: 8,
        pace: Some(Duration::from_millis(1)),
    };
    let reports = exchange(&mut transports, plan, |_| {
        std::thread::sleep(Duration::from_millis(500));
        pause(&c, 3);
        std::thread::sleep(Duration::from_millis(500));
    });
    for (me, r) in reports.iter().enumerate() {
        assert!(r.errors.is_empty(), "node {me}: {:#?}", r.errors);
        assert!(r.failed.is_empty(), "node {me} reported failed peers: {:?}", r.failed);
        assert!(r.done_at.is_some(), "node {me} did not finish: {:?} {:?}", r.sent, r.received);
    }
    let stats: Vec<ZmqStats> = transports.iter().map(|t| t.stats()).collect();
    eprintln!("paused node 3 for {PAUSE:?} (peer_timeout {PEER_TIMEOUT_MS} ms): {:#?}", stats[3]);
    for s in &stats {
        assert_eq!(s.peers_failed, 0, "{s:?}");
    }
    // The links of node 3 stalled with frames in flight: they went out again.
    assert!(stats[3].frames_retransmitted > 0, "{:?}", stats[3]);
}

#[test]
fn exact_sums_with_a_paused_peer() {
    const KEYS: u64 = 400;
    let (cfg, digest) = workload::config(4, KEYS);
    let mut c = Proxied::start(4, &options(PEER_TIMEOUT_MS), digest);
    let n = workload::start(&cfg, std::mem::take(&mut c.transports));
    let stop = AtomicBool::new(false);
    let done = std::thread::scope(|s| {
        let workers = s.spawn(|| push_rounds(n.workers, KEYS, &stop, 100_000, Duration::from_secs(20)));
        let up =
            wait_until(Duration::from_secs(5), || n.watches.iter().all(|w| w.stats().frames_received > 100));
        assert!(up, "the workload did not start");
        let before = n.watches[2].stats().frames_received;
        pause(&c, 2);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        let after = n.watches[2].stats().frames_received;
        assert!(after > before, "node 2 received nothing after its pause");
        workers.join().expect("the workers")
    });
    let workers = check_sums(done, KEYS);
    finalize_all(workers);
    for w in &n.watches {
        assert!(w.failures().is_empty(), "node {} reported failed peers: {:?}", w.id(), w.failures());
    }
    let stats: Vec<ZmqStats> = n.watches.iter().map(|w| w.stats()).collect();
    eprintln!("paused node 2 for {PAUSE:?}: node 2 {:?}", stats[2]);
    for node in n.nodes {
        let s = node.shutdown().expect("a clean shutdown");
        assert_eq!(s.node.ops_failed, 0);
    }
}
