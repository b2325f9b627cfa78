//! Statistical tests of the conformity levels when some keys are local and others are not, on
//! the keys the sampler returns (not only those it draws), with fixed seeds. Each test has a
//! positive control: a planted bias towards local keys that the same check must reject.

extern crate std;

use alloc::vec::Vec;
use std::collections::HashMap;

use super::tests::{
    assert_fits, assert_independent, both, chi2_crit, opts, run_partly, sampler_with, skewed,
};
use super::*;
use crate::ids::Key;

/// Chi-square statistic of `samples` against `π` restricted to the keys `keep` accepts (each
/// sample weighing `1/scale`), and its degrees of freedom.
fn goodness_restricted(
    dist: &Distribution,
    keep: impl Fn(Key) -> bool,
    samples: &[Key],
    scale: f64,
) -> (f64, usize) {
    let support: Vec<Key> = (0..dist.support_len()).map(|i| dist.key_at(i)).filter(|k| keep(*k)).collect();
    let mass: f64 = support.iter().map(|k| dist.probability(*k)).sum();
    let mut counts: HashMap<Key, f64> = HashMap::new();
    for k in samples {
        assert!(keep(*k), "key {k:?} is outside the restricted support");
        *counts.entry(*k).or_default() += 1.0 / scale;
    }
    let n = samples.len() as f64 / scale;
    let stat = support
        .iter()
        .map(|k| {
            let e = n * dist.probability(*k) / mass;
            let o = counts.get(k).copied().unwrap_or(0.0);
            (o - e) * (o - e) / e
        })
        .sum();
    (stat, support.len() - 1)
}

fn assert_fits_restricted(dist: &Distribution, keep: impl Fn(Key) -> bool, samples: &[Key]) {
    let (stat, df) = goodness_restricted(dist, keep, samples, 1.0);
    assert!(stat < chi2_crit(df), "chi-square {stat:.1} above {:.1} (df {df})", chi2_crit(df));
}

/// A node's keys under static partitioning over three nodes: those homed at node 0.
fn homed_here(k: Key) -> bool {
    crate::ids::mix(k) % 3 == 0
}

/// What a node of three holds at sample position `t`: its home keys, and a changing fifth of
/// the others that relocation moved in for a while.
fn held(k: Key, t: usize) -> bool {
    homed_here(k) || (k.0 * 7 + (t / 50) as u64) % 5 == 0
}

#[test]
fn conform_returns_pi_whatever_is_local() {
    for (name, dist) in both() {
        let (mut s, id) = sampler_with(opts(25, 4, true), dist.clone(), Conformity::Conform, 13);
        let pulled = run_partly(&mut s, id, 20_000, 10, 10, 3, held);
        let keys: Vec<Key> = pulled.iter().map(|(k, _)| *k).collect();
        assert_fits(&dist, &keys, 1.0);
        let pairs: Vec<(Key, Key)> = keys.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        assert_independent(&dist, &pairs);
        // A realistic mix: most samples remote, many local.
        let st = s.stats();
        assert_eq!(st.samples_pulled, 200_000);
        assert!(st.samples_remote > 80_000 && st.samples_local > 40_000, "{name}: {st:?}");

        // The control: a sampler that swaps each sample not local when pulled for a local one
        // (so no sampled access is remote) fails the same check.
        let mut rng = SampleRng::new(13, 0, 7);
        let swapped: Vec<Key> = pulled
            .iter()
            .map(|&(k, t)| {
                let mut k = k;
                for _ in 0..10_000 {
                    if held(k, t) {
                        break;
                    }
                    k = dist.draw(&mut rng).0;
                }
                k
            })
            .collect();
        let r = std::panic::catch_unwind(|| assert_fits(&dist, &swapped, 1.0));
        assert!(r.is_err(), "{name}: a bias towards local keys passed the CONFORM check");
    }
}

/// The key of `skewed()` at index `i` (keys `7i + 3`) and back.
fn index(k: Key) -> u64 {
    (k.0 - 3) / 7
}

/// A named set of keys local to the sampling node.
type LocalSet = (&'static str, fn(Key) -> bool);

/// Two local sets of `skewed()`: every third key (much of the mass), and three keys of the
/// light tail (under 2 % of it: rejection alone often misses them).
fn local_sets() -> [LocalSet; 2] {
    [("a third", |k| index(k) % 3 == 0), ("light tail", |k| matches!(index(k), 25 | 31 | 38))]
}

#[test]
fn non_conform_returns_pi_restricted_to_the_local_keys() {
    let dist = skewed();
    for (name, local) in local_sets() {
        let (mut s, id) = sampler_with(opts(25, 4, true), dist.clone(), Conformity::NonConform, 43);
        let pulled = run_partly(&mut s, id, 4_000, 10, 10, 5, |k, _| local(k));
        let keys: Vec<Key> = pulled.iter().map(|(k, _)| *k).collect();
        assert_fits_restricted(&dist, local, &keys);
        assert_eq!(s.stats().samples_remote, 0, "{name}");

        // The controls: a local sampler that ignores the weights (uniform over the local keys),
        // and one that takes the first local key after a random position of the support, fail.
        let mut rng = SampleRng::new(43, 0, 7);
        let support: Vec<Key> = (0..dist.support_len()).map(|i| dist.key_at(i)).collect();
        let locals: Vec<Key> = support.iter().copied().filter(|k| local(*k)).collect();
        let unweighted: Vec<Key> =
            (0..keys.len()).map(|_| locals[rng.below(locals.len() as u64) as usize]).collect();
        let scanned: Vec<Key> = (0..keys.len())
            .map(|_| {
                let start = rng.below(support.len() as u64) as usize;
                (0..support.len()).map(|j| support[(start + j) % support.len()]).find(|k| local(*k)).unwrap()
            })
            .collect();
        for (control, xs) in [("unweighted", unweighted), ("first local after a random start", scanned)] {
            let (stat, df) = goodness_restricted(&dist, local, &xs, 1.0);
            assert!(stat > chi2_crit(df), "{name}: the {control} control passed: {stat:.1} (df {df})");
        }
    }
}

/// `skewed()` with its samples local when their index is a multiple of three, pulled half a
/// handle at a time: the share of local keys among the pulled ones, and the sampler.
fn long_term_half_pulls(seed: u64) -> (f64, f64, Sampler, Vec<Key>) {
    let dist = skewed();
    let local = |k: Key| index(k) % 3 == 0;
    let (mut s, id) = sampler_with(opts(25, 4, true), dist.clone(), Conformity::LongTerm, seed);
    let pulled = run_partly(&mut s, id, 10_000, 40, 20, 5, |k, _| local(k));
    let keys: Vec<Key> = pulled.into_iter().map(|(k, _)| k).collect();
    let share = keys.iter().filter(|k| local(**k)).count() as f64 / keys.len() as f64;
    let mass: f64 = (0..dist.support_len())
        .map(|i| dist.key_at(i))
        .filter(|k| local(*k))
        .map(|k| dist.probability(k))
        .sum();
    (share, mass, s, keys)
}

#[test]
fn long_term_keeps_its_frequencies_when_handles_are_pulled_in_part() {
    for seed in [61, 62] {
        let (share, mass, s, keys) = long_term_half_pulls(seed);
        // Pool reuse makes samples dependent: bound the variance by `U` times the binomial
        // one, and allow four standard deviations.
        let n = keys.len() as f64;
        let sd = libm::sqrt(4.0 * mass * (1.0 - mass) / n);
        assert!((share - mass).abs() < 4.0 * sd, "local share {share:.4} against the local mass {mass:.4}");
        // Frequencies per key, each sample counted once for every `U` uses.
        assert_fits(&skewed(), &keys, 4.0);
        let st = s.stats();
        assert!(st.samples_postponed > 10_000 && st.samples_carried > 10_000, "{st:?}");
        assert_eq!(st.samples_dropped, 0);
    }
}
