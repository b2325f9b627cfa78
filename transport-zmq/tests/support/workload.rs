//! A workload through `parma_runtime` over ZeroMQ: workers signal intents (adaptive
//! management moves and replicates keys), push integer increments to random keys, and in the
//! end every worker pulls every key and checks the exact sum.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parma_core::{Clock, Config, Key, Layout, NodeId};
use parma_runtime::{NodeRuntime, Options, Worker};
use parma_transport_zmq::ZmqTransport;

use super::{Probe, Watch};

/// Values per key.
pub const LEN: usize = 2;

/// The runtimes of a cluster, their workers, and the test's watch on each transport.
pub struct Nodes {
    pub nodes: Vec<NodeRuntime>,
    pub workers: Vec<Worker>,
    pub watches: Vec<Watch>,
}

/// A configuration of `nodes` nodes, 2 workers each, `keys` keys of [`LEN`] values, adaptive
/// management (the default), the digest its transports must share.
pub fn config(nodes: u16, keys: u64) -> (Config, u64) {
    let cfg = Config::new(nodes, 2, Layout::uniform(keys, LEN as u32).expect("a layout"));
    let digest = parma_core::cluster_digest(&cfg, 0, None);
    (cfg, digest)
}

/// Runtime options: shutdown waits at most 5 s, so that a test with a failed node ends.
pub fn runtime_options() -> Options {
    let mut o = Options::default();
    o.drain_timeout = Duration::from_secs(5);
    o.wait_margin = Duration::from_secs(2);
    o
}

pub fn start(cfg: &Config, transports: Vec<ZmqTransport>) -> Nodes {
    let (mut nodes, mut workers, mut watches) = (Vec::new(), Vec::new(), Vec::new());
    for (i, t) in transports.into_iter().enumerate() {
        let (probe, watch) = Probe::new(t);
        let (node, ws) = NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), probe, runtime_options())
            .expect("a node starts");
        nodes.push(node);
        workers.extend(ws);
        watches.push(watch);
    }
    Nodes { nodes, workers, watches }
}

/// Runs `f` on every worker, each in its own thread; the workers come back with the results.
pub fn run_all<R: Send>(
    workers: Vec<Worker>,
    f: impl Fn(usize, &mut Worker) -> R + Sync,
) -> Vec<(Worker, R)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(i, mut w)| {
                let f = &f;
                s.spawn(move || {
                    let r = f(i, &mut w);
                    (w, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker thread")).collect()
    })
}

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// What a worker did in [`push_rounds`].
pub struct Pushed {
    /// The exact sum of what this worker pushed, per value.
    pub expected: Vec<f64>,
    pub rounds: u32,
}

/// Every worker runs rounds until `stop` is set (or `rounds_max`, or `limit`): an intent
/// for a few keys of the next clocks (shared by several workers, or its own), pushes of
/// integer increments to random keys with a few in flight, a clock advance. Then it ends its
/// intents, waits for the sync rounds and meets the others at a barrier. Panics on any error.
pub fn push_rounds(
    workers: Vec<Worker>,
    key_end: u64,
    stop: &AtomicBool,
    rounds_max: u32,
    limit: Duration,
) -> Vec<(Worker, Pushed)> {
    run_all(workers, |i, w| {
        let mut rng = Rng(0x5eed_0000 + i as u64);
        let mut expected = vec![0.0f64; key_end as usize * LEN];
        let mut tickets = VecDeque::new();
        let end = Instant::now() + limit;
        let mut rounds = 0;
        while rounds < rounds_max && !stop.load(Ordering::SeqCst) && Instant::now() < end {
            let c = w.clock().0;
            let base = if rounds % 2 == 0 { 0 } else { 50 + 20 * i as u64 };
            let hot: Vec<Key> = (base..base + 20).map(|k| Key(k % key_end)).collect();
            w.intent(&hot, Clock(c + 1), Clock(c + 3)).expect("intent");
            for _ in 0..8 {
                let n = 1 + rng.below(12) as usize;
                let mut keys: Vec<Key> = (0..n).map(|_| Key(rng.below(key_end))).collect();
                keys.sort_unstable();
                keys.dedup();
                let vals: Vec<f32> = (0..keys.len() * LEN).map(|_| rng.below(7) as f32 - 3.0).collect();
                for (j, k) in keys.iter().enumerate() {
                    for e in 0..LEN {
                        expected[k.0 as usize * LEN + e] += f64::from(vals[j * LEN + e]);
                    }
                }
                tickets.push_back(w.push(&keys, &vals).expect("push"));
                if tickets.len() > 6 {
                    w.wait(tickets.pop_front().expect("a ticket")).expect("a push completes");
                }
            }
            w.advance_clock().expect("advance_clock");
            rounds += 1;
        }
        for t in tickets {
            w.wait(t).expect("a push completes");
        }
        // Past every intent: the replicas' last deltas reach the owners.
        for _ in 0..4 {
            w.advance_clock().expect("advance_clock");
        }
        w.wait_sync().expect("a sync round");
        w.wait_sync().expect("a sync round");
        w.barrier().expect("the barrier after the pushes");
        Pushed { expected, rounds }
    })
}

/// Every worker pulls every key and checks it against the sum of everyone's pushes.
pub fn check_sums(done: Vec<(Worker, Pushed)>, key_end: u64) -> Vec<Worker> {
    let mut total = vec![0.0f64; key_end as usize * LEN];
    for (_, p) in &done {
        total.iter_mut().zip(&p.expected).for_each(|(t, e)| *t += e);
    }
    assert!(total.iter().any(|v| *v != 0.0), "nothing was pushed");
    let workers = done.into_iter().map(|(w, _)| w).collect();
    run_all(workers, |_, w| {
        let keys: Vec<Key> = (0..key_end).map(Key).collect();
        let mut vals = vec![f32::NAN; key_end as usize * LEN];
        w.pull(&keys, &mut vals).expect("the final pull");
        for (i, v) in vals.iter().enumerate() {
            assert_eq!(f64::from(*v), total[i], "key {} value {}", i / LEN, i % LEN);
        }
        w.barrier().expect("the barrier after the pulls");
    })
    .into_iter()
    .map(|(w, _)| w)
    .collect()
}

/// Finalizes every worker (each in its own thread: finalize ends with a barrier).
pub fn finalize_all(workers: Vec<Worker>) {
    std::thread::scope(|s| {
        let handles: Vec<_> = workers.into_iter().map(|w| s.spawn(move || w.finalize())).collect();
        for h in handles {
            h.join().expect("a worker thread").expect("finalize");
        }
    });
}
