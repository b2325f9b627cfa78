//! `parma node`: one node of a cluster of processes over ZeroMQ (or RDMA, `node_transport`),
//! and the workload it runs.
//!
//! A node learns its rank, the world size and the rendezvous from its launcher's environment
//! (`parma_runtime::startup`; `parma launch` sets parma's own variables), binds its
//! transport, meets the others at the rendezvous, starts its runtime and runs the **sums**
//! workload: every worker draws Zipf-skewed batches of keys (the demo's law), signals intent
//! ahead under the techniques that use it (localizes under relocation), pulls the batch and
//! pushes exactly 1 to every element of every key. Nothing is random beyond the seed, so every
//! node can replay every worker's draws and knows how many times each key was pushed. After a
//! cluster-wide barrier each worker pulls its share of the keys and checks every value
//! against that count, exactly (the counts stay far below 2^24, where `f32` holds integers
//! exactly). Replicas are eventually consistent, so before the check every node passes two
//! sync rounds around a barrier (every delta reaches its owner, then every replica is
//! refreshed). A lost or doubled update anywhere shows as a wrong sum.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use parma::Prefetch;
use parma_core::{Config, Key, Layout, NodeId, OpError, Technique};
use parma_runtime::startup::Role;
use parma_runtime::{Stats, Ticket, Worker};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::demo::{mix, KeySampler};

pub use parma_train::nodes::{job_digest, NetOptions, NodeError};

/// Pushes one worker keeps in flight before it waits for the oldest.
const PUSHES_IN_FLIGHT: usize = 8;
/// Keys per pull when the sums are checked.
const CHECK_CHUNK: usize = 512;
/// Mismatches reported in full; the rest are counted.
const MISMATCHES_SHOWN: usize = 5;

/// The workload every node of one cluster runs; the same options on every node.
#[derive(Clone, Debug, PartialEq)]
pub struct SumsOptions {
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
    /// Exponent of the Zipf law of key popularity.
    pub zipf: f64,
    /// Seed of every draw.
    pub seed: u64,
    /// How the cluster manages parameters.
    pub technique: Technique,
    /// Batches ahead that intents (or localizes) are signaled.
    pub ahead: u64,
}

impl Default for SumsOptions {
    fn default() -> SumsOptions {
        SumsOptions {
            workers: 2,
            keys: 100_000,
            len: 8,
            batches: 1000,
            batch_keys: 64,
            zipf: 1.1,
            seed: 1,
            technique: Technique::Adaptive,
            ahead: 16,
        }
    }
}

impl SumsOptions {
    fn check(&self, world: u16) -> Result<(), NodeError> {
        let bad = |what: String| Err(NodeError::Options(what));
        if self.workers == 0 {
            return bad("--workers must be at least 1".into());
        }
        if self.keys == 0 || self.keys > crate::demo::KEYS_MAX {
            return bad(format!("--keys must be between 1 and {}", crate::demo::KEYS_MAX));
        }
        if self.len == 0 || self.batch_keys == 0 {
            return bad("--len and --batch-keys must be at least 1".into());
        }
        if !(self.zipf.is_finite() && self.zipf >= 0.0) {
            return bad("--zipf must be a finite number >= 0".into());
        }
        // Every push adds 1: a key's sum is at most the number of batches of all workers.
        let pushes = u64::from(world) * u64::from(self.workers) * self.batches;
        if pushes >= 1 << 24 {
            return bad(format!(
                "{pushes} batches in all: sums beyond 2^24 are not exact in f32; fewer --batches or --workers"
            ));
        }
        Ok(())
    }

    /// The configuration every node runs.
    pub fn config(&self, world: u16) -> Result<Config, NodeError> {
        let layout =
            Layout::uniform(self.keys, self.len).map_err(|e| NodeError::Options(format!("layout: {e}")))?;
        let mut cfg = Config::new(world, self.workers, layout);
        cfg.technique = self.technique;
        cfg.seed = self.seed;
        Ok(cfg)
    }
}

/// What one node's share of the workload did.
#[derive(Clone, Debug, Default)]
pub struct SumsOutcome {
    /// Batches run by this node's workers.
    pub batches: u64,
    /// Values (keys × len) checked by this node's workers.
    pub values_checked: u64,
    /// From the first batch to the last worker's check.
    pub wall: Duration,
}

/// How many times each key is pushed by the whole cluster: every worker's draws replayed.
/// `None` if a peer failed meanwhile (the replay is as long as the whole cluster's sampling).
fn expected_counts(
    opts: &SumsOptions,
    world: u16,
    sampler: &KeySampler,
    failed: FailedPeer<'_>,
) -> Option<Vec<u32>> {
    let mut counts = vec![0u32; opts.keys as usize];
    for g in 0..u64::from(world) * u64::from(opts.workers) {
        let mut rng = worker_rng(opts.seed, g);
        for i in 0..opts.batches {
            if i % 1024 == 0 && failed().is_some() {
                return None;
            }
            for k in sampler.batch(&mut rng, opts.batch_keys) {
                counts[k.0 as usize] += 1;
            }
        }
    }
    Some(counts)
}

fn worker_rng(seed: u64, global_worker: u64) -> StdRng {
    StdRng::seed_from_u64(mix(seed ^ mix(global_worker + 1)))
}

/// What one worker did: batches, values checked, the first wrong ones, how many were wrong.
type WorkerDone = (u64, u64, Vec<String>, u64);

/// Tells the workers that a peer failed: `None` while every peer is alive.
pub type FailedPeer<'a> = &'a (dyn Fn() -> Option<NodeId> + Sync);

/// Runs the sums workload on this node's `workers` (of a cluster of `world` nodes whose every
/// node runs it with the same options), checks this node's share of the sums, and finalizes
/// the workers. Every worker stops at its next batch once `failed` names a peer.
pub fn run_sums(
    workers: Vec<Worker>,
    world: u16,
    opts: &SumsOptions,
    failed: FailedPeer<'_>,
) -> Result<SumsOutcome, NodeError> {
    opts.check(world)?;
    let sampler = KeySampler::new(opts.keys, opts.zipf, opts.seed).map_err(NodeError::Options)?;
    let started = Instant::now();
    // The replay runs beside the workers; they wait for it only when they check.
    let counts: OnceLock<Option<Vec<u32>>> = OnceLock::new();
    let results: Vec<Result<WorkerDone, NodeError>> = thread::scope(|s| {
        let (sampler_ref, counts_ref) = (&sampler, &counts);
        s.spawn(move || counts_ref.set(expected_counts(opts, world, sampler_ref, failed)));
        let handles: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                let (sampler, counts) = (&sampler, &counts);
                let name = format!("parma-sums-{}-{}", w.node().0, w.id().0);
                thread::Builder::new().name(name).spawn_scoped(s, move || {
                    let (node, worker) = (w.node(), w.id().0);
                    let g = u64::from(node.0) * u64::from(opts.workers) + u64::from(worker);
                    let total = u64::from(world) * u64::from(opts.workers);
                    let r = work(&mut w, opts, sampler, g, failed).and_then(|batches| {
                        let (checked, wrong, first) = check(&mut w, opts, counts, g, total, failed)?;
                        Ok((batches, checked, first, wrong))
                    });
                    // Finalize even after a failure: the others wait for this worker's barrier.
                    let fin = w.finalize().map_err(|error| NodeError::Worker {
                        node,
                        worker,
                        batch: opts.batches,
                        op: "finalize",
                        error,
                    });
                    r.and_then(|x| fin.map(|()| x))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => {
                    h.join().unwrap_or_else(|_| Err(NodeError::Thread("a worker thread panicked".into())))
                }
                Err(e) => Err(NodeError::Thread(format!("could not spawn a worker thread: {e}"))),
            })
            .collect()
    });
    let mut out = SumsOutcome { wall: started.elapsed(), ..SumsOutcome::default() };
    let (mut wrong, mut first) = (0, Vec::new());
    for r in results {
        let (batches, checked, f, w) = r?;
        out.batches += batches;
        out.values_checked += checked;
        wrong += w;
        first.extend(f);
    }
    if wrong > 0 {
        first.truncate(MISMATCHES_SHOWN);
        return Err(NodeError::Sums { wrong, checked: out.values_checked, first });
    }
    Ok(out)
}

/// A worker operation's failure, named by its root cause: when the operation failed because a
/// peer did (or a request timed out) and this node's transport has seen a peer fail, the first
/// peer that failed is the cause. Once one survivor stops, the others see it go too; without
/// this, a node that saw node 2 die first could report "node 0 failed", the node that stopped
/// because of node 2.
fn worker_failed(
    node: NodeId,
    worker: u16,
    batch: u64,
    op: &'static str,
    error: OpError,
    failed: FailedPeer<'_>,
) -> NodeError {
    let peer_shaped = error.may_come_from_a_failed_peer();
    match failed() {
        Some(peer) if peer_shaped => NodeError::PeerFailed { peer },
        _ => NodeError::Worker { node, worker, batch, op, error },
    }
}

/// One worker's batches; returns how many ran.
fn work(
    w: &mut Worker,
    opts: &SumsOptions,
    sampler: &KeySampler,
    g: u64,
    failed: FailedPeer<'_>,
) -> Result<u64, NodeError> {
    let (node, worker) = (w.node(), w.id().0);
    let fail =
        |batch: u64, op: &'static str| move |error| worker_failed(node, worker, batch, op, error, failed);
    let mut rng = worker_rng(opts.seed, g);
    let len = opts.len as usize;
    // Batch i + ahead is announced while batch i runs; each batch is one clock.
    let mut source = (0..opts.batches).map(|_| sampler.batch(&mut rng, opts.batch_keys));
    let mut steps = Prefetch::new(opts.ahead as usize).map_err(|e| NodeError::Options(e.to_string()))?;
    let mut pushes: std::collections::VecDeque<(u64, Ticket)> = Default::default();
    let (mut i, mut vals, mut ones) = (0u64, Vec::new(), Vec::new());
    loop {
        if let Some(peer) = failed() {
            return Err(NodeError::PeerFailed { peer });
        }
        let Some(keys) = steps.next_step(w, &mut source).map_err(fail(i, "step"))? else { break };
        vals.resize(keys.len() * len, 0.0);
        w.pull(&keys, &mut vals).map_err(fail(i, "pull"))?;
        ones.resize(keys.len() * len, 1.0);
        pushes.push_back((i, w.push(&keys, &ones).map_err(fail(i, "push"))?));
        while pushes.len() > PUSHES_IN_FLIGHT {
            let (b, t) = pushes.pop_front().expect("not empty");
            w.wait(t).map_err(fail(b, "push"))?;
        }
        i += 1;
    }
    for (b, t) in pushes {
        w.wait(t).map_err(fail(b, "push"))?;
    }
    // Every worker of every node has pushed everything once this passes; replicas may still
    // hold deltas their owners have not merged, and values older than their owners'.
    w.barrier().map_err(fail(opts.batches, "barrier"))?;
    // After a sync round of every node, every delta is at its owner; after one more round
    // here, every replica here was refreshed from an owner that had them all.
    w.wait_sync().map_err(fail(opts.batches, "sync"))?;
    w.barrier().map_err(fail(opts.batches, "barrier"))?;
    w.wait_sync().map_err(fail(opts.batches, "sync"))?;
    Ok(opts.batches)
}

/// Checks the keys `k` with `k % total == g`: (values checked, wrong, the first wrong ones).
fn check(
    w: &mut Worker,
    opts: &SumsOptions,
    counts: &OnceLock<Option<Vec<u32>>>,
    g: u64,
    total: u64,
    failed: FailedPeer<'_>,
) -> Result<(u64, u64, Vec<String>), NodeError> {
    let (node, worker) = (w.node(), w.id().0);
    let len = opts.len as usize;
    let counts = loop {
        match counts.get() {
            Some(Some(c)) => break c,
            Some(None) => return Err(NodeError::PeerFailed { peer: failed().unwrap_or(node) }),
            None => thread::sleep(Duration::from_millis(1)),
        }
    };
    let keys: Vec<Key> = (g..opts.keys).step_by(total as usize).map(Key).collect();
    let (mut checked, mut wrong, mut first) = (0u64, 0u64, Vec::new());
    let mut vals = Vec::new();
    for chunk in keys.chunks(CHECK_CHUNK) {
        if let Some(peer) = failed() {
            return Err(NodeError::PeerFailed { peer });
        }
        vals.resize(chunk.len() * len, 0.0);
        w.pull(chunk, &mut vals)
            .map_err(|error| worker_failed(node, worker, opts.batches, "check pull", error, failed))?;
        for (j, k) in chunk.iter().enumerate() {
            let want = counts[k.0 as usize] as f32;
            for (e, v) in vals[j * len..(j + 1) * len].iter().enumerate() {
                checked += 1;
                if *v != want {
                    wrong += 1;
                    if first.len() < MISMATCHES_SHOWN {
                        first.push(format!("key {} element {e}: {v} where {want} were pushed", k.0));
                    }
                }
            }
        }
    }
    // Nobody shuts down while another node still checks.
    w.barrier().map_err(|error| NodeError::Worker {
        node,
        worker,
        batch: opts.batches,
        op: "barrier",
        error,
    })?;
    Ok((checked, wrong, first))
}

/// How one node process joins its cluster.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The workload.
    pub sums: SumsOptions,
    /// Its start-up and transport.
    pub net: NetOptions,
}

/// What a node process did.
#[derive(Clone, Debug)]
pub struct NodeReport {
    /// This node.
    pub me: NodeId,
    /// Nodes in the cluster.
    pub world: u16,
    /// Which launcher's environment started it.
    pub launcher: &'static str,
    /// What the workload did here.
    pub outcome: SumsOutcome,
    /// The node's counters at shutdown.
    pub stats: Stats,
}

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, t, w) = (&self.stats, &self.stats.transport, self.stats.workers_total());
        writeln!(
            f,
            "node {} of {} ({}): {} batches, {} values checked, all sums exact, {:.2} s",
            self.me.0,
            self.world,
            self.launcher,
            self.outcome.batches,
            self.outcome.values_checked,
            self.outcome.wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "  accesses   {:.2}% remote; {} relocations in, {} replicas created",
            100.0 * w.remote_share(),
            s.node.relocations_in,
            s.node.replicas_created
        )?;
        write!(
            f,
            "  transport  {} frames / {} bytes sent, {} received, {} retransmitted, {} duplicates, \
             {} reconnects, {} refused",
            t.frames_sent,
            t.bytes_sent,
            t.frames_received,
            t.frames_retransmitted,
            t.duplicates_dropped,
            t.reconnects,
            t.session_refusals + t.strangers_refused
        )
    }
}

/// Runs one node: start-up, the workload, shutdown. `Ok(None)` for a process that is not a
/// node (ps-lite's scheduler, after the rendezvous; its workers).
pub fn run_node(opts: &NodeOptions) -> Result<Option<NodeReport>, NodeError> {
    let launch = opts.net.launch()?;
    if launch.role() == Role::Worker {
        return Ok(None);
    }
    let world = launch.world();
    opts.sums.check(world)?;
    let cfg = opts.sums.config(world)?;
    // Every option of the workload, not only those in the configuration: nodes that would
    // replay different draws are refused at the rendezvous instead of reporting wrong sums.
    let net = NetOptions { job_digest: job_digest(&format!("{:?}", opts.sums)), ..opts.net.clone() };
    let Some((me, node, workers)) =
        crate::node_transport::start(&net, &launch, cfg, parma_runtime::Options::default())?
    else {
        return Ok(None);
    };
    println!(
        "node {} of {world}: up, running the sums workload ({} batches per worker, {} workers)",
        me.0, opts.sums.batches, opts.sums.workers
    );

    let stop = AtomicBool::new(false);
    let outcome = thread::scope(|s| {
        if let Some(addr) = &opts.net.metrics_addr {
            let (node, stop) = (&node, &stop);
            let addr = addr.clone();
            s.spawn(move || parma_train::metrics::serve(&addr, node, stop));
        }
        let failed = || node.failed_peers().first().copied();
        let r = run_sums(workers, world, &opts.sums, &failed);
        stop.store(true, Ordering::SeqCst);
        r
    });
    match outcome {
        Ok(outcome) => {
            let stats = node.shutdown().map_err(NodeError::Shutdown)?;
            Ok(Some(NodeReport { me, world, launcher: launch.launcher().name(), outcome, stats }))
        }
        // Dropping the runtime stops it at once: a failed cluster does not wait for drains.
        Err(e) => Err(e),
    }
}
