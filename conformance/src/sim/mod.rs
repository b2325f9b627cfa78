//! The deterministic cluster simulator: random workloads on 3 to 8 nodes over a simulated
//! network with faults, every setting derived from one seed (swarm testing), invariants
//! checked after every step, then a healing phase that must converge.
//!
//! A failure names its seed; `PARMA_SEED=<seed>` replays exactly that run.

pub mod checks;
pub mod cluster;
pub mod workload;

use parma_core::{Config, Instant, Key, Layout, Technique};
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
    pub nodes: u16,
    pub keys: u64,
    pub ops: u64,
    pub steps: u64,
    pub relocations: u64,
    pub messages: u64,
    pub trace_hash: u64,
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
    matches!(technique, Technique::FullReplication | Technique::MultiTechnique)
}

/// Runs the workload of `seed` under `technique` and checks everything.
pub fn run_seed(seed: u64, technique: Technique) -> Result<Report, Failure> {
    let fail = |what: String| Failure { seed, technique, what };
    let faults = Faults::from_seed(seed);
    let mut cfg = config_for(seed, technique);
    // Keys stay long enough for requests that trail them to catch up, whatever the delays.
    cfg.relocation_hold = parma_core::Duration(2 * (faults.delay_max_us + faults.jitter_us) + 100);
    let keys = cfg.layout.key_end();
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let net = SimNet::new(cfg.nodes, faults, seed);
    let mut cluster = Cluster::new(&cfg, net).map_err(|e| fail(format!("config: {e}")))?;
    let replicates = matches!(
        technique,
        Technique::Adaptive
            | Technique::AdaptiveNoRelocation
            | Technique::FullReplication
            | Technique::MultiTechnique
    );
    let mix = Mix::draw(&mut rng, technique.uses_localize(), technique.uses_rounds(), !replicates);
    let mut work = Workload::new(cfg.nodes, cfg.workers_per_node, keys, mix, &mut rng);

    // Phase 1: the workload, with faults.
    let mut moves = 0;
    while !work.finished() {
        if cluster.steps() > WORKLOAD_STEPS_MAX {
            return Err(fail(format!(
                "workload did not finish (livelock or lost request); {}",
                checks::summary(cluster.nodes())
            )));
        }
        work.poll(&mut cluster).map_err(fail)?;
        let next = [cluster.next_due(), work.next_due()].into_iter().flatten().min();
        match next {
            Some(t) => cluster.run_until(t),
            None if work.finished() => break,
            None => return Err(fail("workers wait but nothing is due: a request was lost".into())),
        }
        check_step(&cluster, keys, &mut moves).map_err(fail)?;
        work.poll(&mut cluster).map_err(fail)?;
    }

    // Phase 2: heal everything; the cluster must fall quiet within a bound.
    settle(&mut cluster, technique, |c| check_step(c, keys, &mut moves)).map_err(fail)?;

    // Phase 3: the end state.
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
        nodes: cfg.nodes,
        keys,
        ops: work.ledger.ops_done,
        steps: cluster.steps(),
        relocations,
        messages,
        trace_hash: cluster.net().trace_hash(),
    })
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
    let mut stage = 1;
    let mut settled = |c: &Cluster| {
        if !permanent_replicas(technique) {
            return c.quiet();
        }
        let reached = c.stalled() == 0
            && c.nodes().iter().zip(&target).all(|(n, t)| {
                n.sync_rounds_done() >= *t
                    && n.pending_requests() == 0
                    && n.keys_incoming() == 0
                    && n.forwarding_pointers() == 0
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
            return Err("did not converge after healing".into());
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
