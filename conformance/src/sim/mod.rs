//! The deterministic cluster simulator: random workloads on 3 to 8 nodes over a simulated
//! network with faults, every setting derived from one seed (swarm testing), invariants
//! checked after every step, then a healing phase that must converge.
//!
//! A failure names its seed; `PARMA_SEED=<seed>` replays exactly that run.

pub mod checks;
pub mod cluster;
pub mod digest;
pub mod sampling;
pub mod workload;

use parma_core::{Config, Gate, Instant, Key, Layout, Technique};
use parma_transport_loopback::sim::{Faults, SimNet};

pub use cluster::Cluster;
use workload::{is_set_key, Mix, Workload};

use crate::rng::Rng;

/// Most steps of the workload phase before a run counts as stuck.
const WORKLOAD_STEPS_MAX: u64 = 2_000_000;
/// Most steps of the healing phase before a run counts as not converging.
const HEAL_STEPS_MAX: u64 = 100_000;

/// What a passing run did.
#[derive(Clone, Debug)]
pub struct Report {
    pub seed: u64,
    /// The node that stopped for good during the run, if the seed chose one.
    pub killed: Option<parma_core::NodeId>,
    /// Keys lost with it (no live main copy at the end), and worker operations that ended
    /// with the error its failure explains.
    pub keys_lost: u64,
    pub ops_failed: u64,
    pub nodes: u16,
    pub keys: u64,
    pub ops: u64,
    /// Of those, sample operations, and those of local sampling that found no local key.
    pub samples: u64,
    pub samples_nothing_local: u64,
    pub steps: u64,
    pub relocations: u64,
    pub messages: u64,
    /// The network's [`SimNet::trace_hash`] at the end: every delivery, in order.
    pub trace_hash: u64,
    /// [`Cluster::outputs_digest`] at the end: every transmit, worker completion and peer
    /// failure, in the order the nodes gave them.
    pub outputs_hash: u64,
}

/// A failing run: what broke, and the seed that replays it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub technique: Technique,
    pub what: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} ({:?}) failed: {}\n  replay with PARMA_SEED={}",
            self.seed, self.technique, self.what, self.seed
        )
    }
}

/// The cluster configuration a seed chooses.
pub fn config_for(seed: u64, technique: Technique) -> Config {
    let mut rng = Rng::new(seed);
    let nodes = rng.range(3, 8) as u16;
    let workers = rng.range(1, 3) as u16;
    let keys = rng.range(8, 64);
    let layout = if rng.chance(0.5) {
        Layout::uniform(keys, rng.range(1, 4) as u32)
    } else {
        let mid = rng.range(1, keys - 1);
        Layout::ranges(keys, vec![(0, rng.range(1, 3) as u32), (mid, rng.range(1, 5) as u32)])
    };
    let mut cfg = Config::new(nodes, workers, layout.expect("layout from seed is valid"));
    cfg.technique = technique;
    cfg.seed = seed;
    cfg.store_shards = 4;
    cfg.location_cache_slots = 1 << rng.range(0, 6);
    cfg.keys_per_message_max = rng.range(1, 8) as usize;
    cfg.store_keys_max = keys as usize;
    cfg.replicas_max = keys as usize;
    cfg.sync_idle_interval = parma_core::Duration(rng.range(100, 2_000));
    if rng.chance(0.2) {
        cfg.sync_rounds_per_sec_max = Some(rng.range(500, 5_000) as u32);
    }
    cfg.timing.immediate = rng.chance(0.2);
    // Drawn apart so that every other choice of a seed is the same under either placement.
    cfg.placement = if Rng::new(seed ^ 0x706c_6163_656d_656e).chance(0.5) {
        parma_core::Placement::Dense
    } else {
        parma_core::Placement::Hashed
    };
    if technique == Technique::MultiTechnique {
        let hot: std::collections::HashSet<Key> =
            (0..rng.range(1, 4)).map(|_| Key(rng.range(0, keys - 1))).collect();
        cfg.hot_keys = std::sync::Arc::new(hot.into_iter().collect());
    }
    cfg
}

/// Whether `technique` keeps some replicas for the whole run (they never drop, so rounds
/// never stop).
fn permanent_replicas(technique: Technique) -> bool {
    technique.keeps_replicas()
}

/// Runs the workload of `seed` under `technique` and checks everything.
pub fn run_seed(seed: u64, technique: Technique) -> Result<Report, Failure> {
    run_seed_gated(seed, technique, Gate::Async)
}

/// [`run_seed`] under the clock gate `gate`: every worker advances its clock after each
/// operation and waits at the gate; under BSP and SSP every read is checked against the
/// gate's bound (see [`workload::Mix::gate`]). Under `Gate::Async` it is `run_seed`, step for
/// step.
pub fn run_seed_gated(seed: u64, technique: Technique, gate: Gate) -> Result<Report, Failure> {
    let fail = |what: String| Failure { seed, technique, what };
    let faults = Faults::from_seed(seed);
    let mut cfg = config_for(seed, technique);
    cfg.gate = gate;
    // Keys stay long enough for requests that trail them to catch up, whatever the delays.
    cfg.relocation_hold = parma_core::Duration(2 * (faults.delay_max_us + faults.jitter_us) + 100);
    let keys = cfg.layout.key_end();
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let net = SimNet::new(cfg.nodes, faults, seed);
    let mut srng = Rng::new(seed ^ 0x5a4d_706c_6f70_7473);
    cfg.sampling.pool_size = srng.range(1, 6) as u32;
    cfg.sampling.reuse = srng.range(1, 4) as u32;
    cfg.sampling.with_replacement = srng.chance(0.7);
    let mut cluster = Cluster::new(&cfg, net).map_err(|e| fail(format!("config: {e}")))?;
    let dists = sampling::register(&mut cluster, &cfg.layout, seed).map_err(fail)?;
    let replicates = matches!(
        technique,
        Technique::Adaptive
            | Technique::AdaptiveNoRelocation
            | Technique::FullReplication
            | Technique::MultiTechnique
    );
    let mut mix = Mix::draw(&mut rng, technique.uses_localize(), technique.uses_rounds(), !replicates);
    mix.gate = gate;
    let total_ops = u64::from(mix.ops_per_worker) * u64::from(cfg.nodes) * u64::from(cfg.workers_per_node);
    let mut work = Workload::new(cfg.nodes, cfg.workers_per_node, keys, mix, &mut rng);
    work.sample_from(dists);
    let kill = kill_plan(seed, cfg.nodes, total_ops);

    // Phase 1: the workload, with faults.
    let mut moves = 0;
    while !work.finished() {
        if cluster.steps() > WORKLOAD_STEPS_MAX {
            return Err(fail(format!(
                "workload did not finish (livelock or lost request); {}",
                checks::summary(cluster.nodes())
            )));
        }
        if let Some((victim, after)) = kill {
            if !cluster.is_dead(victim) && work.ledger.ops_done >= after {
                cluster.kill(victim);
                work.node_stopped(victim);
            }
        }
        work.poll(&mut cluster).map_err(fail)?;
        let next = [cluster.next_due(), work.next_due()].into_iter().flatten().min();
        match next {
            Some(t) => cluster.run_until(t),
            None if work.finished() => break,
            // A node stopped just now: the others hear of it when next stepped, which no
            // timer or frame may bring about (a worker waiting at its gate for a node that
            // stopped before it answered).
            None if cluster.step() => {}
            None => {
                let waiting = work.waiting(&cluster);
                return Err(fail(format!("workers wait but nothing is due: a request was lost{waiting}")));
            }
        }
        check_step(&cluster, keys, &mut moves).map_err(fail)?;
        work.poll(&mut cluster).map_err(fail)?;
    }

    // Phase 2: heal everything; the cluster must fall quiet within a bound.
    settle(&mut cluster, technique, |c| check_step(c, keys, &mut moves)).map_err(fail)?;
    let killed = kill.map(|(v, _)| v).filter(|v| cluster.is_dead(*v));

    // Phase 3: the end state.
    if let Some(victim) = killed {
        let (lost, probe_failed) =
            check_after_failure(&mut cluster, &work, victim, permanent_replicas(technique))
                .map_err(|e| fail(format!("after node {victim} stopped: {e}")))?;
        return Ok(Report {
            seed,
            killed,
            keys_lost: lost,
            ops_failed: work.ops_failed + probe_failed,
            nodes: cfg.nodes,
            keys,
            ops: work.ledger.ops_done,
            samples: work.samples,
            samples_nothing_local: work.samples_nothing_local,
            steps: cluster.steps(),
            relocations: cluster.nodes().iter().map(|n| n.stats().relocations_in).sum(),
            messages: cluster.nodes().iter().map(|n| n.stats().messages_sent_total()).sum(),
            trace_hash: cluster.net().trace_hash(),
            outputs_hash: cluster.outputs_digest(),
        });
    }
    end_state(&cluster, technique).map_err(fail)?;
    let nodes = cluster.nodes();
    for k in 0..keys {
        let key = Key(k);
        let v = checks::value_of(nodes, key).ok_or_else(|| fail(format!("key {k} has no value")))?;
        let init = 0.0;
        if is_set_key(key) {
            let ok = v.iter().all(|x| *x == v[0])
                && (v[0] == init
                    || work.ledger.set_values.get(&key).is_some_and(|s| s.contains(&(v[0] as u32))));
            if !ok {
                return Err(fail(format!("set key {k} ends as {v:?}")));
            }
        } else {
            let want = init + work.ledger.pushed.get(&key).copied().unwrap_or(0) as f32;
            if v.iter().any(|x| *x != want) {
                return Err(fail(format!("key {k} ends as {v:?}, expected {want} in every element")));
            }
        }
    }
    let relocations = nodes.iter().map(|n| n.stats().relocations_in).sum();
    let messages = nodes.iter().map(|n| n.stats().messages_sent_total()).sum();
    Ok(Report {
        seed,
        killed: None,
        keys_lost: 0,
        ops_failed: 0,
        nodes: cfg.nodes,
        keys,
        ops: work.ledger.ops_done,
        samples: work.samples,
        samples_nothing_local: work.samples_nothing_local,
        steps: cluster.steps(),
        relocations,
        messages,
        trace_hash: cluster.net().trace_hash(),
        outputs_hash: cluster.outputs_digest(),
    })
}

/// One line that two runs of `seed` under `technique` must print alike if the seed replays
/// exactly: for a passing run its trace and output digests and its step count, for a failing
/// one a digest of what failed (the message names keys, nodes and values as the run met them).
pub fn fingerprint(seed: u64, technique: Technique, result: &Result<Report, Failure>) -> String {
    match result {
        Ok(r) => format!(
            "{} {seed} passed trace {:016x} outputs {:016x} steps {} ops_failed {}",
            technique.name(),
            r.trace_hash,
            r.outputs_hash,
            r.steps,
            r.ops_failed
        ),
        Err(f) => {
            let mut d = digest::Digest::default();
            d.bytes(f.what.as_bytes());
            format!("{} {seed} failed {:016x}", technique.name(), d.finish())
        }
    }
}

/// Whether and when `seed` stops a node for good: in one seed of eight, a node chosen by the
/// seed stops once the workers have completed a share of their operations (5 % to 80 %).
/// Drawn from its own generator, so the other fault settings of a seed do not depend on it.
pub fn kill_plan(seed: u64, nodes: u16, total_ops: u64) -> Option<(parma_core::NodeId, u64)> {
    let mut rng = Rng::new(seed ^ 0x6b11_1ed0_0000_0000);
    if nodes < 3 || !rng.chance(0.125) {
        return None;
    }
    let victim = parma_core::NodeId(rng.range(0, u64::from(nodes) - 1) as u16);
    let after = total_ops * rng.range(5, 80) / 100;
    Some((victim, after))
}

/// The end state of a run in which `victim` stopped for good, after the healing phase:
/// - every key has at most one main copy on the live nodes; a key with none is accounted
///   for: its home was the victim, or its home reports it in `keys_lost`, or the node that
///   gave it to the victim reports it in `keys_maybe_lost`; a key its home reports lost has
///   no live copy;
/// - a live main copy's value holds every add that completed for a worker of a live node,
///   and nothing that was never issued (set keys: a value that was set, or the initial one);
/// - the live nodes are idle, their replicas agree with live main copies, and (unless
///   replicas are permanent) none remain;
/// - a probe from a live node pulls every key: each pull ends; one that succeeds returns the
///   live main copy's value, and a key without one is never read.
///
/// Returns the number of keys lost and of probe pulls that ended with an error.
fn check_after_failure(
    cluster: &mut Cluster,
    work: &Workload,
    victim: parma_core::NodeId,
    permanent: bool,
) -> Result<(u64, u64), String> {
    use parma_core::{Completion, NodeId, OpError, WorkerId};
    let keys = cluster.nodes()[0].config().layout.key_end();
    let live: Vec<&parma_core::Node> = cluster.live_nodes();
    for n in &live {
        if n.pending_requests() + n.waiting_ops() > 0 {
            return Err(format!("node {} still has requests or operations waiting", n.id()));
        }
    }
    checks::replicas_converged_on(&live)?;
    if !permanent {
        checks::no_replicas_on(&live)?;
    }
    let mut reported: std::collections::BTreeMap<Key, NodeId> = std::collections::BTreeMap::new();
    let mut maybe: std::collections::BTreeSet<Key> = std::collections::BTreeSet::new();
    for n in &live {
        for (k, dead) in n.keys_lost().into_iter().chain(n.keys_maybe_lost()) {
            if dead != victim {
                return Err(format!(
                    "node {} reports key {k} lost with node {dead}, which is running",
                    n.id()
                ));
            }
        }
        reported.extend(n.keys_lost());
        maybe.extend(n.keys_maybe_lost().into_iter().map(|(k, _)| k));
    }
    let sure = work.pushed_for_sure();
    let mut lost = 0;
    let mut copies: Vec<Option<Vec<f32>>> = Vec::new();
    for k in 0..keys {
        let key = Key(k);
        let holders: Vec<&&parma_core::Node> = live.iter().filter(|n| n.store().holds(key)).collect();
        match holders.as_slice() {
            [] => {
                let home = cluster.nodes()[0].store().homes().home(key);
                if home != victim && !reported.contains_key(&key) && !maybe.contains(&key) {
                    return Err(format!("key {k} has no live main copy and no live node reports it lost"));
                }
                lost += 1;
                copies.push(None);
            }
            [n] => {
                if reported.contains_key(&key) {
                    return Err(format!("key {k} is reported lost but node {} holds it", n.id()));
                }
                let v = checks::value_of(std::slice::from_ref(**n), key)
                    .ok_or_else(|| format!("key {k}: no value at node {}", n.id()))?;
                if v.iter().any(|x| *x != v[0]) {
                    return Err(format!("key {k}: torn value {v:?}"));
                }
                if is_set_key(key) {
                    let ok = v[0] == 0.0
                        || work.ledger.set_values.get(&key).is_some_and(|s| s.contains(&(v[0] as u32)));
                    if !ok {
                        return Err(format!("set key {k} ends as {v:?}, never set"));
                    }
                } else {
                    let (x, lo) = (v[0] as u64, sure.get(&key).copied().unwrap_or(0));
                    let hi = work.ledger.pushed.get(&key).copied().unwrap_or(0);
                    if !(lo..=hi).contains(&x) {
                        return Err(format!(
                            "key {k} ends as {x}: adds that surely completed sum to {lo}, all adds issued to {hi}"
                        ));
                    }
                }
                copies.push(Some(v));
            }
            many => {
                let ids: Vec<NodeId> = many.iter().map(|n| n.id()).collect();
                return Err(format!("key {k} has main copies on {ids:?}"));
            }
        }
    }
    // The probe: a live node's worker pulls each key alone.
    let prober = live.first().map(|n| n.id()).ok_or("no live node")?;
    let layout = cluster.nodes()[0].config().layout.clone();
    let mut probe_failed = 0;
    for k in 0..keys {
        let key = Key(k);
        let len = layout.len_of(key).unwrap_or(0);
        let mut vals = vec![f32::NAN; len];
        let (ticket, misses) = cluster
            .pull(prober, WorkerId(0), &[key], &mut vals)
            .map_err(|e| format!("probe of key {k} refused: {e}"))?;
        let start = cluster.steps();
        let result = loop {
            if let Some(r) = cluster.take_result(prober, WorkerId(0), ticket) {
                break r;
            }
            if cluster.steps() - start > HEAL_STEPS_MAX {
                return Err(format!("the probe of key {k} never ended"));
            }
            let t = cluster.next_due().unwrap_or(cluster.now());
            cluster.run_until(t.max(cluster.now()));
        };
        match (result, &copies[k as usize]) {
            (Ok(Completion::Pull(remote)), Some(want)) => {
                misses.fill(&remote, &mut vals).map_err(|e| format!("probe of key {k}: {e}"))?;
                if vals != *want {
                    return Err(format!("probe of key {k} read {vals:?}, its main copy is {want:?}"));
                }
            }
            (Ok(_), None) => return Err(format!("probe read key {k}, which has no live main copy")),
            (Err(OpError::PeerFailed { .. } | OpError::Unreachable { .. } | OpError::Timeout), _) => {
                probe_failed += 1
            }
            (r, _) => return Err(format!("probe of key {k}: {r:?}")),
        }
    }
    Ok((lost, probe_failed))
}

/// Heals the network and runs `cluster` until it has settled, calling `each_step` after every
/// step; fails if that takes more than a bound of steps. Settled means quiet; under techniques
/// whose replicas live for the whole run (rounds never stop) it means that every node finished
/// rounds with nothing else outstanding: first until every delta was taken (at most two rounds
/// each), then two more everywhere, all after the last merge, so every replica is refreshed to
/// the final value.
pub fn settle(
    cluster: &mut Cluster,
    technique: Technique,
    mut each_step: impl FnMut(&Cluster) -> Result<(), String>,
) -> Result<(), String> {
    cluster.net().heal();
    let start = cluster.steps();
    let mut target: Vec<u64> = cluster.nodes().iter().map(|n| n.sync_rounds_done() + 2).collect();
    // After a node stopped for good, keys may never arrive, and pointers to it stay.
    let stopped = cluster.nodes().iter().any(|n| cluster.is_dead(n.id()));
    let mut stage = 1;
    let mut settled = |c: &Cluster| {
        if !permanent_replicas(technique) {
            return c.quiet();
        }
        let reached = c.stalled() == 0
            && c.nodes().iter().zip(&target).filter(|(n, _)| !c.is_dead(n.id())).all(|(n, t)| {
                n.sync_rounds_done() >= *t
                    && n.pending_requests() == 0
                    && (stopped || n.keys_incoming() == 0 && n.forwarding_pointers() == 0)
            });
        if reached && stage == 1 {
            stage = 2;
            target = c.nodes().iter().map(|n| n.sync_rounds_done() + 2).collect();
            return false;
        }
        reached
    };
    while !settled(cluster) {
        if cluster.steps() - start > HEAL_STEPS_MAX {
            return Err(format!(
                "did not converge after healing{}; stalled {}, in flight {}{}",
                if stopped { " (a node stopped)" } else { "" },
                cluster.stalled(),
                cluster.net().in_flight(),
                checks::summary(cluster.nodes())
            ));
        }
        let t = cluster.next_due().unwrap_or(cluster.now());
        cluster.run_until(t.max(cluster.now()));
        each_step(cluster)?;
    }
    Ok(())
}

/// The checks of a settled cluster (see [`settle`]): nothing left outstanding, every key has
/// exactly one main copy, every replica equals it, and no replica is left unless `technique`
/// keeps replicas for the whole run.
pub fn end_state(cluster: &Cluster, technique: Technique) -> Result<(), String> {
    let nodes = cluster.nodes();
    let keys = nodes.first().map_or(0, |n| n.config().layout.key_end());
    checks::nothing_left(nodes)?;
    checks::exactly_one_copy(nodes, keys)?;
    checks::replicas_converged(nodes)?;
    if !permanent_replicas(technique) {
        checks::no_replicas(nodes)?;
    }
    Ok(())
}

/// Checks after every step: each node's own invariants, and (whenever a key moved) that no
/// key has two main copies. `moves` carries the count of moves seen so far between calls.
pub fn check_step(cluster: &Cluster, keys: u64, moves: &mut u64) -> Result<(), String> {
    let nodes = cluster.nodes();
    checks::node_invariants(nodes)?;
    let now_moves: u64 = nodes.iter().map(|n| n.stats().relocations_in + n.stats().relocations_out).sum();
    if now_moves != *moves {
        *moves = now_moves;
        checks::at_most_one_copy(nodes, keys)?;
    }
    Ok(())
}

/// The seeds to run: `PARMA_SEED` alone if set, else `first..first + count`.
pub fn seeds(first: u64, count: u64) -> Vec<u64> {
    match std::env::var("PARMA_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (first..first + count).collect(),
    }
}

/// A point in virtual time, for reports.
pub fn micros(t: Instant) -> u64 {
    t.as_micros()
}
