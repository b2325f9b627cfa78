//! One node holding `n` keys of `LEN` floats: started, every key touched once through a
//! worker (as `local_access`'s `Kind::Home` setup does), and what that cost in memory and time.

use std::time::{Duration, Instant};

use parma_core::{Config, Key, Layout, NodeId, Placement};
use parma_runtime::{NodeRuntime, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

use crate::counting;

/// Floats per value.
pub const LEN: usize = 16;
/// Keys per push while filling the store.
const FILL_CHUNK: usize = 10_000;

/// Which keys a node holds: `0..n` (dense placement), or `n` keys spread over the whole `u64`
/// range (hashed placement, as hashed feature ids are).
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    Dense(u64),
    Hashed(u64),
}

impl Keys {
    pub fn n(self) -> u64 {
        match self {
            Keys::Dense(n) | Keys::Hashed(n) => n,
        }
    }

    pub fn placement(self) -> Placement {
        match self {
            Keys::Dense(_) => Placement::Dense,
            Keys::Hashed(_) => Placement::Hashed,
        }
    }

    /// The `i`th key, `i < n`: distinct for distinct `i`.
    #[inline]
    pub fn key(self, i: u64) -> Key {
        match self {
            Keys::Dense(_) => Key(i),
            // A bijection of u64 (splitmix64's finalizer); the layout ends at u64::MAX, which
            // no i below 10^9 maps to (checked by `fill`).
            Keys::Hashed(_) => Key(scatter(i)),
        }
    }

    pub fn layout(self) -> Layout {
        let end = match self {
            Keys::Dense(n) => n,
            Keys::Hashed(_) => u64::MAX,
        };
        Layout::uniform(end, LEN as u32).expect("a valid layout")
    }
}

pub fn scatter(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What building a node cost.
pub struct Built {
    pub keys: Keys,
    /// `NodeRuntime::start` alone, and the resident bytes it added.
    pub start: Duration,
    pub start_rss: i64,
    /// Touching every key once (pushing zeros, `FILL_CHUNK` keys a push).
    pub fill: Duration,
    /// Resident bytes (from the OS) and live allocated bytes (the counting allocator) the
    /// whole build added, and the most live at once while it ran.
    pub rss: i64,
    pub allocated: i64,
    pub allocated_peak: i64,
}

impl Built {
    fn per_key_beyond_values(&self, bytes: i64) -> f64 {
        let values = self.keys.n() as f64 * (LEN * 4) as f64;
        (bytes as f64 - values) / self.keys.n() as f64
    }

    pub fn print_header() {
        println!(
            "{:<7} {:>11} {:>9} {:>13} {:>8} {:>12} {:>13} {:>13} {:>13}",
            "place",
            "keys",
            "start ms",
            "start B/key",
            "fill s",
            "fill keys/s",
            "rss B/key",
            "alloc B/key",
            "peak B/key"
        );
    }

    pub fn print(&self) {
        let n = self.keys.n() as f64;
        println!(
            "{:<7} {:>11} {:>9.1} {:>13.2} {:>8.2} {:>12.3e} {:>13.1} {:>13.1} {:>13.1}",
            self.keys.placement().name(),
            self.keys.n(),
            self.start.as_secs_f64() * 1e3,
            self.start_rss as f64 / n,
            self.fill.as_secs_f64(),
            n / self.fill.as_secs_f64(),
            self.per_key_beyond_values(self.rss),
            self.per_key_beyond_values(self.allocated),
            self.per_key_beyond_values(self.allocated_peak),
        );
    }
}

/// A running one-node cluster and its workers.
pub struct Node {
    runtime: NodeRuntime,
    pub workers: Vec<Worker>,
    pub keys: Keys,
}

impl Node {
    pub fn finish(self) {
        // Every worker finalizes at once: a worker's finalize waits for the others'.
        std::thread::scope(|s| {
            for w in self.workers {
                s.spawn(move || w.finalize().expect("finalize"));
            }
        });
        self.runtime.shutdown().expect("a clean shutdown");
    }
}

/// The process's resident bytes now (`VmRSS` of `/proc/self/status`).
pub fn rss() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux only)");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    let kb: i64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS in kB");
    kb * 1024
}

/// Starts a node with `workers` workers holding `keys`, touches every key once and measures it.
pub fn build(keys: Keys, workers: u16) -> (Node, Built) {
    let mut cfg = Config::new(1, workers, keys.layout());
    cfg.placement = keys.placement();
    let (rss0, live0) = (rss(), counting::live() as i64);
    counting::reset_peak();
    let t0 = Instant::now();
    let t = cluster(1, ThreadedOptions::default()).pop().expect("one transport");
    let (runtime, mut ws) = NodeRuntime::start(cfg, NodeId(0), t).expect("the node starts");
    let start = t0.elapsed();
    let start_rss = rss() - rss0;

    let t1 = Instant::now();
    let w = &mut ws[0];
    let zeros = vec![0.0f32; FILL_CHUNK * LEN];
    let mut chunk = Vec::with_capacity(FILL_CHUNK);
    let mut i = 0;
    while i < keys.n() {
        chunk.clear();
        chunk.extend((i..keys.n().min(i + FILL_CHUNK as u64)).map(|j| keys.key(j)));
        assert!(chunk.iter().all(|k| k.0 != u64::MAX), "a key outside the layout");
        let ticket = w.push(&chunk, &zeros[..chunk.len() * LEN]).expect("push");
        w.wait(ticket).expect("push applied");
        i += chunk.len() as u64;
    }
    let fill = t1.elapsed();
    let built = Built {
        keys,
        start,
        start_rss,
        fill,
        rss: rss() - rss0,
        allocated: counting::live() as i64 - live0,
        allocated_peak: counting::peak() as i64 - live0,
    };
    assert_eq!(w.stats().keys_pushed_remote, 0, "one node: every key is local");
    let view = runtime.inspect();
    let step = (keys.n() / 10_000).max(1);
    assert!((0..keys.n()).step_by(step as usize).all(|i| view.holds(keys.key(i))), "every key is held");
    (Node { runtime, workers: ws, keys }, built)
}
