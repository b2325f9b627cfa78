//! Issue 16, fault 1 in one process: a node silent for longer than `peer_timeout` (its links
//! stall for good, or its transport is killed as by a crash). Every other node reports it
//! failed within `peer_timeout` plus a second, once; the silent node reports the others
//! failed too; runtime calls waiting on it end with an error naming it.
//!
//! `cargo test --release -p parma-transport-zmq --test peer_silent -- --nocapture`
#![forbid(unsafe_code)]

mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use parma_core::placement::Homes;
use parma_core::transport::{Transport, TransportEvent};
use parma_core::{Key, NodeId, OpError};
use parma_runtime::host::unpark_waker;
use parma_transport_zmq::ZmqTransport;
use support::workload::{self, run_all};
use support::{options, wait_until, Proxied, DIGEST};

const PEER_TIMEOUT_MS: u64 = 2000;
const PEER_TIMEOUT: Duration = Duration::from_millis(PEER_TIMEOUT_MS);
/// What the issue allows beyond `peer_timeout`.
const MARGIN: Duration = Duration::from_secs(1);

/// Keeps `t` busy (a small frame to every peer it has not seen fail, every 10 ms) until it
/// has seen `expect` fail or `limit` passes; every failure it reported, and when.
fn watch_failures(t: &mut ZmqTransport, expect: &[NodeId], limit: Duration) -> Vec<(NodeId, Instant)> {
    t.register_waker(&unpark_waker(std::thread::current()));
    let me = t.local_id();
    let n = 4;
    let mut failed: Vec<(NodeId, Instant)> = Vec::new();
    let end = Instant::now() + limit;
    while Instant::now() < end && !expect.iter().all(|p| failed.iter().any(|(f, _)| f == p)) {
        for p in (0..n).map(NodeId).filter(|p| *p != me && !failed.iter().any(|(f, _)| f == p)) {
            let _ = t.try_send(p, 16, &mut |b| b.fill(7));
        }
        let _ = t.poll_recv(1024, &mut |_, _| {});
        while let Some(ev) = t.poll_event() {
            if let TransportEvent::PeerFailed(p) = ev {
                failed.push((p, Instant::now()));
            }
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
    failed
}

#[test]
fn a_peer_silent_for_longer_than_peer_timeout_is_reported_failed_in_time() {
    let mut c = Proxied::start(4, &options(PEER_TIMEOUT_MS), DIGEST);
    let mut transports = std::mem::take(&mut c.transports);
    let up = wait_until(Duration::from_secs(5), || {
        transports.iter().all(|t| (0..4).map(NodeId).all(|p| p == t.local_id() || t.is_up(p)))
    });
    assert!(up, "the links did not come up");
    let silent = NodeId(3);
    let others: Vec<NodeId> = (0..3).map(NodeId).collect();
    let since = Mutex::new(None);
    let seen: Vec<Vec<(NodeId, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = transports
            .iter_mut()
            .map(|t| {
                let expect = if t.local_id() == silent { others.clone() } else { vec![silent] };
                s.spawn(move || watch_failures(t, &expect, PEER_TIMEOUT + Duration::from_secs(5)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        // Node 3 falls silent for good: nothing of its links is forwarded any more.
        *since.lock().unwrap() = Some(Instant::now());
        for p in c.proxies_of(silent.0) {
            p.stall(true);
        }
        handles.into_iter().map(|h| h.join().expect("a node thread")).collect()
    });
    let since = since.lock().unwrap().expect("the stall began");
    for (i, f) in seen.iter().enumerate() {
        let after: Vec<(NodeId, Duration)> = f.iter().map(|(p, t)| (*p, t.duration_since(since))).collect();
        eprintln!("node {i} reported failed: {after:?}");
        let expect = if i == usize::from(silent.0) { others.clone() } else { vec![silent] };
        let mut reported: Vec<NodeId> = f.iter().map(|(p, _)| *p).collect();
        reported.sort();
        assert_eq!(reported, expect, "node {i}: each failed peer once, and no other");
        for (p, d) in after {
            assert!(d <= PEER_TIMEOUT + MARGIN, "node {i} reported {p} failed {d:?} after it fell silent");
            // Not before it could have: the peer was heard from until the stall began.
            assert!(
                d + Duration::from_millis(300) >= PEER_TIMEOUT,
                "node {i} reported {p} failed after {d:?}"
            );
        }
    }
}

#[test]
fn calls_waiting_on_a_killed_peer_end_with_an_error_naming_it() {
    const KEYS: u64 = 300;
    let (cfg, digest) = workload::config(3, KEYS);
    let mut c = Proxied::start(3, &options(PEER_TIMEOUT_MS), digest);
    let n = workload::start(&cfg, std::mem::take(&mut c.transports));
    let homes = Homes::new(cfg.placement, cfg.nodes, KEYS);
    let on2: Vec<Key> = (0..KEYS).map(Key).filter(|k| homes.home(*k) == NodeId(2)).take(20).collect();
    assert!(!on2.is_empty());
    // Every worker reaches node 2 once: the links are up and carry requests.
    let workers = run_all(n.workers, |_, w| {
        let mut v = vec![0.0; on2.len() * workload::LEN];
        w.pull(&on2, &mut v).expect("a pull from node 2");
    });
    let kill = n.watches[2].kill_switch();
    let killed_at = Instant::now();
    kill.kill();
    // Workers of nodes 0 and 1 (workers 0..4) pull keys only node 2 holds.
    let (mut waiting, rest): (Vec<_>, Vec<_>) =
        workers.into_iter().map(|(w, _)| w).partition(|w| w.node().0 < 2);
    let results = run_all(std::mem::take(&mut waiting), |_, w| {
        let mut v = vec![0.0; on2.len() * workload::LEN];
        let r = w.pull(&on2, &mut v);
        (r, Instant::now())
    });
    for (w, (r, at)) in &results {
        let took = at.duration_since(killed_at);
        eprintln!("node {} worker {}: {r:?} after {took:?}", w.node(), w.id());
        assert!(
            matches!(
                r,
                Err(OpError::PeerFailed { node: NodeId(2) } | OpError::Unreachable { node: NodeId(2) })
            ),
            "node {} worker {}: {r:?}",
            w.node(),
            w.id()
        );
        assert!(took <= PEER_TIMEOUT + MARGIN, "the call ended {took:?} after the kill");
    }
    for w in &n.watches[..2] {
        let f = w.failures();
        let after: Vec<(NodeId, Duration)> =
            f.iter().map(|(p, t)| (*p, t.duration_since(killed_at))).collect();
        eprintln!("node {} reported failed: {after:?}", w.id());
        assert_eq!(f.len(), 1, "node {}: {after:?}", w.id());
        assert_eq!(f[0].0, NodeId(2));
        assert!(after[0].1 <= PEER_TIMEOUT + MARGIN, "node {}: {after:?}", w.id());
    }
    drop(results);
    drop(rest);
    let t = Instant::now();
    for node in n.nodes {
        // Nodes 0 and 1 lost a peer, node 2 its transport: none drains cleanly, all stop.
        let _ = node.shutdown();
    }
    eprintln!("the three nodes stopped in {:?}", t.elapsed());
}
