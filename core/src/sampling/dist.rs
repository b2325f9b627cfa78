//! Sampling distributions over keys: uniform over a key range, or arbitrary weights over a key
//! set drawn in O(1) with an alias table (Walker 1977, Vose's construction).

use alloc::vec::Vec;

use hashbrown::HashSet;

use super::rng::SampleRng;
use super::SampleError;
use crate::ids::Key;
use crate::layout::Layout;

/// Walker's alias table: draw a column uniformly, then keep it with probability `keep` or take
/// its alias.
#[derive(Clone, Debug)]
pub struct AliasTable {
    keys: Vec<Key>,
    keep: Vec<f64>,
    alias: Vec<u32>,
    /// The normalized weights, for statistics and tests.
    probs: Vec<f64>,
}

/// A target distribution π over keys, fixed for the run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Distribution {
    /// Every key of `[start, end)` equally likely.
    Uniform { start: Key, end: Key },
    /// Each key with probability proportional to its weight.
    Weighted(AliasTable),
}

impl Distribution {
    /// Uniform over the keys `[start, end)`; the range must not be empty.
    pub fn uniform(start: Key, end: Key) -> Result<Distribution, SampleError> {
        if start >= end {
            return Err(SampleError::BadDistribution);
        }
        Ok(Distribution::Uniform { start, end })
    }

    /// Key `keys[i]` with probability `weights[i] / Σ weights`. The keys must be distinct, the
    /// weights finite, non-negative and not all zero, the lengths equal and below `u32::MAX`.
    /// Keys of weight 0 are left out of the support.
    pub fn weighted(keys: &[Key], weights: &[f64]) -> Result<Distribution, SampleError> {
        if keys.is_empty() || keys.len() != weights.len() || keys.len() >= u32::MAX as usize {
            return Err(SampleError::BadDistribution);
        }
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return Err(SampleError::BadDistribution);
        }
        let total: f64 = weights.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return Err(SampleError::BadDistribution);
        }
        let mut seen = HashSet::with_capacity(keys.len());
        if !keys.iter().all(|k| seen.insert(*k)) {
            return Err(SampleError::BadDistribution);
        }
        // Keys of weight 0 can never be drawn: they are not part of the support.
        let (keys, probs): (Vec<Key>, Vec<f64>) =
            keys.iter().zip(weights).filter(|(_, w)| **w > 0.0).map(|(k, w)| (*k, w / total)).unzip();
        Ok(Distribution::Weighted(AliasTable::build(keys, probs)))
    }

    /// Number of keys with a chance to be drawn (or listed, for weights).
    pub fn support_len(&self) -> u64 {
        match self {
            Distribution::Uniform { start, end } => end.0 - start.0,
            Distribution::Weighted(t) => t.keys.len() as u64,
        }
    }

    /// The `i`-th key of the support (`i < support_len()`), in the order the distribution was
    /// given.
    pub fn key_at(&self, i: u64) -> Key {
        match self {
            Distribution::Uniform { start, .. } => Key(start.0 + i),
            Distribution::Weighted(t) => t.keys[i as usize],
        }
    }

    /// The probability of `key` under this distribution.
    pub fn probability(&self, key: Key) -> f64 {
        match self {
            Distribution::Uniform { start, end } if *start <= key && key < *end => {
                1.0 / (end.0 - start.0) as f64
            }
            Distribution::Uniform { .. } => 0.0,
            Distribution::Weighted(t) => t.keys.iter().position(|k| *k == key).map_or(0.0, |i| t.probs[i]),
        }
    }

    /// One independent draw: returns the key and its index in the support.
    pub fn draw(&self, rng: &mut SampleRng) -> (Key, u64) {
        match self {
            Distribution::Uniform { start, end } => {
                let i = rng.below(end.0 - start.0);
                (Key(start.0 + i), i)
            }
            Distribution::Weighted(t) => {
                let col = rng.below(t.keys.len() as u64) as usize;
                let i = if rng.unit() < t.keep[col] { col } else { t.alias[col] as usize };
                (t.keys[i], i as u64)
            }
        }
    }

    /// Whether every key of the support is inside `layout`.
    pub fn fits(&self, layout: &Layout) -> bool {
        match self {
            Distribution::Uniform { start, end } => layout.contains(*start) && end.0 <= layout.key_end(),
            Distribution::Weighted(t) => t.keys.iter().all(|k| layout.contains(*k)),
        }
    }

    /// A hash of the distribution, equal on every node that registered the same one.
    pub fn fingerprint(&self) -> u64 {
        let fold = crate::ids::fold_digest;
        match self {
            Distribution::Uniform { start, end } => fold(fold(1, start.0), end.0),
            Distribution::Weighted(t) => {
                t.keys.iter().zip(&t.probs).fold(2, |h, (k, p)| fold(fold(h, k.0), p.to_bits()))
            }
        }
    }
}

impl AliasTable {
    /// Vose's construction from probabilities that sum to 1: O(n), numerically stable.
    fn build(keys: Vec<Key>, probs: Vec<f64>) -> AliasTable {
        let n = probs.len();
        let mut keep: Vec<f64> = probs.iter().map(|p| p * n as f64).collect();
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|i| keep[*i as usize] < 1.0);
        while let (Some(s), Some(l)) = (small.pop(), large.pop()) {
            alias[s as usize] = l;
            keep[l as usize] -= 1.0 - keep[s as usize];
            if keep[l as usize] < 1.0 {
                small.push(l);
            } else {
                large.push(l);
            }
        }
        // What is left is 1 up to rounding.
        for i in small.into_iter().chain(large) {
            keep[i as usize] = 1.0;
        }
        AliasTable { keys, keep, alias, probs }
    }
}
