//! Issue 16, fault 2: every TCP connection cut several times mid-run. Each link runs through
//! a proxy of the test's that resets all its connections on command; the run finishes with
//! nothing lost, doubled or reordered, and the counters show the reconnections.
//!
//! `cargo test --release -p parma-transport-zmq --test cut_connections -- --nocapture`
//! prints the figures.
#![forbid(unsafe_code)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parma_core::NodeId;
use parma_transport_zmq::ZmqStats;
use support::exchange::{exchange, Plan};
use support::workload::{self, check_sums, finalize_all, push_rounds};
use support::{options, wait_until, Proxied, DIGEST};

/// Times every connection is cut.
const CUTS: usize = 6;
/// Frames per ordered pair in the transport-level run.
const FRAMES: u64 = 20_000;

fn sum(stats: &[ZmqStats], f: impl Fn(&ZmqStats) -> u64) -> u64 {
    stats.iter().map(f).sum()
}

/// Numbered frames between 4 nodes, every ordered pair, while every connection is reset 6
/// times: every frame arrives once, in order, intact.
#[test]
fn numbered_frames_survive_connections_cut_mid_run() {
    let mut c = Proxied::start(4, &options(3000), DIGEST);
    let plan = Plan {
        frames_per_pair: Some(FRAMES),
        frame_len: 200,
        limit: Duration::from_secs(25),
        burst: 8,
        pace: Some(Duration::from_millis(1)),
    };
    let started = Instant::now();
    let proxies = &c.proxies;
    let mut cut_at = Vec::new();
    let mut cut_conns = 0;
    let reports = exchange(&mut c.transports, plan, |finished| {
        for _ in 0..CUTS {
            // Every link is open again, and has carried frames for a while.
            let up =
                wait_until(Duration::from_secs(5), || proxies.iter().all(|(_, p)| p.open_connections() > 0));
            assert!(up, "a link was not opened again within 5 s");
            std::thread::sleep(Duration::from_millis(150));
            if finished.load(Ordering::SeqCst) {
                break;
            }
            cut_conns += proxies.iter().map(|(_, p)| p.cut()).sum::<usize>();
            cut_at.push(Instant::now());
        }
    });
    for (me, r) in reports.iter().enumerate() {
        assert!(r.errors.is_empty(), "node {me}: {:#?}", r.errors);
        assert!(r.failed.is_empty(), "node {me} reported failed peers: {:?}", r.failed);
        assert!(r.done_at.is_some(), "node {me} did not finish: {:?} {:?}", r.sent, r.received);
    }
    let done = reports.iter().filter_map(|r| r.done_at).min().expect("finished");
    assert_eq!(cut_at.len(), CUTS, "the run ended before every cut");
    assert!(cut_at.iter().all(|t| *t < done), "a cut came after a node had finished");
    let stats: Vec<ZmqStats> = c.transports.iter().map(|t| t.stats()).collect();
    report("frames", &stats, cut_conns, started.elapsed());
    check_counters(&stats, cut_conns);
    for s in &stats {
        assert_eq!(s.frames_received, 3 * FRAMES);
    }
}

/// The workload through the runtime (4 nodes, adaptive management, intents, pushes of
/// integer increments) while every connection is reset 6 times; the sums are exact.
#[test]
fn exact_sums_with_connections_cut_mid_run() {
    const KEYS: u64 = 400;
    let (cfg, digest) = workload::config(4, KEYS);
    let c = Proxied::start(4, &options(3000), digest);
    let started = Instant::now();
    let n = workload::start(&cfg, c.transports);
    let watches = n.watches.clone();
    let all_up = || watches.iter().all(|w| (0..4).filter(|&p| p != w.id().0).all(|p| w.is_up(NodeId(p))));
    let stop = AtomicBool::new(false);
    let mut cut_conns = 0;
    let (done, frames_at_cuts) = std::thread::scope(|s| {
        let workers = s.spawn(|| push_rounds(n.workers, KEYS, &stop, 100_000, Duration::from_secs(20)));
        let mut frames_at_cuts = Vec::new();
        for _ in 0..CUTS {
            assert!(wait_until(Duration::from_secs(5), all_up), "a link was not up again within 5 s");
            std::thread::sleep(Duration::from_millis(250));
            cut_conns += c.proxies.iter().map(|(_, p)| p.cut()).sum::<usize>();
            frames_at_cuts.push(watches.iter().map(|w| w.stats().frames_sent).sum::<u64>());
        }
        assert!(wait_until(Duration::from_secs(5), all_up), "a link was not up again within 5 s");
        std::thread::sleep(Duration::from_millis(250));
        stop.store(true, Ordering::SeqCst);
        (workers.join().expect("the workers"), frames_at_cuts)
    });
    // Frames kept flowing between the cuts: the cuts fell mid-run.
    assert!(frames_at_cuts.windows(2).all(|w| w[0] < w[1]), "{frames_at_cuts:?}");
    let rounds: Vec<u32> = done.iter().map(|(_, p)| p.rounds).collect();
    let workers = check_sums(done, KEYS);
    finalize_all(workers);
    let stats: Vec<ZmqStats> = n.watches.iter().map(|w| w.stats()).collect();
    for w in &n.watches {
        assert!(w.failures().is_empty(), "node {} reported failed peers: {:?}", w.id(), w.failures());
    }
    for node in n.nodes {
        let s = node.shutdown().expect("a clean shutdown");
        assert_eq!(s.node.ops_failed, 0);
    }
    eprintln!("worker rounds: {rounds:?}");
    report("runtime", &stats, cut_conns, started.elapsed());
    check_counters(&stats, cut_conns);
}

fn report(what: &str, stats: &[ZmqStats], cut: usize, took: Duration) {
    eprintln!(
        "{what}: {cut} connections cut in {CUTS} rounds; reconnects {:?}; frames sent {}, \
         retransmitted {}, duplicates dropped {}, stale packets refused {}; {took:.1?}",
        stats.iter().map(|s| s.reconnects).collect::<Vec<_>>(),
        sum(stats, |s| s.frames_sent),
        sum(stats, |s| s.frames_retransmitted),
        sum(stats, |s| s.duplicates_dropped),
        sum(stats, |s| s.strangers_refused),
    );
}

/// Every cut connection was an authenticated link whose two ends both opened it again; a
/// frame arrives twice only if it was sent twice; nothing failed.
fn check_counters(stats: &[ZmqStats], cut: usize) {
    let links = stats.len() * (stats.len() - 1) / 2;
    assert!(cut >= CUTS * links, "{cut} connections cut");
    for (i, s) in stats.iter().enumerate() {
        let lower = (CUTS * (stats.len() - 1)) as u64;
        assert!(s.reconnects >= lower, "node {i}: {} reconnects, {lower} expected: {s:?}", s.reconnects);
        assert!(s.reconnects <= 4 * lower, "node {i}: {} reconnects for {lower} cuts: {s:?}", s.reconnects);
        assert_eq!(s.peers_failed, 0, "node {i}: {s:?}");
    }
    assert!(sum(stats, |s| s.duplicates_dropped) <= sum(stats, |s| s.frames_retransmitted), "{stats:#?}");
    assert!(sum(stats, |s| s.frames_retransmitted) < sum(stats, |s| s.frames_sent), "{stats:#?}");
}
