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
    cfg
}

/// Runs the workload of `seed` under `technique` and checks everything.
pub fn run_seed(seed: u64, technique: Technique) -> Result<Report, Failure> {
    let fail = |what: String| Failure { seed, technique, what };
    let cfg = config_for(seed, technique);
    let keys = cfg.layout.key_end();
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let net = SimNet::new(cfg.nodes, Faults::from_seed(seed), seed);
    let mut cluster = Cluster::new(&cfg, net).map_err(|e| fail(format!("config: {e}")))?;
    let localize = technique != Technique::StaticPartitioning;
    let mix = Mix::draw(&mut rng, localize);
    let mut work = Workload::new(cfg.nodes, cfg.workers_per_node, keys, mix, &mut rng);

    // Phase 1: the workload, with faults.
    let mut moves = 0;
    while !work.finished() {
        if cluster.steps() > WORKLOAD_STEPS_MAX {
            return Err(fail("workload did not finish (livelock or lost request)".into()));
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
    cluster.net().heal();
    let start = cluster.steps();
    while !cluster.quiet() {
        if cluster.steps() - start > HEAL_STEPS_MAX {
            return Err(fail("did not converge after healing".into()));
        }
        let t = cluster.next_due().unwrap_or(cluster.now());
        cluster.run_until(t.max(cluster.now()));
        check_step(&cluster, keys, &mut moves).map_err(fail)?;
    }

    // Phase 3: the end state.
    let nodes = cluster.nodes();
    checks::nothing_left(nodes).map_err(fail)?;
    checks::exactly_one_copy(nodes, keys).map_err(fail)?;
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

/// Checks after every step: each node's own invariants, and (whenever a key moved) that no
/// key has two main copies.
fn check_step(cluster: &Cluster, keys: u64, moves: &mut u64) -> Result<(), String> {
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
