//! Sampling in the simulated workload: every node registers one distribution per conformity
//! level; a sample operation prepares a handle (its keys become the worker's intent), draws
//! all its samples at once and pulls their values like any pull, whose reads the workload
//! checks. Local sampling must return only keys that are local when drawn.

use parma_core::{Clock, Conformity, DistId, Distribution, Key, Layout, NodeId, OpError, WorkerId};

use super::cluster::Cluster;
use crate::rng::Rng;

/// A distribution registered on every node.
#[derive(Clone, Debug)]
pub struct SampleDist {
    pub id: DistId,
    pub level: Conformity,
    pub dist: Distribution,
    /// Value length of every key it draws (each distribution stays within one length range).
    pub len: usize,
}

/// Sampling options and one distribution per level, from `seed`, registered on every node.
pub fn register(cluster: &mut Cluster, layout: &Layout, seed: u64) -> Result<Vec<SampleDist>, String> {
    let mut rng = Rng::new(seed ^ 0x5a4d_706c_0000_0000);
    let mut out = Vec::new();
    for level in Conformity::ALL {
        // A key range of one value length: the whole space, or one of its two ranges.
        let (lo, hi) = range_of_one_len(layout, &mut rng);
        let dist = if rng.chance(0.5) {
            Distribution::uniform(Key(lo), Key(hi))
        } else {
            let keys: Vec<Key> = (lo..hi).map(Key).collect();
            let weights: Vec<f64> = (0..keys.len()).map(|_| rng.range(0, 9) as f64).collect();
            Distribution::weighted(&keys, &weights).or_else(|_| Distribution::uniform(Key(lo), Key(hi)))
        }
        .map_err(|e| format!("sampling distribution: {e}"))?;
        let len = layout.len_of(Key(lo)).unwrap_or(1);
        let id = cluster.register_distribution(&dist, level).map_err(|e| format!("register: {e}"))?;
        out.push(SampleDist { id, level, dist, len });
    }
    Ok(out)
}

fn range_of_one_len(layout: &Layout, rng: &mut Rng) -> (u64, u64) {
    let end = layout.key_end();
    if layout.uniform_len().is_some() {
        return (0, end);
    }
    let mid = (1..end).find(|k| layout.len_of(Key(*k)) != layout.len_of(Key(0))).unwrap_or(end);
    if rng.chance(0.5) || mid == end {
        (0, mid)
    } else {
        (mid, end)
    }
}

/// One sample operation's keys, drawn and checked: the distinct keys to pull, or none if local
/// sampling found nothing local.
pub fn draw(
    cluster: &mut Cluster,
    d: &SampleDist,
    node: NodeId,
    worker: WorkerId,
    rng: &mut Rng,
) -> Result<Vec<Key>, String> {
    let support = d.dist.support_len().min(4);
    let n = rng.range(1, support);
    let clock = cluster.nodes()[node.index()].clock(worker);
    let who = format!("node {node} worker {worker} sampling {:?}", d.level);
    let h = cluster
        .prepare_sample(node, worker, d.id, n, clock, Clock(clock.0 + 1))
        .map_err(|e| format!("{who}: prepare: {e}"))?;
    let mut keys = vec![Key(0); n as usize];
    let values_len = keys.len() * d.len;
    let r = cluster.sample_keys(node, worker, h, &mut keys, values_len);
    cluster.finish_sample(node, worker, h).map_err(|e| format!("{who}: finish: {e}"))?;
    match r {
        Ok(()) => {}
        Err(OpError::Sampling(parma_core::SampleError::NoLocalKey)) if d.level == Conformity::NonConform => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(format!("{who}: pull: {e}")),
    }
    if let Some(k) = keys.iter().find(|k| d.dist.probability(**k) <= 0.0) {
        return Err(format!("{who}: drew {k}, which the distribution cannot draw"));
    }
    let store = cluster.nodes()[node.index()].store();
    if d.level == Conformity::NonConform {
        if let Some(k) = keys.iter().find(|k| !store.is_local(**k)) {
            return Err(format!("{who}: local sampling returned {k}, which is not local"));
        }
    }
    Ok(crate::distinct(&keys))
}
