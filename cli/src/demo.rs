//! `parma demo`: a skewed random workload on an in-process cluster, and a report of what
//! happened. The nodes talk over the threaded loopback, or over ZeroMQ on 127.0.0.1
//! ([`DemoTransport`]).
//!
//! Every worker runs `batches` batches. A batch draws `batch_keys` keys whose popularity follows
//! a Zipf law (rank `r` is drawn with probability ∝ `r^-zipf`; a seeded random permutation maps
//! ranks to keys, so the hot keys are spread over all home nodes), removes duplicates, pulls the
//! keys' values, computes a small deterministic fake gradient from them and pushes it.
//!
//! A worker's clock counts its batches: batch `i` runs at clock `i`, and the worker advances
//! its clock after each batch. What a worker tells its node ahead of time depends on the
//! technique:
//! - under the techniques with sync rounds (adaptive, the default, and every other one except
//!   static partitioning and relocation), it signals intent for the keys of batch `i + ahead`
//!   for clock `[i + ahead, i + ahead + 1)` while it works on batch `i`; the node's action
//!   timing decides when to act on it;
//! - under [`Technique::Relocation`] (Lapse) it asks its node to `localize` the keys of batch
//!   `i + ahead` and waits for batch `i`'s localize before pulling; with `ahead = 0` each batch
//!   is localized right before it is used;
//! - under [`Technique::StaticPartitioning`] it tells nothing.
//!
//! Under [`Technique::MultiTechnique`] the hot keys come from the Zipf law's expected access
//! frequencies (the statistics an application would count in its data), with NuPS's factor 100.
//!
//! Keys are drawn from per-worker generators seeded from `seed` alone, so every technique sees
//! exactly the same key sequence on the same seed.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parma::Prefetch;
use parma_core::{Config, Key, Layout, NodeId, OpError, Technique};
use parma_runtime::{Options, Stats, Ticket, Worker};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};

mod transports;

pub use transports::{transport_comparison, DemoTransport};

/// Pushes one worker keeps in flight before it waits for the oldest.
const PUSHES_IN_FLIGHT: usize = 8;

/// Longest wait in a barrier: longer than any sane demo takes, short enough that a worker that
/// failed does not leave the others waiting for the runtime's default ten minutes.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest key space the demo accepts (its rank → key permutation takes 8 bytes per key).
pub const KEYS_MAX: u64 = 1 << 27;

/// What the demo runs. [`DemoOptions::default`] is the `parma demo` default.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoOptions {
    /// Nodes of the in-process cluster.
    pub nodes: u16,
    /// Worker threads per node.
    pub workers: u16,
    /// Keys of the model, `0..keys`.
    pub keys: u64,
    /// `f32`s per key.
    pub len: u32,
    /// Batches each worker runs.
    pub batches: u64,
    /// Keys drawn per batch (before duplicates are removed).
    pub batch_keys: usize,
    /// Exponent of the Zipf law of key popularity (0 is uniform).
    pub zipf: f64,
    /// Seed of the key permutation, the workers' draws and the nodes' own choices.
    pub seed: u64,
    /// How the cluster manages parameters.
    pub technique: Technique,
    /// How many batches ahead a worker signals intent (or, under relocation, localizes).
    pub ahead: usize,
    /// What carries the frames between the nodes (all of them in this process).
    pub transport: DemoTransport,
}

/// The default of [`DemoOptions::ahead`] for `technique`: one batch for relocation (further
/// ahead, workers take hot keys from each other before they use them), 128 for intents. The
/// demo's batches take a fraction of a millisecond, far less than real training steps, so a
/// sync round spans several clocks: intents must come well ahead, and action timing keeps the
/// node from acting on them earlier than needed.
pub fn default_ahead(technique: Technique) -> usize {
    if technique.uses_localize() {
        1
    } else {
        128
    }
}

/// NuPS's factor: keys accessed more than this many times as often as the mean are hot.
const HOT_FACTOR: f64 = 100.0;

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            nodes: 4,
            workers: 2,
            keys: 1_000_000,
            len: 16,
            batches: 2000,
            batch_keys: 64,
            zipf: 1.1,
            seed: 1,
            technique: Technique::Adaptive,
            ahead: 128,
            transport: DemoTransport::Threaded,
        }
    }
}

impl DemoOptions {
    /// The same options with another technique (and that technique's default `ahead`).
    pub fn with_technique(&self, technique: Technique) -> DemoOptions {
        DemoOptions { technique, ahead: default_ahead(technique), ..self.clone() }
    }

    fn check(&self) -> Result<(), DemoError> {
        let bad = |what: &str| Err(DemoError::Options(what.to_string()));
        if self.nodes == 0 {
            return bad("--nodes must be at least 1");
        }
        if self.workers == 0 {
            return bad("--workers must be at least 1");
        }
        if self.keys == 0 || self.keys > KEYS_MAX {
            return Err(DemoError::Options(format!("--keys must be between 1 and {KEYS_MAX}")));
        }
        if self.batch_keys == 0 {
            return bad("--batch-keys must be at least 1");
        }
        if !(self.zipf.is_finite() && self.zipf >= 0.0) {
            return bad("--zipf must be a finite number >= 0");
        }
        Ok(())
    }
}

/// Key accesses of one kind, by where they were served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accesses {
    /// Served from the worker's own node's store by the worker thread.
    pub local: u64,
    /// Handed to the node (the key was elsewhere, or on its way).
    pub remote: u64,
}

impl Accesses {
    /// All accesses.
    pub fn total(&self) -> u64 {
        self.local + self.remote
    }

    /// Share of remote accesses in `[0, 1]` (0 if there were none).
    pub fn remote_share(&self) -> f64 {
        ratio(self.remote, self.total())
    }

    /// Share of local accesses in `[0, 1]` (0 if there were none).
    pub fn local_share(&self) -> f64 {
        ratio(self.local, self.total())
    }

    fn plus(self, o: Accesses) -> Accesses {
        Accesses { local: self.local + o.local, remote: self.remote + o.remote }
    }
}

/// `bytes` with a decimal unit: `812 B`, `12.3 kB`, `145.9 MB`, `2.1 GB`.
fn fmt_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..=999 => format!("{bytes} B"),
        1_000..=999_999 => format!("{:.1} kB", b / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} MB", b / 1e6),
        _ => format!("{:.1} GB", b / 1e9),
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// What one run of the demo did.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoReport {
    /// What was run.
    pub options: DemoOptions,
    /// Starting the nodes (building the key permutation included).
    pub setup: Duration,
    /// From starting the workers until the last one passed its final barrier.
    pub wall: Duration,
    /// Batches completed, all workers.
    pub batches: u64,
    /// Keys drawn, duplicates within a batch removed, all workers: each was pulled once and
    /// pushed once.
    pub keys_drawn: u64,
    /// Keys pulled, from the workers' counters.
    pub pulls: Accesses,
    /// Keys pushed, from the workers' counters.
    pub pushes: Accesses,
    /// Keys moved between nodes (`relocations_in`, all nodes).
    pub relocations: u64,
    /// Replicas created, all nodes.
    pub replicas_created: u64,
    /// Sync rounds, all nodes.
    pub sync_rounds: u64,
    /// Mean replica staleness in µs (time since a replica's last refresh, sampled every round).
    pub staleness_mean_us: f64,
    /// Largest replica staleness seen, in µs.
    pub staleness_max_us: u64,
    /// Keys forwarded by a node that no longer held them, all nodes.
    pub keys_forwarded: u64,
    /// Protocol messages sent, all nodes.
    pub messages_sent: u64,
    /// Bytes of the messages sent, all nodes.
    pub bytes_sent: u64,
    /// Bytes the transports put on the wire, all nodes (messages, the session layer's headers,
    /// acknowledgements, heartbeats, handshakes), where the transport counts them (ZeroMQ).
    pub wire_bytes_sent: Option<u64>,
    /// Frames dropped, by the nodes (undecodable) and by the drivers (peer gone), all nodes.
    pub frames_dropped: u64,
    /// Worker operations that ended with an error, all nodes.
    pub ops_failed: u64,
}

impl DemoReport {
    /// Pulls and pushes together.
    pub fn accesses(&self) -> Accesses {
        self.pulls.plus(self.pushes)
    }

    /// Share of all key accesses (pulls and pushes) that were remote.
    pub fn remote_share(&self) -> f64 {
        self.accesses().remote_share()
    }

    /// Bytes sent per key access.
    pub fn bytes_per_access(&self) -> f64 {
        ratio(self.bytes_sent, self.accesses().total())
    }
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let secs = self.wall.as_secs_f64().max(1e-9);
        writeln!(
            f,
            "demo: {}, {} nodes x {} workers on {}, {} keys x {} f32, {} batches/worker x {} keys, \
             zipf {}, seed {}{}",
            o.technique.name(),
            o.nodes,
            o.workers,
            o.transport,
            o.keys,
            o.len,
            o.batches,
            o.batch_keys,
            o.zipf,
            o.seed,
            match o.technique {
                Technique::StaticPartitioning => String::new(),
                Technique::Relocation => format!(", localize {} batches ahead", o.ahead),
                _ => format!(", intents {} batches ahead", o.ahead),
            },
        )?;
        writeln!(
            f,
            "  time         {:.2} s wall (setup {:.2} s), {:.0} batches/s, {:.0} key accesses/s",
            secs,
            self.setup.as_secs_f64(),
            self.batches as f64 / secs,
            self.accesses().total() as f64 / secs,
        )?;
        for (name, a) in [("pulls", self.pulls), ("pushes", self.pushes)] {
            writeln!(
                f,
                "  {name:<12} {} keys: {:.1}% local, {:.1}% remote",
                a.total(),
                100.0 * a.local_share(),
                100.0 * a.remote_share(),
            )?;
        }
        writeln!(
            f,
            "  relocations  {} keys moved, {} keys forwarded",
            self.relocations, self.keys_forwarded
        )?;
        writeln!(
            f,
            "  replicas     {} created, {} sync rounds, staleness {:.0} µs mean, {} µs max",
            self.replicas_created, self.sync_rounds, self.staleness_mean_us, self.staleness_max_us
        )?;
        writeln!(
            f,
            "  network      {} messages, {} sent, {:.1} B per key access",
            self.messages_sent,
            fmt_bytes(self.bytes_sent),
            self.bytes_per_access(),
        )?;
        if let Some(wire) = self.wire_bytes_sent {
            writeln!(f, "  wire         {} on the wire (with the session layer's packets)", fmt_bytes(wire))?;
        }
        write!(f, "  dropped      {} frames; {} failed operations", self.frames_dropped, self.ops_failed)
    }
}

/// A markdown table of runs of the same workload under different techniques, with bytes sent
/// relative to the static run (if there is one).
pub fn comparison(reports: &[DemoReport]) -> String {
    let base = reports.iter().find(|r| r.options.technique == Technique::StaticPartitioning);
    let mut out = String::from(
        "| technique | remote share | bytes sent | vs static | B per access | relocations | replicas | \
         staleness mean / max | batches/s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in reports {
        let vs = match base {
            Some(b) if b.bytes_sent > 0 => format!("{:.3}x", r.bytes_sent as f64 / b.bytes_sent as f64),
            _ => "n/a".into(),
        };
        let staleness = if r.replicas_created == 0 {
            "-".to_string()
        } else {
            format!("{:.0} µs / {:.1} ms", r.staleness_mean_us, r.staleness_max_us as f64 / 1e3)
        };
        out.push_str(&format!(
            "| {} | {:.4}% | {} | {} | {:.1} | {} | {} | {} | {:.0} |\n",
            r.options.technique.name(),
            100.0 * r.remote_share(),
            fmt_bytes(r.bytes_sent),
            vs,
            r.bytes_per_access(),
            r.relocations,
            r.replicas_created,
            staleness,
            r.batches as f64 / r.wall.as_secs_f64().max(1e-9),
        ));
    }
    out
}

/// Why the demo failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DemoError {
    /// The options cannot work.
    Options(String),
    /// The transport could not be set up.
    Transport(String),
    /// A node did not start.
    Start(parma_runtime::Error),
    /// A worker thread could not be spawned.
    Spawn(std::io::Error),
    /// A worker operation failed.
    Worker {
        /// The worker's node.
        node: NodeId,
        /// The worker's id on its node.
        worker: u16,
        /// The batch it was working on (or localizing, for `localize`).
        batch: u64,
        /// The operation: `intent`, `localize`, `pull`, `push`, `advance`, `wait` or `finalize`.
        op: &'static str,
        /// What went wrong.
        error: OpError,
    },
    /// A worker thread panicked.
    WorkerPanicked,
    /// A node did not stop cleanly.
    Shutdown {
        /// The node.
        node: NodeId,
        /// What went wrong.
        error: parma_runtime::Error,
    },
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DemoError::Options(s) => write!(f, "bad options: {s}"),
            DemoError::Transport(s) => write!(f, "the transport could not be set up: {s}"),
            DemoError::Start(e) => write!(f, "a node did not start: {e}"),
            DemoError::Spawn(e) => write!(f, "could not spawn a worker thread: {e}"),
            DemoError::Worker { node, worker, batch, op, error } => {
                write!(f, "worker {worker} of node {node}: {op} of batch {batch} failed: {error}")
            }
            DemoError::WorkerPanicked => f.write_str("a worker thread panicked"),
            DemoError::Shutdown { node, error } => write!(f, "node {node} did not stop cleanly: {error}"),
        }
    }
}

impl std::error::Error for DemoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DemoError::Start(e) | DemoError::Shutdown { error: e, .. } => Some(e),
            DemoError::Spawn(e) => Some(e),
            DemoError::Worker { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// splitmix64: derives independent seeds from one.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Draws batches of Zipf-distributed keys.
pub(crate) struct KeySampler {
    zipf: Zipf<f64>,
    /// Rank (0 = hottest) → key.
    keys: Vec<u64>,
}

impl KeySampler {
    fn from_options(opts: &DemoOptions) -> Result<KeySampler, DemoError> {
        KeySampler::new(opts.keys, opts.zipf, opts.seed).map_err(DemoError::Options)
    }

    /// Keys `0..keys`, ranked by a permutation drawn from `seed`, rank `r` drawn with
    /// probability ∝ `r^-zipf`.
    pub(crate) fn new(keys: u64, zipf: f64, seed: u64) -> Result<KeySampler, String> {
        let zipf = Zipf::new(keys, zipf).map_err(|e| format!("--zipf: {e}"))?;
        let mut keys: Vec<u64> = (0..keys).collect();
        keys.shuffle(&mut StdRng::seed_from_u64(mix(seed)));
        Ok(KeySampler { zipf, keys })
    }

    /// Expected accesses per key in `draws` draws (the Zipf law's probabilities), for the
    /// keys that get at least one.
    fn expected_frequencies(&self, exponent: f64, draws: f64) -> Vec<(Key, u64)> {
        let weights: Vec<f64> = (1..=self.keys.len()).map(|r| (r as f64).powf(-exponent)).collect();
        let sum: f64 = weights.iter().sum();
        weights
            .iter()
            .zip(&self.keys)
            .map(|(w, k)| (Key(*k), (draws * w / sum).round() as u64))
            .filter(|(_, f)| *f > 0)
            .collect()
    }

    /// `n` draws, sorted, duplicates removed.
    pub(crate) fn batch(&self, rng: &mut StdRng, n: usize) -> Vec<Key> {
        let last = self.keys.len() as u64 - 1;
        let mut batch: Vec<Key> = (0..n)
            .map(|_| {
                // The Zipf sample is a rank in 1..=keys.
                let rank = (self.zipf.sample(rng) as u64).saturating_sub(1).min(last);
                Key(self.keys[rank as usize])
            })
            .collect();
        batch.sort_unstable();
        batch.dedup();
        batch
    }
}

/// What one worker did.
#[derive(Clone, Copy, Debug, Default)]
struct Done {
    batches: u64,
    keys: u64,
}

/// A small deterministic fake gradient: a pull towards zero plus a key-dependent constant.
fn gradient(keys: &[Key], vals: &[f32], len: usize, grad: &mut Vec<f32>) {
    grad.clear();
    for (j, k) in keys.iter().enumerate() {
        for e in 0..len {
            let bias = ((k.0 + e as u64) % 5) as f32 * 1e-3;
            grad.push(bias - 1e-2 * vals[j * len + e]);
        }
    }
}

/// One worker's loop.
fn work(
    w: &mut Worker,
    opts: &DemoOptions,
    sampler: &KeySampler,
    rng: &mut StdRng,
) -> Result<Done, DemoError> {
    let (node, worker) = (w.node(), w.id().0);
    let fail =
        |batch: u64, op: &'static str| move |error| DemoError::Worker { node, worker, batch, op, error };
    let len = opts.len as usize;
    // Batch i + ahead is announced (an intent, or a localize under relocation) while batch i
    // runs, so that its keys travel meanwhile; each batch is one clock.
    let mut source = (0..opts.batches).map(|_| sampler.batch(rng, opts.batch_keys));
    let mut steps = Prefetch::new(opts.ahead).map_err(|e| DemoError::Options(e.to_string()))?;
    let mut pushes: VecDeque<(u64, Ticket)> = VecDeque::new();
    let (mut vals, mut grad) = (Vec::new(), Vec::new());
    let mut done = Done::default();
    for i in 0.. {
        let Some(keys) = steps.next_step(w, &mut source).map_err(fail(i, "step"))? else { break };
        vals.clear();
        vals.resize(keys.len() * len, 0.0);
        w.pull(&keys, &mut vals).map_err(fail(i, "pull"))?;
        gradient(&keys, &vals, len, &mut grad);
        pushes.push_back((i, w.push(&keys, &grad).map_err(fail(i, "push"))?));
        while pushes.len() > PUSHES_IN_FLIGHT {
            let (b, t) = pushes.pop_front().expect("not empty");
            w.wait(t).map_err(fail(b, "push"))?;
        }
        done.batches += 1;
        done.keys += keys.len() as u64;
    }
    for (b, t) in pushes {
        w.wait(t).map_err(fail(b, "push"))?;
    }
    Ok(done)
}

/// Runs the demo: starts the cluster, runs every worker's batches in its own thread, finalizes
/// the workers, shuts the nodes down and adds up their counters.
pub fn run(opts: &DemoOptions) -> Result<DemoReport, DemoError> {
    opts.check()?;
    let setup_start = Instant::now();
    let layout =
        Layout::uniform(opts.keys, opts.len).map_err(|e| DemoError::Options(format!("layout: {e}")))?;
    let mut cfg = Config::new(opts.nodes, opts.workers, layout);
    cfg.technique = opts.technique;
    cfg.seed = opts.seed;
    let sampler = KeySampler::from_options(opts)?;
    if opts.technique == Technique::MultiTechnique {
        let draws =
            (opts.batches * opts.batch_keys as u64 * u64::from(opts.nodes) * u64::from(opts.workers)) as f64;
        let freqs = sampler.expected_frequencies(opts.zipf, draws);
        cfg.hot_keys = Arc::new(Config::hot_keys_from_frequencies(freqs, opts.keys, HOT_FACTOR));
    }
    let mut ropts = Options::default();
    ropts.barrier_timeout = Some(BARRIER_TIMEOUT);

    // The nodes are bound before the workers, so that on an early return the workers are
    // dropped first.
    let (nodes, workers) = transports::start_nodes(opts.transport, &cfg, &ropts)?;
    let setup = setup_start.elapsed();

    let started = Instant::now();
    let outcomes: Vec<Result<Done, DemoError>> = thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(g, mut w)| {
                let sampler = &sampler;
                let name = format!("parma-demo-{}-{}", w.node().0, w.id().0);
                thread::Builder::new().name(name).spawn_scoped(s, move || {
                    let mut rng = StdRng::seed_from_u64(mix(opts.seed ^ mix(g as u64 + 1)));
                    let result = work(&mut w, opts, sampler, &mut rng);
                    // Finalize even after a failure: the others wait for this worker's barrier.
                    let (node, worker) = (w.node(), w.id().0);
                    let batch = result.as_ref().map_or(0, |d| d.batches);
                    let finalized = w.finalize().map_err(|error| DemoError::Worker {
                        node,
                        worker,
                        batch,
                        op: "finalize",
                        error,
                    });
                    result.and_then(|d| finalized.map(|()| d))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or(Err(DemoError::WorkerPanicked)),
                Err(e) => Err(DemoError::Spawn(e)),
            })
            .collect()
    });
    let wall = started.elapsed();

    let mut stats: Vec<Stats> = Vec::with_capacity(nodes.len());
    for node in nodes {
        let id = node.id();
        stats.push(node.shutdown().map_err(|error| DemoError::Shutdown { node: id, error })?);
    }
    let mut done = Done::default();
    for outcome in outcomes {
        let d = outcome?;
        done.batches += d.batches;
        done.keys += d.keys;
    }

    let mut report = DemoReport {
        options: opts.clone(),
        setup,
        wall,
        batches: done.batches,
        keys_drawn: done.keys,
        pulls: Accesses::default(),
        pushes: Accesses::default(),
        relocations: 0,
        replicas_created: 0,
        sync_rounds: 0,
        staleness_mean_us: 0.0,
        staleness_max_us: 0,
        keys_forwarded: 0,
        messages_sent: 0,
        bytes_sent: 0,
        // Only a transport with a wire counts it.
        wire_bytes_sent: (opts.transport == transports::DemoTransport::Zmq)
            .then(|| stats.iter().map(|s| s.transport.wire_bytes_sent).sum()),
        frames_dropped: 0,
        ops_failed: 0,
    };
    for s in &stats {
        let w = s.workers_total();
        report.pulls =
            report.pulls.plus(Accesses { local: w.keys_pulled_local, remote: w.keys_pulled_remote });
        report.pushes =
            report.pushes.plus(Accesses { local: w.keys_pushed_local, remote: w.keys_pushed_remote });
        report.relocations += s.node.relocations_in;
        report.replicas_created += s.node.replicas_created;
        report.sync_rounds += s.node.sync_rounds;
        report.staleness_max_us = report.staleness_max_us.max(s.node.staleness_max_us);
        report.keys_forwarded += s.node.keys_forwarded;
        report.messages_sent += s.node.messages_sent_total();
        report.bytes_sent += s.node.bytes_sent_total();
        report.frames_dropped += s.node.frames_rejected + s.driver.frames_dropped;
        report.ops_failed += s.node.ops_failed;
    }
    let (sum, samples) = stats
        .iter()
        .fold((0u64, 0u64), |(a, b), s| (a + s.node.staleness_sum_us, b + s.node.staleness_samples));
    report.staleness_mean_us = if samples == 0 { 0.0 } else { sum as f64 / samples as f64 };
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_sorted_distinct_and_skewed() {
        let opts = DemoOptions { keys: 1000, ..DemoOptions::default() };
        let sampler = KeySampler::from_options(&opts).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..200 {
            let b = sampler.batch(&mut rng, 64);
            assert!(!b.is_empty() && b.len() <= 64);
            assert!(b.windows(2).all(|w| w[0] < w[1]));
            for k in b {
                counts[k.0 as usize] += 1;
            }
        }
        // The hottest key (rank 0) is in nearly every batch; a median key in few.
        let hottest = counts[sampler.keys[0] as usize];
        let median = counts[sampler.keys[500] as usize];
        assert!(hottest > 150 && median < 20, "hottest {hottest}, median {median}");
    }

    #[test]
    fn bytes_are_readable() {
        assert_eq!(fmt_bytes(812), "812 B");
        assert_eq!(fmt_bytes(12_345), "12.3 kB");
        assert_eq!(fmt_bytes(145_900_000), "145.9 MB");
        assert_eq!(fmt_bytes(2_100_000_000), "2.1 GB");
    }

    #[test]
    fn bad_options_are_refused() {
        for opts in [
            DemoOptions { nodes: 0, ..DemoOptions::default() },
            DemoOptions { keys: 0, ..DemoOptions::default() },
            DemoOptions { zipf: -1.0, ..DemoOptions::default() },
            DemoOptions { batch_keys: 0, ..DemoOptions::default() },
        ] {
            assert!(matches!(run(&opts), Err(DemoError::Options(_))), "{opts:?}");
        }
    }
}
