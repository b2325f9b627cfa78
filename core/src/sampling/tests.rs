//! Statistical tests of the conformity levels, with fixed seeds. Each test can fail: the
//! critical values are at significance 0.001, and each level also has a check that its own
//! scheme is the one running.

extern crate std;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use std::collections::HashMap;

use super::*;
use crate::ids::Key;
use crate::layout::Layout;

const KEYS: u64 = 40;

pub(super) fn layout() -> Layout {
    Layout::uniform(1 << 41, 1).unwrap()
}

pub(super) fn opts(g: u32, u: u32, with_replacement: bool) -> SamplingOptions {
    SamplingOptions { pool_size: g, reuse: u, with_replacement, ..SamplingOptions::default() }
}

pub(super) fn uniform() -> Distribution {
    Distribution::uniform(Key(100), Key(100 + KEYS)).unwrap()
}

/// Zipf-like weights (1/(i+1)^1.1, as word counts), over keys spread out in the key space.
pub(super) fn skewed() -> Distribution {
    let keys: Vec<Key> = (0..KEYS).map(|i| Key(7 * i + 3)).collect();
    let w: Vec<f64> = (0..KEYS).map(|i| 1.0 / libm::pow(i as f64 + 1.0, 1.1)).collect();
    Distribution::weighted(&keys, &w).unwrap()
}

pub(super) fn sampler_with(
    o: SamplingOptions,
    dist: Distribution,
    level: Conformity,
    seed: u64,
) -> (Sampler, DistId) {
    let reg = Arc::new(Registry::new(o, layout(), SampleRng::new(seed, 0, 99)));
    let id = reg.register(dist, level).unwrap();
    (Sampler::new(reg, SampleRng::new(seed, 0, 0)), id)
}

/// `handles` handles of `n` samples each, pulled `per_pull` at a time with `is_local`.
fn run(
    s: &mut Sampler,
    id: DistId,
    handles: usize,
    n: u64,
    per_pull: usize,
    is_local: impl FnMut(Key, usize) -> bool,
) -> Vec<Key> {
    run_partly(s, id, handles, n, n, per_pull, is_local).into_iter().map(|(k, _)| k).collect()
}

/// `handles` handles of `n` samples each, of which the first `used` are pulled, `per_pull` at
/// a time with `is_local(key, t)`, where `t` counts the samples pulled before that pull. Each
/// pulled key comes with its pull's `t`.
pub(super) fn run_partly(
    s: &mut Sampler,
    id: DistId,
    handles: usize,
    n: u64,
    used: u64,
    per_pull: usize,
    mut is_local: impl FnMut(Key, usize) -> bool,
) -> Vec<(Key, usize)> {
    let mut out = Vec::new();
    for _ in 0..handles {
        let (h, _) = s.prepare(id, n).unwrap();
        let mut left = used as usize;
        while left > 0 {
            let c = per_pull.min(left);
            let mut keys = vec![Key(0); c];
            let t = out.len();
            s.pull(h, &mut keys, c, &layout(), |k| is_local(k, t)).unwrap();
            out.extend(keys.iter().map(|k| (*k, t)));
            left -= c;
        }
        s.finish(h).unwrap();
    }
    out
}

/// Upper 0.001 critical value of chi-square with `df` degrees of freedom (Wilson-Hilferty).
pub(super) fn chi2_crit(df: usize) -> f64 {
    let d = df as f64;
    let a = 2.0 / (9.0 * d);
    d * libm::pow(1.0 - a + 3.090 * libm::sqrt(a), 3.0)
}

/// Chi-square statistic of `samples` (each weighing `1/scale`) against `dist`; and its df.
pub(super) fn goodness(dist: &Distribution, samples: &[Key], scale: f64) -> (f64, usize) {
    let mut counts: HashMap<Key, f64> = HashMap::new();
    for k in samples {
        *counts.entry(*k).or_default() += 1.0 / scale;
    }
    let n = samples.len() as f64 / scale;
    let support = dist.support_len();
    let stat = (0..support)
        .map(|i| {
            let k = dist.key_at(i);
            let e = n * dist.probability(k);
            let o = counts.get(&k).copied().unwrap_or(0.0);
            (o - e) * (o - e) / e
        })
        .sum();
    assert!(counts.keys().all(|k| dist.probability(*k) > 0.0), "a key outside the support");
    (stat, support as usize - 1)
}

pub(super) fn assert_fits(dist: &Distribution, samples: &[Key], scale: f64) {
    let (stat, df) = goodness(dist, samples, scale);
    assert!(stat < chi2_crit(df), "chi-square {stat:.1} above {:.1} (df {df})", chi2_crit(df));
}

/// Bins of about equal probability: key → bin in `0..bins`.
fn binner(dist: &Distribution, bins: usize) -> HashMap<Key, usize> {
    let mut acc = 0.0;
    (0..dist.support_len())
        .map(|i| {
            let k = dist.key_at(i);
            let b = ((acc * bins as f64) as usize).min(bins - 1);
            acc += dist.probability(k);
            (k, b)
        })
        .collect()
}

/// Chi-square test of independence of the pairs' binned components.
pub(super) fn assert_independent(dist: &Distribution, pairs: &[(Key, Key)]) {
    let bins = 4;
    let bin = binner(dist, bins);
    let mut table = vec![vec![0.0f64; bins]; bins];
    for (a, b) in pairs {
        table[bin[a]][bin[b]] += 1.0;
    }
    let n = pairs.len() as f64;
    let rows: Vec<f64> = table.iter().map(|r| r.iter().sum()).collect();
    let cols: Vec<f64> = (0..bins).map(|j| table.iter().map(|r| r[j]).sum()).collect();
    let mut stat = 0.0;
    for i in 0..bins {
        for j in 0..bins {
            let e = rows[i] * cols[j] / n;
            stat += (table[i][j] - e) * (table[i][j] - e) / e;
        }
    }
    let df = (bins - 1) * (bins - 1);
    assert!(stat < chi2_crit(df), "dependence: chi-square {stat:.1} above {:.1}", chi2_crit(df));
}

pub(super) fn both() -> [(&'static str, Distribution); 2] {
    [("uniform", uniform()), ("skewed", skewed())]
}

#[test]
fn conform_fits_and_consecutive_draws_are_independent() {
    for (name, dist) in both() {
        let (mut s, id) = sampler_with(opts(25, 4, true), dist.clone(), Conformity::Conform, 11);
        let xs = run(&mut s, id, 20_000, 10, 3, |_, _| true);
        assert_fits(&dist, &xs, 1.0);
        let pairs: Vec<(Key, Key)> = xs.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        assert_independent(&dist, &pairs);
        assert_eq!(s.stats().pools_drawn, 0, "{name}: CONFORM must not use pools");
    }
}

#[test]
fn the_independence_check_detects_dependence() {
    // A positive control: samples of a BOUNDED stream one position apart within a pool of a
    // distribution with few keys repeat far more often than independent ones would.
    let dist = uniform();
    let (mut s, id) = sampler_with(opts(2, 8, true), dist.clone(), Conformity::Bounded, 12);
    let xs = run(&mut s, id, 2_000, 16, 16, |_, _| true);
    let pairs: Vec<(Key, Key)> = xs.chunks_exact(2).map(|p| (p[0], p[1])).collect();
    let r = std::panic::catch_unwind(|| assert_independent(&dist, &pairs));
    assert!(r.is_err(), "dependent pairs passed the independence test");
}

#[test]
fn bounded_marginals_match_and_draws_further_than_u_g_apart_are_independent() {
    let (g, u) = (25u32, 4u32);
    let ug = (g * u) as usize;
    for (name, dist) in both() {
        let (mut s, id) = sampler_with(opts(g, u, true), dist.clone(), Conformity::Bounded, 21);
        // 4000 complete pools.
        let xs = run(&mut s, id, 4_000, ug as u64, 7, |_, _| true);
        // Each pool position is used exactly U times: the counts divided by U are iid draws.
        assert_fits(&dist, &xs, f64::from(u));
        // One pair per disjoint pair of neighbouring pools, U·G apart, at varying offsets.
        let pairs: Vec<(Key, Key)> = (0..xs.len() / (2 * ug))
            .map(|p| 2 * p * ug + (p * 13) % ug)
            .map(|i| (xs[i], xs[i + ug]))
            .collect();
        assert_independent(&dist, &pairs);
        assert_eq!(s.stats().pools_drawn, 4_000, "{name}");
    }
}

#[test]
fn long_term_frequencies_match_on_every_node_despite_postponing() {
    let (g, u) = (25u32, 4u32);
    for (name, dist) in both() {
        for node in 0..3u16 {
            let reg = Arc::new(Registry::new(opts(g, u, true), layout(), SampleRng::new(31, node, 99)));
            let id = reg.register(dist.clone(), Conformity::LongTerm).unwrap();
            let mut s = Sampler::new(reg, SampleRng::new(31, node, 0));
            // Keys are local on a moving third of the key space.
            let local = |k: Key, t: usize| (k.0 * 7 + (t / 50) as u64 + u64::from(node)) % 3 == 0;
            let xs = run(&mut s, id, 10_000, 40, 4, local);
            assert_fits(&dist, &xs, f64::from(u));
            assert!(s.stats().samples_postponed > 10_000, "{name}: postponing did not run");
        }
    }
}

#[test]
fn non_conform_returns_only_keys_local_when_returned() {
    for (name, dist) in both() {
        let (mut s, id) = sampler_with(opts(25, 4, true), dist.clone(), Conformity::NonConform, 41);
        let local = |k: Key, t: usize| (k.0 + (t / 100) as u64) % 4 == 0;
        let xs = run(&mut s, id, 5_000, 12, 5, local);
        // Every key returned in the pull that began at position t was local at that time.
        for (i, k) in xs.iter().enumerate() {
            let t = i - (i % 12) % 5;
            assert!(local(*k, t), "{name}: key {k:?} at {i} was not local");
        }
        assert_eq!(s.stats().samples_remote, 0);
        assert_eq!(s.stats().pools_drawn, 0);
    }
}

#[test]
fn each_level_runs_its_own_scheme() {
    // A huge key range: two iid draws practically never collide, so repeats come from reuse.
    let wide = Distribution::uniform(Key(0), Key(1 << 40)).unwrap();
    let (g, u) = (25u32, 4u32);
    let ug = (g * u) as usize;
    for level in [Conformity::Bounded, Conformity::LongTerm] {
        let (mut s, id) = sampler_with(opts(g, u, true), wide.clone(), level, 51);
        let xs = run(&mut s, id, 50, ug as u64, 9, |_, _| true);
        for block in xs.chunks_exact(ug) {
            let mut c: HashMap<Key, u32> = HashMap::new();
            block.iter().for_each(|k| *c.entry(*k).or_default() += 1);
            assert_eq!(c.len(), g as usize, "{level:?}: a pool has G distinct keys");
            assert!(c.values().all(|n| *n == u), "{level:?}: each pool key is used exactly U times");
            // Each traversal is a fresh order: the U passes are not all the same sequence.
            assert!(
                block[..g as usize] != block[g as usize..2 * g as usize]
                    || block[..g as usize] != block[ug - g as usize..]
            );
        }
    }
    let (mut s, id) = sampler_with(opts(g, u, true), wide.clone(), Conformity::Conform, 52);
    let xs = run(&mut s, id, 50, ug as u64, 9, |_, _| true);
    let mut sorted = xs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), xs.len(), "CONFORM reuses no sample");
    // NON-CONFORM draws nothing ahead: no intent, and nothing to return when nothing is local.
    let (mut s, id) = sampler_with(opts(g, u, true), wide, Conformity::NonConform, 53);
    let (h, intent) = s.prepare(id, 4).unwrap();
    assert!(intent.is_empty());
    let mut keys = [Key(0); 2];
    let before = s.stats();
    assert_eq!(s.pull(h, &mut keys, 2, &layout(), |_| false), Err(SampleError::NoLocalKey));
    assert_eq!((s.left(h), s.stats()), (Ok(4), before), "a refused pull changes nothing");
}

#[test]
fn the_workers_of_a_node_share_its_pools() {
    let wide = Distribution::uniform(Key(0), Key(1 << 40)).unwrap();
    let (g, u) = (25u32, 4u32);
    let reg = Arc::new(Registry::new(opts(g, u, true), layout(), SampleRng::new(3, 0, 99)));
    let id = reg.register(wide, Conformity::Bounded).unwrap();
    let mut a = Sampler::new(Arc::clone(&reg), SampleRng::new(3, 0, 0));
    let mut b = Sampler::new(reg, SampleRng::new(3, 0, 1));
    let mut all = Vec::new();
    for _ in 0..10 {
        // Two workers take turns: between them, every pool key is used exactly U times.
        for s in [&mut a, &mut b] {
            let (h, keys) = s.prepare(id, u64::from(g * u / 2)).unwrap();
            assert!(keys.len() <= g as usize);
            let mut k = vec![Key(0); (g * u / 2) as usize];
            s.pull(h, &mut k, (g * u / 2) as usize, &layout(), |_| true).unwrap();
            all.extend(k);
        }
    }
    for block in all.chunks_exact((g * u) as usize) {
        let mut c: HashMap<Key, u32> = HashMap::new();
        block.iter().for_each(|k| *c.entry(*k).or_default() += 1);
        assert_eq!(c.len(), g as usize);
        assert!(c.values().all(|n| *n == u));
    }
    assert_eq!(a.stats().pools_drawn + b.stats().pools_drawn, 10);
}

#[test]
fn without_replacement_every_handle_has_distinct_keys() {
    for level in Conformity::ALL {
        let (mut s, id) = sampler_with(opts(25, 4, false), uniform(), level, 61);
        let mut prepared = 0;
        for n in [1u64, 10, 39, 40] {
            let (h, intent) = s.prepare(id, n).unwrap();
            let mut keys = vec![Key(0); n as usize];
            s.pull(h, &mut keys, n as usize, &layout(), |_| true).unwrap();
            let mut d = keys.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(d.len(), n as usize, "{level:?}: repeated key");
            if level != Conformity::NonConform {
                assert_eq!(intent, d, "{level:?}: intent names the handle's keys");
            }
            prepared += 1;
        }
        assert_eq!(s.prepare(id, 41), Err(SampleError::BadSize { n: 41 }));
        assert_eq!(s.open_handles(), prepared);
    }
}

#[test]
fn bad_input_is_an_error_that_changes_nothing() {
    let o = SamplingOptions { handles_max: 2, ..opts(25, 4, true) };
    let (mut s, id) = sampler_with(o, uniform(), Conformity::Bounded, 71);
    assert_eq!(s.prepare(DistId(9), 3), Err(SampleError::UnknownDistribution { dist: DistId(9) }));
    assert_eq!(s.prepare(id, 0), Err(SampleError::BadSize { n: 0 }));
    let (h, _) = s.prepare(id, 5).unwrap();
    let before = s.stats();
    let mut k6 = [Key(0); 6];
    assert_eq!(
        s.pull(h, &mut k6, 6, &layout(), |_| true),
        Err(SampleError::CountBeyondSample { count: 6, left: 5 })
    );
    let mut k2 = [Key(0); 2];
    assert_eq!(
        s.pull(h, &mut k2, 3, &layout(), |_| true),
        Err(SampleError::BufferLength { expected: 2, got: 3 })
    );
    let other = SampleHandle(99);
    assert_eq!(
        s.pull(other, &mut k2, 2, &layout(), |_| true),
        Err(SampleError::UnknownHandle { handle: other })
    );
    assert_eq!(s.finish(other), Err(SampleError::UnknownHandle { handle: other }));
    assert_eq!((s.left(h), s.stats()), (Ok(5), before));
    let _ = s.prepare(id, 1).unwrap();
    assert_eq!(s.prepare(id, 1), Err(SampleError::TooManyHandles));
    s.pull(h, &mut k2, 2, &layout(), |_| true).unwrap();
    assert_eq!(s.left(h), Ok(3));
    s.finish(h).unwrap();
    assert_eq!(s.left(h), Err(SampleError::UnknownHandle { handle: h }));
}

#[test]
fn buffer_lengths_per_key_are_checked_after_the_draw_and_undone() {
    let l = Layout::ranges(1 << 41, vec![(0, 1), (120, 3)]).unwrap();
    let reg = Arc::new(Registry::new(opts(25, 4, true), l.clone(), SampleRng::new(1, 0, 99)));
    let id = reg.register(uniform(), Conformity::NonConform).unwrap();
    let mut s = Sampler::new(reg, SampleRng::new(81, 0, 0));
    let (h, _) = s.prepare(id, 50).unwrap();
    let mut a = [Key(0); 10];
    let r = s.pull(h, &mut a, 1, &l, |_| true);
    assert!(matches!(r, Err(SampleError::BufferLength { got: 1, .. })));
    let expected = match r {
        Err(SampleError::BufferLength { expected, .. }) => expected,
        _ => unreachable!(),
    };
    assert_eq!(s.left(h), Ok(50));
    let mut b = [Key(0); 10];
    s.pull(h, &mut b, expected, &l, |_| true).unwrap();
    assert_eq!(a, b, "the refused pull drew nothing");
}

#[test]
fn registration_checks_distributions() {
    let reg = Registry::new(
        SamplingOptions { distributions_max: 1, ..SamplingOptions::default() },
        layout(),
        SampleRng::new(1, 0, 99),
    );
    assert_eq!(Distribution::uniform(Key(5), Key(5)).err(), Some(SampleError::BadDistribution));
    assert!(Distribution::weighted(&[Key(1), Key(1)], &[1.0, 1.0]).is_err());
    assert!(Distribution::weighted(&[Key(1)], &[f64::NAN]).is_err());
    assert!(Distribution::weighted(&[Key(1), Key(2)], &[0.0, 0.0]).is_err());
    assert!(Distribution::weighted(&[Key(1)], &[1.0, 2.0]).is_err());
    let outside = Distribution::uniform(Key(0), Key((1 << 41) + 1)).unwrap();
    assert_eq!(reg.register(outside, Conformity::Conform), Err(SampleError::BadDistribution));
    assert_eq!(reg.register(uniform(), Conformity::Conform), Ok(DistId(0)));
    assert_eq!(reg.register(uniform(), Conformity::Conform), Err(SampleError::TooManyDistributions));
    // A zero weight leaves the key out.
    let d = Distribution::weighted(&[Key(1), Key(2)], &[0.0, 3.0]).unwrap();
    assert_eq!(d.support_len(), 1);
}

#[test]
fn a_mismatch_is_reported_on_prepare() {
    let (a, b) = (
        Registry::new(opts(25, 4, true), layout(), SampleRng::new(1, 0, 99)),
        Registry::new(opts(25, 4, true), layout(), SampleRng::new(1, 0, 99)),
    );
    a.register(uniform(), Conformity::Bounded).unwrap();
    b.register(uniform(), Conformity::Conform).unwrap();
    let fp = b.get(DistId(0)).unwrap().fingerprint;
    assert_eq!(a.check(DistId(0), fp, NodeId(1)), Some(false));
    assert_eq!(a.check(DistId(1), fp, NodeId(1)), None);
    let mut s = Sampler::new(Arc::new(a), SampleRng::new(1, 0, 0));
    assert_eq!(
        s.prepare(DistId(0), 1),
        Err(SampleError::DistributionMismatch { dist: DistId(0), node: NodeId(1) })
    );
}

#[test]
fn a_seed_replays_exactly() {
    for level in Conformity::ALL {
        let draw = |seed| {
            let (mut s, id) = sampler_with(opts(25, 4, true), skewed(), level, seed);
            run(&mut s, id, 30, 20, 3, |k, t| (k.0 + t as u64) % 2 == 0)
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }
}

#[test]
fn the_node_signals_intent_for_prepared_keys() {
    use crate::{Clock, Config, Instant, Node, WorkerId};
    let mut cfg = Config::new(2, 1, Layout::uniform(1000, 2).unwrap());
    cfg.sampling = opts(25, 4, true);
    let mut node = Node::new(cfg, NodeId(0)).unwrap();
    let id = node.register_distribution(Instant(0), uniform(), Conformity::Bounded).unwrap();
    let mut s = node.sampler(WorkerId(0)).unwrap();
    assert_eq!(node.sampler(WorkerId(1)).err(), Some(crate::OpError::InvalidArgument));
    let h = node.prepare_sample(Instant(0), &mut s, WorkerId(0), id, 30, Clock(0), Clock(5)).unwrap();
    let (intents, keys) = node.intents_kept();
    assert_eq!(intents, 1);
    assert!(keys > 0 && keys <= 25, "the distinct keys of the handle: {keys}");
    let mut k = [Key(0); 30];
    let v = [0.0f32; 60];
    node.pull_sample_keys(&mut s, h, &mut k, v.len()).unwrap();
    assert!(k.iter().all(|k| uniform().probability(*k) > 0.0));
    let err = node.prepare_sample(Instant(0), &mut s, WorkerId(0), DistId(7), 1, Clock(0), Clock(5));
    assert_eq!(err, Err(crate::OpError::Sampling(SampleError::UnknownDistribution { dist: DistId(7) })));
    assert_eq!(node.intents_kept().0, 1, "a refused prepare signals nothing");
}

#[test]
fn nodes_compare_their_distributions_whatever_the_order() {
    use crate::{Config, Instant, Node};
    let cfg = Config::new(2, 1, Layout::uniform(1000, 2).unwrap());
    let mut nodes = [Node::new(cfg.clone(), NodeId(0)).unwrap(), Node::new(cfg, NodeId(1)).unwrap()];
    let deliver = |nodes: &mut [Node; 2]| {
        for i in 0..2 {
            while let Some(t) = nodes[i].poll_transmit() {
                let frame = t.to_frame();
                nodes[t.to().index()].handle_frame(Instant(0), NodeId(i as u16), &frame);
            }
        }
    };
    let now = Instant(0);
    // Node 0 registers first; node 1 hears of both before registering anything.
    nodes[0].register_distribution(now, uniform(), Conformity::Bounded).unwrap();
    nodes[0].register_distribution(now, skewed(), Conformity::Conform).unwrap();
    deliver(&mut nodes);
    assert_eq!(nodes[1].distribution_mismatch(), None);
    nodes[1].register_distribution(now, uniform(), Conformity::Bounded).unwrap();
    nodes[1].register_distribution(now, skewed(), Conformity::LongTerm).unwrap();
    deliver(&mut nodes);
    for (i, n) in nodes.iter().enumerate() {
        let peer = NodeId(1 - i as u16);
        assert_eq!(n.distribution_mismatch(), Some((DistId(1), peer)), "node {i}");
        assert_eq!(n.stats().distribution_mismatches, 1);
        let mut s = n.sampler(crate::WorkerId(0)).unwrap();
        assert!(s.prepare(DistId(0), 1).is_ok());
        assert_eq!(
            s.prepare(DistId(1), 1),
            Err(SampleError::DistributionMismatch { dist: DistId(1), node: peer })
        );
    }
}

#[test]
fn under_relocation_prepared_samples_are_localized_silently() {
    use crate::{Clock, Config, Instant, Node, Technique, WorkerId};
    let mut cfg = Config::new(2, 1, Layout::uniform(1000, 2).unwrap());
    cfg.technique = Technique::Relocation;
    let mut nodes = [Node::new(cfg.clone(), NodeId(0)).unwrap(), Node::new(cfg, NodeId(1)).unwrap()];
    let now = Instant(0);
    let wide = Distribution::uniform(Key(0), Key(1000)).unwrap();
    for n in nodes.iter_mut() {
        n.register_distribution(now, wide.clone(), Conformity::Conform).unwrap();
    }
    let mut s = nodes[0].sampler(WorkerId(0)).unwrap();
    let h = nodes[0].prepare_sample(now, &mut s, WorkerId(0), DistId(0), 20, Clock(0), Clock(1)).unwrap();
    for _ in 0..20 {
        for i in 0..2 {
            while let Some(t) = nodes[i].poll_transmit() {
                let frame = t.to_frame();
                nodes[t.to().index()].handle_frame(now, NodeId(i as u16), &frame);
            }
            assert!(nodes[i].poll_event().is_none(), "nobody waits for a prefetch");
        }
    }
    let mut keys = [Key(0); 20];
    nodes[0].pull_sample_keys(&mut s, h, &mut keys, 40).unwrap();
    assert!(keys.iter().all(|k| nodes[0].store().holds(*k)), "every prepared key moved here");
    assert_eq!(nodes[0].pending_requests(), 0);
}
