//! A node's driver run by a host (`NodeRuntime::start_hosted`): exact results as on a driver
//! thread of its own, the host's thread joined at shutdown, and a host that lets go of the
//! driver, or cannot take it, ending every wait with an error.
#![forbid(unsafe_code)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{finalize_all, key_homed_at, run_all, Rng};
use parma_core::{Config, Key, Layout, NodeId, OpError, Technique};
use parma_runtime::host::unpark_waker;
use parma_runtime::{DriverHost, Error, HostTurn, HostedDriver, NodeRuntime, Options, Undrained, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

/// What the test's host did, seen from outside.
#[derive(Default)]
struct Seen {
    turns: AtomicU64,
    idles: AtomicU64,
    joined: AtomicBool,
}

/// Runs the driver on a thread of the host's own, as a transport's I/O thread would; with
/// `give_up_after`, drops it after that many turns instead (the I/O thread ended).
struct TestHost {
    thread: Option<JoinHandle<()>>,
    give_up_after: Option<u64>,
    refuse: bool,
    /// Takes the driver and never turns it.
    stall: bool,
    stalled: Option<HostedDriver>,
    seen: Arc<Seen>,
}

impl TestHost {
    fn new(seen: &Arc<Seen>) -> TestHost {
        TestHost {
            thread: None,
            give_up_after: None,
            refuse: false,
            stall: false,
            stalled: None,
            seen: Arc::clone(seen),
        }
    }
}

impl DriverHost for TestHost {
    fn host(&mut self, mut driver: HostedDriver) -> std::io::Result<()> {
        if self.refuse {
            return Err(std::io::Error::other("the test host is gone"));
        }
        if self.stall {
            self.stalled = Some(driver);
            return Ok(());
        }
        let (seen, give_up_after) = (Arc::clone(&self.seen), self.give_up_after);
        self.thread = Some(thread::spawn(move || {
            let waker = unpark_waker(thread::current());
            loop {
                let n = seen.turns.fetch_add(1, SeqCst) + 1;
                if give_up_after.is_some_and(|g| n > g) {
                    drop(driver);
                    return;
                }
                match driver.turn(&waker) {
                    HostTurn::Again => {}
                    HostTurn::Idle(d) => {
                        seen.idles.fetch_add(1, SeqCst);
                        thread::park_timeout(d);
                    }
                    _ => return,
                }
            }
        }));
        Ok(())
    }

    fn join(self: Box<Self>) {
        if let Some(t) = self.thread {
            t.join().unwrap();
        }
        self.seen.joined.store(true, SeqCst);
    }
}

fn start_hosted(cfg: &Config, hosts: Vec<TestHost>, opts: Options) -> (Vec<NodeRuntime>, Vec<Worker>) {
    let (mut nodes, mut workers) = (Vec::new(), Vec::new());
    for ((i, t), h) in cluster(cfg.nodes, ThreadedOptions::default()).into_iter().enumerate().zip(hosts) {
        let (node, ws) =
            NodeRuntime::start_hosted(cfg.clone(), NodeId(i as u16), t, h, opts.clone()).unwrap();
        nodes.push(node);
        workers.extend(ws);
    }
    (nodes, workers)
}

#[test]
fn hosted_drivers_sum_exactly_and_their_hosts_are_joined() {
    const LEN: usize = 2;
    let cfg = Config::new(3, 2, Layout::uniform(200, LEN as u32).unwrap());
    let seen: Vec<Arc<Seen>> = (0..3).map(|_| Arc::default()).collect();
    let (nodes, workers) = start_hosted(&cfg, seen.iter().map(TestHost::new).collect(), Options::default());
    let key_end = cfg.layout.key_end();
    let done = run_all(workers, |i, w| {
        let mut rng = Rng(0x40 + i as u64);
        let mut expected = vec![0.0f64; key_end as usize * LEN];
        for _ in 0..200 {
            let keys: Vec<Key> = (0..1 + rng.below(8)).map(|_| Key(rng.below(key_end))).collect();
            let vals: Vec<f32> = (0..keys.len() * LEN).map(|_| rng.below(5) as f32 - 2.0).collect();
            for (j, k) in keys.iter().enumerate() {
                for e in 0..LEN {
                    expected[k.0 as usize * LEN + e] += f64::from(vals[j * LEN + e]);
                }
            }
            let t = w.push(&keys, &vals).unwrap();
            w.wait(t).unwrap();
        }
        w.barrier().unwrap();
        expected
    });
    let mut total = vec![0.0f64; key_end as usize * LEN];
    for (_, e) in &done {
        total.iter_mut().zip(e).for_each(|(t, e)| *t += e);
    }
    let checked = run_all(done.into_iter().map(|(w, _)| w).collect(), |_, w| {
        let keys: Vec<Key> = (0..key_end).map(Key).collect();
        let mut vals = vec![f32::NAN; keys.len() * LEN];
        w.pull(&keys, &mut vals).unwrap();
        vals.iter().zip(&total).all(|(v, t)| f64::from(*v) == *t)
    });
    assert!(checked.iter().all(|(_, exact)| *exact), "a key's sum is off");
    finalize_all(checked.into_iter().map(|(w, _)| w).collect());
    for n in nodes {
        let s = n.shutdown().unwrap();
        assert_eq!(s.node.ops_failed, 0);
        assert!(s.driver.frames_sent > 0 && s.driver.parks > 0, "{:?}", s.driver);
    }
    for s in &seen {
        assert!(s.joined.load(SeqCst), "the runtime joins the host at shutdown");
        assert!(s.turns.load(SeqCst) > 0 && s.idles.load(SeqCst) > 0);
    }
}

#[test]
fn a_host_that_lets_go_of_its_driver_ends_every_wait_with_an_error() {
    let cfg = Config::new(2, 1, Layout::uniform(100, 1).unwrap());
    let mut opts = Options::default();
    opts.wait_margin = Duration::from_secs(1);
    opts.drain_timeout = Duration::from_secs(2);
    let seen: Vec<Arc<Seen>> = (0..2).map(|_| Arc::default()).collect();
    let mut hosts: Vec<TestHost> = seen.iter().map(TestHost::new).collect();
    // Node 1's host ends a little after the start: its node stops as if its transport closed.
    hosts[1].give_up_after = Some(50);
    let (mut nodes, mut workers) = start_hosted(&cfg, hosts, opts);
    let far = key_homed_at(NodeId(1), &cfg, 0);
    let mut w1 = workers.pop().unwrap();
    let began = Instant::now();
    while !nodes[1].is_closed() {
        assert!(began.elapsed() < Duration::from_secs(10), "the dropped driver never closed its node");
        thread::sleep(Duration::from_millis(5));
    }
    let mut v = [0.0];
    assert_eq!(w1.pull(&[far], &mut v), Err(OpError::Closed));
    let dead = nodes.pop().unwrap();
    match dead.shutdown() {
        Err(Error::NotDrained(_, Undrained::TransportClosed)) => {}
        other => panic!("expected the transport reported closed, got {other:?}"),
    }
    assert!(seen[1].joined.load(SeqCst));
    drop(w1);
    drop(workers);
    drop(nodes);
}

#[test]
fn a_host_that_cannot_take_the_driver_fails_the_start_with_its_reason() {
    let cfg = Config::new(1, 1, Layout::uniform(10, 1).unwrap());
    let seen = Arc::default();
    let mut host = TestHost::new(&seen);
    host.refuse = true;
    let t = cluster(1, ThreadedOptions::default()).pop().unwrap();
    let err = NodeRuntime::start_hosted(cfg, NodeId(0), t, host, Options::default()).err().unwrap();
    let said = err.to_string();
    assert!(said.contains("the test host is gone"), "{said}");
    assert!(!seen.joined.load(SeqCst));
}

#[test]
fn a_hosted_node_serves_remote_pulls_under_static_partitioning() {
    let mut cfg = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
    cfg.technique = Technique::StaticPartitioning;
    let seen: Vec<Arc<Seen>> = (0..2).map(|_| Arc::default()).collect();
    let (nodes, mut workers) =
        start_hosted(&cfg, seen.iter().map(TestHost::new).collect(), Options::default());
    let far = key_homed_at(NodeId(1), &cfg, 0);
    let w0 = &mut workers[0];
    let t = w0.push(&[far], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    w0.wait(t).unwrap();
    let mut v = [0.0; 4];
    for _ in 0..100 {
        w0.pull(&[far], &mut v).unwrap();
        assert_eq!(v, [1.0, 2.0, 3.0, 4.0]);
    }
    assert_eq!(w0.stats().keys_pulled_remote, 100);
    finalize_all(workers);
    for n in nodes {
        n.shutdown().unwrap();
    }
}

#[test]
fn a_host_that_stops_turning_its_driver_does_not_hang_the_shutdown() {
    let cfg = Config::new(1, 1, Layout::uniform(10, 1).unwrap());
    let mut opts = Options::default();
    opts.drain_timeout = Duration::from_millis(200);
    let seen = Arc::default();
    let mut host = TestHost::new(&seen);
    host.stall = true;
    let t = cluster(1, ThreadedOptions::default()).pop().unwrap();
    let (node, workers) = NodeRuntime::start_hosted(cfg, NodeId(0), t, host, opts).unwrap();
    drop(workers);
    let began = Instant::now();
    match node.shutdown() {
        Err(Error::NotDrained(_, Undrained::HostStalled)) => {}
        other => panic!("expected the host reported stalled, got {other:?}"),
    }
    // The drain timeout and the runtime's grace of 5 s, with room for a slow machine.
    assert!(began.elapsed() < Duration::from_secs(20), "{:?}", began.elapsed());
    assert!(!seen.joined.load(SeqCst), "a stalled host is not joined");
}
