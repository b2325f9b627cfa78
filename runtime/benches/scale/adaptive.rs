//! Four in-process nodes under adaptive management (the default technique) with intent, at
//! several model sizes: each worker signals intent for the batch it will use `LOOKAHEAD`
//! clocks later, then pulls, pushes and advances its clock, as a training loop does. The
//! figures: key-intents per second over the whole cluster (one key of one intent: a worker
//! signals it, the nodes act on it, the worker uses the key) and the share of key accesses
//! that were remote.

use std::time::{Duration, Instant};

use parma_core::{Clock, Config, Key, NodeId};
use parma_runtime::{NodeRuntime, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

use crate::build::{Keys, LEN};
use crate::rates::{Rng, Zipf};
use crate::WORKERS;

/// Nodes of the cluster.
pub const NODES: u16 = 4;
/// Draws per batch (Zipf(0.99) over the whole model; a batch is their distinct keys).
const DRAWS: usize = 500;
/// Clocks between a worker's intent for a batch and its use of it.
const LOOKAHEAD: usize = 16;

/// One size's figures.
pub struct Run {
    pub keys: u64,
    pub key_intents: u64,
    pub wall: Duration,
    pub accesses: u64,
    pub remote: u64,
}

fn batches(n: u64, lane: u64, count: usize) -> Vec<Vec<Key>> {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (lane + 7).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let zipf = Zipf::new(n, 0.99);
    (0..count)
        .map(|_| {
            let mut b: Vec<Key> = (0..DRAWS).map(|_| Keys::Dense(n).key(zipf.draw(&mut rng))).collect();
            b.sort_unstable();
            b.dedup();
            b
        })
        .collect()
}

/// `steps` steps of every worker of a four-node cluster over a dense model of `n` keys.
pub fn run(n: u64, steps: usize) -> Run {
    let keys = Keys::Dense(n);
    let mut cfg = Config::new(NODES, WORKERS, keys.layout());
    cfg.placement = keys.placement();
    let mut runtimes = Vec::new();
    let mut workers: Vec<Worker> = Vec::new();
    for (i, t) in cluster(NODES, ThreadedOptions::default()).into_iter().enumerate() {
        let (rt, ws) = NodeRuntime::start(cfg.clone(), NodeId(i as u16), t).expect("a node of four starts");
        runtimes.push(rt);
        workers.extend(ws);
    }
    let plans: Vec<Vec<Vec<Key>>> =
        (0..workers.len()).map(|w| batches(n, w as u64, steps + LOOKAHEAD)).collect();
    let key_intents: u64 = plans.iter().flat_map(|p| &p[..steps]).map(|b| b.len() as u64).sum();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for (w, plan) in workers.iter_mut().zip(&plans) {
            s.spawn(move || {
                let mut vals = vec![0.0f32; DRAWS * LEN];
                let ones = vec![1.0f32; DRAWS * LEN];
                for (c, b) in plan[..LOOKAHEAD].iter().enumerate() {
                    w.intent(b, Clock(c as u64), Clock(c as u64 + 1)).expect("intent");
                }
                for t in 0..steps {
                    let later = &plan[t + LOOKAHEAD];
                    let at = (t + LOOKAHEAD) as u64;
                    w.intent(later, Clock(at), Clock(at + 1)).expect("intent");
                    let b = &plan[t];
                    let v = &mut vals[..b.len() * LEN];
                    w.pull(b, v).expect("pull");
                    let p = w.push(b, &ones[..b.len() * LEN]).expect("push");
                    w.wait(p).expect("push applied");
                    w.advance_clock().expect("advance the clock");
                }
            });
        }
    });
    let wall = t0.elapsed();
    let stats: Vec<_> = workers.iter().map(|w| w.stats()).collect();
    let accesses = stats
        .iter()
        .map(|s| s.keys_pulled_local + s.keys_pulled_remote + s.keys_pushed_local + s.keys_pushed_remote)
        .sum();
    let remote = stats.iter().map(|s| s.keys_pulled_remote + s.keys_pushed_remote).sum();
    std::thread::scope(|s| {
        for w in workers {
            s.spawn(move || w.finalize().expect("finalize"));
        }
    });
    for rt in runtimes {
        rt.shutdown().expect("a clean shutdown");
    }
    Run { keys: n, key_intents, wall, accesses, remote }
}

/// Runs every size in turn and prints the table, with each size's rate against the first's.
pub fn measure(sizes: &[u64], steps: usize) {
    println!(
        "\n== {NODES} in-process nodes x {WORKERS} workers, adaptive management with intent {LOOKAHEAD} clocks \
         ahead: {steps} steps per worker, batches of the distinct keys of {DRAWS} Zipf(0.99) draws =="
    );
    println!(
        "{:>10} {:>12} {:>9} {:>16} {:>8} {:>13}",
        "keys", "key-intents", "wall s", "key-intents/s", "ratio", "remote share"
    );
    let mut first = None;
    for &n in sizes {
        let r = run(n, steps);
        let rate = r.key_intents as f64 / r.wall.as_secs_f64();
        let base = *first.get_or_insert(rate);
        println!(
            "{:>10} {:>12} {:>9.2} {:>16.3e} {:>7.2}x {:>12.2}%",
            r.keys,
            r.key_intents,
            r.wall.as_secs_f64(),
            rate,
            rate / base,
            100.0 * r.remote as f64 / r.accesses.max(1) as f64
        );
    }
}
