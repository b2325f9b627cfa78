//! The four sampling calls on real threads: every level returns keys of the distribution
//! with their values; local sampling never needs the network; bad calls change nothing.
#![forbid(unsafe_code)]

mod common;

use common::{finalize_all, run_all, shutdown_all, start};
use parma_core::{
    Clock, Config, Conformity, DistId, Distribution, Key, Layout, OpError, SampleError, Technique,
};
use parma_runtime::Options;
use parma_transport_loopback::threaded::ThreadedOptions;

const KEYS: u64 = 200;

fn cfg(technique: Technique) -> Config {
    let mut cfg = Config::new(2, 2, Layout::uniform(KEYS, 2).unwrap());
    cfg.technique = technique;
    cfg.sampling.pool_size = 10;
    cfg.sampling.reuse = 4;
    cfg
}

#[test]
fn every_level_returns_keys_with_their_values() {
    for technique in [Technique::Adaptive, Technique::StaticPartitioning, Technique::Relocation] {
        let c = start(&cfg(technique), Options::default(), ThreadedOptions::default());
        // Each key's value is (key, -key), written once by worker 0 of node 0.
        let mut workers = c.workers;
        let keys: Vec<Key> = (0..KEYS).map(Key).collect();
        let vals: Vec<f32> = keys.iter().flat_map(|k| [k.0 as f32, -(k.0 as f32)]).collect();
        let t = workers[0].set(&keys, &vals).unwrap();
        workers[0].wait(t).unwrap();
        // Worker 0 of each node registers the same distributions in the same order.
        for w in [0, 2] {
            for level in Conformity::ALL {
                let dist = Distribution::uniform(Key(10), Key(150)).unwrap();
                let id = workers[w].register_distribution(dist, level).unwrap();
                assert_eq!(id, DistId(level as u32));
            }
        }
        let out = run_all(workers, |_, w| {
            w.barrier().unwrap();
            for level in Conformity::ALL {
                let dist = DistId(level as u32);
                for round in 0..20u64 {
                    let c = w.clock();
                    let h = w.prepare_sample(dist, 6, c, Clock(c.0 + 2)).unwrap();
                    let before = w.stats().keys_pulled_remote;
                    for _ in 0..3 {
                        let mut k = [Key(0); 2];
                        let mut v = [0.0; 4];
                        w.pull_sample(h, &mut k, &mut v).unwrap();
                        for (i, key) in k.iter().enumerate() {
                            assert!((10..150).contains(&key.0), "{level:?}: {key:?}");
                            assert_eq!(
                                v[2 * i..2 * i + 2],
                                [key.0 as f32, -(key.0 as f32)],
                                "{level:?} round {round}"
                            );
                        }
                    }
                    if level == Conformity::NonConform {
                        assert_eq!(w.stats().keys_pulled_remote, before, "local sampling went remote");
                    }
                    w.finish_sample(h).unwrap();
                    w.advance_clock().unwrap();
                }
            }
            w.sampling_stats()
        });
        let (workers, stats): (Vec<_>, Vec<_>) = out.into_iter().unzip();
        assert!(stats.iter().all(|s| s.samples_pulled == 4 * 20 * 6), "{stats:?}");
        finalize_all(workers);
        shutdown_all(c.nodes);
    }
}

#[test]
fn bad_sampling_calls_change_nothing() {
    let c = start(&cfg(Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let mut workers = c.workers;
    let w = &mut workers[0];
    let bad = Distribution::uniform(Key(0), Key(KEYS + 1)).unwrap();
    assert_eq!(
        w.register_distribution(bad, Conformity::Conform),
        Err(OpError::Sampling(SampleError::BadDistribution))
    );
    let id = w
        .register_distribution(Distribution::uniform(Key(0), Key(50)).unwrap(), Conformity::Bounded)
        .unwrap();
    let unknown = DistId(5);
    assert_eq!(
        w.prepare_sample(unknown, 3, Clock(0), Clock(1)),
        Err(OpError::Sampling(SampleError::UnknownDistribution { dist: unknown }))
    );
    let h = w.prepare_sample(id, 3, Clock(0), Clock(1)).unwrap();
    let (mut k, mut v) = ([Key(0); 4], [0.0; 8]);
    assert_eq!(
        w.pull_sample(h, &mut k, &mut v),
        Err(OpError::Sampling(SampleError::CountBeyondSample { count: 4, left: 3 }))
    );
    assert_eq!(
        w.pull_sample(h, &mut k[..3], &mut v[..5]),
        Err(OpError::Sampling(SampleError::BufferLength { expected: 6, got: 5 }))
    );
    w.pull_sample(h, &mut k[..3], &mut v[..6]).unwrap();
    assert!(w.pull_sample(h, &mut k[..1], &mut v[..2]).is_err());
    w.finish_sample(h).unwrap();
    assert!(w.finish_sample(h).is_err());
    assert_eq!(w.sampling_stats().samples_pulled, 3);
    finalize_all(workers);
    shutdown_all(c.nodes);
}

#[test]
fn nodes_that_register_different_distributions_are_told() {
    let c = start(&cfg(Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let mut workers = c.workers;
    let same = Distribution::uniform(Key(0), Key(50)).unwrap();
    // Node 0 registers two distributions; node 1 the same first one, then another level.
    workers[0].register_distribution(same.clone(), Conformity::Bounded).unwrap();
    workers[0].register_distribution(same.clone(), Conformity::Bounded).unwrap();
    workers[2].register_distribution(same.clone(), Conformity::Bounded).unwrap();
    workers[2].register_distribution(same, Conformity::Conform).unwrap();
    // The barrier's messages travel behind the fingerprints (per-pair FIFO).
    let out = run_all(workers, |_, w| {
        w.barrier().unwrap();
        let first = w.prepare_sample(DistId(0), 2, Clock(0), Clock(1)).map(|_| ());
        let second = w.prepare_sample(DistId(1), 2, Clock(0), Clock(1)).map(|_| ());
        (first, second)
    });
    for (i, (_, (first, second))) in out.iter().enumerate() {
        assert_eq!(*first, Ok(()), "worker {i}");
        let peer = parma_core::NodeId(1 - (i / 2) as u16);
        assert_eq!(
            *second,
            Err(OpError::Sampling(SampleError::DistributionMismatch { dist: DistId(1), node: peer })),
            "worker {i}"
        );
    }
    let stats = {
        let (workers, _): (Vec<_>, Vec<_>) = out.into_iter().unzip();
        finalize_all(workers);
        shutdown_all(c.nodes)
    };
    assert!(stats.iter().all(|s| s.node.distribution_mismatches == 1), "{stats:?}");
}

/// Upper 0.001 critical value of chi-square with `df` degrees of freedom (Wilson-Hilferty).
fn chi2_crit(df: usize) -> f64 {
    let d = df as f64;
    let a = 2.0 / (9.0 * d);
    d * (1.0 - a + 3.090 * a.sqrt()).powi(3)
}

#[test]
fn conform_pulls_follow_the_distribution_with_keys_local_and_remote() {
    // Static partitioning over three nodes: most sampled keys stay remote, some are local, and
    // the keys a worker pulls must follow π all the same (no swap of remote keys for local ones).
    const SUPPORT: u64 = 30;
    let mut cfg = Config::new(3, 1, Layout::uniform(KEYS, 2).unwrap());
    cfg.technique = Technique::StaticPartitioning;
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let keys: Vec<Key> = (0..SUPPORT).map(|i| Key(3 * i + 1)).collect();
    let weights: Vec<f64> = (0..SUPPORT).map(|i| 1.0 / (i as f64 + 1.0).powf(1.1)).collect();
    let dist = Distribution::weighted(&keys, &weights).unwrap();
    let mut workers = c.workers;
    for w in workers.iter_mut() {
        w.register_distribution(dist.clone(), Conformity::Conform).unwrap();
    }
    let out = run_all(workers, |_, w| {
        w.barrier().unwrap();
        let mut pulled = Vec::new();
        for _ in 0..2_000 {
            let c = w.clock();
            // A full command queue is back-pressure: the call waits for room.
            let h = w.prepare_sample(DistId(0), 8, c, Clock(c.0 + 1)).unwrap();
            for _ in 0..4 {
                let (mut k, mut v) = ([Key(0); 2], [0.0; 4]);
                w.pull_sample(h, &mut k, &mut v).unwrap();
                pulled.extend(k);
            }
            w.finish_sample(h).unwrap();
            w.advance_clock().unwrap();
        }
        (pulled, w.sampling_stats())
    });
    let mut all = Vec::new();
    let mut workers = Vec::new();
    for (w, (pulled, stats)) in out {
        assert_eq!(stats.samples_pulled, 16_000);
        assert!(stats.samples_remote > 4_000 && stats.samples_local > 1_000, "{stats:?}");
        all.extend(pulled);
        workers.push(w);
    }
    let total: f64 = weights.iter().sum();
    let n = all.len() as f64;
    let stat: f64 = keys
        .iter()
        .zip(&weights)
        .map(|(k, w)| {
            let e = n * w / total;
            let o = all.iter().filter(|x| *x == k).count() as f64;
            (o - e) * (o - e) / e
        })
        .sum();
    let crit = chi2_crit(keys.len() - 1);
    assert!(stat < crit, "pulled keys: chi-square {stat:.1} above {crit:.1}");
    finalize_all(workers);
    shutdown_all(c.nodes);
}
