//! Whole clusters on the threaded loopback transport: exact sums, localize, stats.
#![forbid(unsafe_code)]

mod common;

use std::collections::VecDeque;

use common::{finalize_all, run_all, shutdown_all, start, Rng};
use parma_core::{Clock, Config, Key, Layout, Technique};
use parma_runtime::{Options, Worker};
use parma_transport_loopback::threaded::ThreadedOptions;

const LEN: usize = 3;

/// Every worker pushes integer-valued deltas to random keys (with duplicates, most of them
/// remote), keeping a few pushes in flight; after a barrier every key holds the exact sum.
fn exact_sums(cfg: Config, opts: Options, topts: ThreadedOptions) {
    let key_end = cfg.layout.key_end() as usize;
    let c = start(&cfg, opts, topts);
    let done = run_all(c.workers, |i, w| {
        let mut rng = Rng(0xabc0 + i as u64);
        let mut expected = vec![0.0f64; key_end * LEN];
        let mut tickets = VecDeque::new();
        for _ in 0..300 {
            let n = 1 + rng.below(16) as usize;
            let keys: Vec<Key> = (0..n).map(|_| Key(rng.below(key_end as u64))).collect();
            let vals: Vec<f32> = (0..n * LEN).map(|_| rng.below(7) as f32 - 3.0).collect();
            for (j, k) in keys.iter().enumerate() {
                for e in 0..LEN {
                    expected[k.0 as usize * LEN + e] += f64::from(vals[j * LEN + e]);
                }
            }
            tickets.push_back(w.push(&keys, &vals).unwrap());
            if tickets.len() > 8 {
                w.wait(tickets.pop_front().unwrap()).unwrap();
            }
        }
        for t in tickets {
            w.wait(t).unwrap();
        }
        w.barrier().unwrap();
        expected
    });
    let mut total = vec![0.0f64; key_end * LEN];
    for (_, e) in &done {
        total.iter_mut().zip(e).for_each(|(t, e)| *t += e);
    }
    let workers: Vec<Worker> = done.into_iter().map(|(w, _)| w).collect();
    let checked = run_all(workers, |_, w| {
        let keys: Vec<Key> = (0..key_end as u64).map(Key).collect();
        let mut vals = vec![f32::NAN; key_end * LEN];
        w.pull(&keys, &mut vals).unwrap();
        for (i, v) in vals.iter().enumerate() {
            assert_eq!(f64::from(*v), total[i], "key {} element {}", i / LEN, i % LEN);
        }
        w.stats()
    });
    for (_, s) in &checked {
        assert!(s.keys_pushed_remote > 0 && s.keys_pushed_local > 0, "{s:?}");
    }
    let live: Vec<_> = c.nodes.iter().map(|n| n.stats()).collect();
    assert!(live.iter().all(|s| s.node.ops_failed == 0 && s.node.messages_sent_total() > 0));
    finalize_all(checked.into_iter().map(|(w, _)| w).collect());
    for s in shutdown_all(c.nodes) {
        assert_eq!(s.node.ops_failed, 0);
        assert_eq!(s.driver.completions_orphaned, 0);
        assert_eq!(s.workers.len(), 2);
    }
}

#[test]
fn pushes_sum_exactly() {
    let cfg = Config::new(4, 2, Layout::uniform(500, LEN as u32).unwrap());
    exact_sums(cfg, Options::default(), ThreadedOptions::default());
}

#[test]
fn pushes_sum_exactly_under_back_pressure() {
    let mut cfg = Config::new(4, 2, Layout::uniform(500, LEN as u32).unwrap());
    cfg.keys_per_message_max = 2;
    let mut opts = Options::default();
    opts.worker_inflight_max = 3;
    let topts = ThreadedOptions::default().with_pair_frames_max(2);
    exact_sums(cfg, opts, topts);
}

#[test]
fn keys_with_intent_become_local() {
    // Adaptive (the default): every worker signals intent for its own 100 keys in clock 1, and
    // for 20 keys that all workers share; after the clock advances and two sync rounds pass,
    // all of them are local (moved or replicated), and the shared keys add up everywhere.
    let cfg = Config::new(4, 2, Layout::uniform(2000, 2).unwrap());
    assert_eq!(cfg.technique, Technique::Adaptive);
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let shared: Vec<Key> = (1900..1920).map(Key).collect();
    let done = run_all(c.workers, |i, w| {
        let own: Vec<Key> = (i as u64 * 100..i as u64 * 100 + 100).map(Key).collect();
        w.intent(&own, Clock(1), Clock(3)).unwrap();
        w.intent(&shared, Clock(1), Clock(3)).unwrap();
        assert_eq!(w.advance_clock().unwrap(), Clock(1));
        w.wait_sync().unwrap();
        w.wait_sync().unwrap();
        let mut vals = vec![0.0; 200];
        assert!(w.pull_if_local(&own, &mut vals).unwrap(), "own keys are not local");
        let mut s = vec![0.0; 40];
        assert!(w.pull_if_local(&shared, &mut s).unwrap(), "shared keys are not local");
        let t = w.push(&shared, &[1.0; 40]).unwrap();
        assert!(t.is_complete(), "a push to a local replica needs no network");
        w.barrier().unwrap();
        // End every intent; two more rounds carry the last deltas to the owners.
        w.advance_clock().unwrap();
        w.advance_clock().unwrap();
        w.wait_sync().unwrap();
        w.wait_sync().unwrap();
        w.barrier().unwrap();
    });
    let workers: Vec<Worker> = done.into_iter().map(|(w, _)| w).collect();
    let workers = run_all(workers, |_, w| {
        let mut s = vec![0.0; 40];
        w.pull(&shared, &mut s).unwrap();
        assert!(s.iter().all(|v| *v == 8.0), "{s:?}");
    });
    let stats: Vec<_> = c.nodes.iter().map(|n| n.stats().node).collect();
    assert!(stats.iter().map(|s| s.relocations_in).sum::<u64>() > 0);
    assert!(stats.iter().map(|s| s.replicas_created).sum::<u64>() > 0);
    finalize_all(workers.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}

#[test]
fn localized_keys_are_served_locally() {
    let mut cfg = Config::new(4, 2, Layout::uniform(2000, 2).unwrap());
    cfg.technique = Technique::Relocation;
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let done = run_all(c.workers, |i, w| {
        let keys: Vec<Key> = (i as u64 * 100..i as u64 * 100 + 100).map(Key).collect();
        let mut vals = vec![0.0; 200];
        w.pull(&keys, &mut vals).unwrap();
        let first = w.stats();
        assert!(first.keys_pulled_remote > 0, "{first:?}");
        assert!(!w.pull_if_local(&keys, &mut vals).unwrap());

        let t = w.localize(&keys).unwrap();
        assert!(!t.is_complete(), "the keys are not here yet");
        w.wait(t).unwrap();
        // Nobody else localizes them: held here, they need no trip through the driver.
        let again = w.localize(&keys).unwrap();
        assert!(again.is_complete());
        w.wait(again).unwrap();
        w.pull(&keys, &mut vals).unwrap();
        let second = w.stats();
        assert_eq!(second.keys_pulled_remote, first.keys_pulled_remote);
        assert_eq!(second.keys_pulled_local - first.keys_pulled_local, 100);
        assert!(w.pull_if_local(&keys, &mut vals).unwrap());

        let t = w.push(&keys, &[1.0; 200]).unwrap();
        assert!(t.is_complete());
        w.wait(t).unwrap();
        assert_eq!(w.stats().keys_pushed_remote, 0);
        assert_eq!(w.stats().keys_pushed_local, 100);
        w.barrier().unwrap();
    });
    // Every worker sees everyone's pushes, wherever the keys are now.
    let workers: Vec<Worker> = done.into_iter().map(|(w, _)| w).collect();
    let workers = run_all(workers, |_, w| {
        let keys: Vec<Key> = (0..800).map(Key).collect();
        let mut vals = vec![0.0; 1600];
        w.pull(&keys, &mut vals).unwrap();
        assert!(vals.iter().all(|v| *v == 1.0));
    });
    let relocated: u64 = c.nodes.iter().map(|n| n.stats().node.relocations_in).sum();
    assert!(relocated > 0);
    finalize_all(workers.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}

#[test]
fn runtime_stats_add_up_workers() {
    let cfg = Config::new(2, 2, Layout::uniform(100, 1).unwrap());
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let done = run_all(c.workers, |_, w| {
        let keys: Vec<Key> = (0..100).map(Key).collect();
        let mut vals = vec![0.0; 100];
        w.pull(&keys, &mut vals).unwrap();
        w.stats()
    });
    for (n, node) in c.nodes.iter().enumerate() {
        let s = node.stats();
        let mine: Vec<_> = done[n * 2..n * 2 + 2].iter().map(|(_, s)| *s).collect();
        assert_eq!(s.workers, mine);
        assert_eq!(s.workers_total().keys_pulled_local + s.workers_total().keys_pulled_remote, 200);
        assert_eq!(s.node.keys_pulled_remote, s.workers_total().keys_pulled_remote);
        assert!(s.driver.commands >= 2 && s.driver.frames_sent > 0);
    }
    finalize_all(done.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}

/// Tiny transport queues and outbox bound, and one key per message: many frames wait for
/// room toward every peer at once, and no two nodes may end up waiting for each other.
#[test]
fn tight_bounds_do_not_deadlock() {
    let mut cfg = Config::new(4, 2, Layout::uniform(2000, 1).unwrap());
    cfg.keys_per_message_max = 1;
    cfg.outbox_frames_max = 4;
    let topts = ThreadedOptions::default().with_pair_frames_max(1);
    let c = start(&cfg, Options::default(), topts);
    let done = run_all(c.workers, |_, w| {
        let keys: Vec<Key> = (0..2000).map(Key).collect();
        let mut v = vec![1.0; 2000];
        for _ in 0..3 {
            w.pull(&keys, &mut v).unwrap();
            assert!(v.iter().all(|x| *x == 0.0));
        }
    });
    let blocked: u64 = c.nodes.iter().map(|n| n.stats().driver.sends_blocked).sum();
    assert!(blocked > 0);
    finalize_all(done.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}

/// Replicas kept for the whole run (full replication, NuPS's hot keys) synchronize every
/// round, for ever: a graceful shutdown must still drain (and so must replicas for intents
/// that outlive the workers' last clock, under adaptive). Every worker pushes to every key
/// through its replica, keeps intents open past its last clock, and finalizes; the last
/// deltas reach the owners before the nodes stop, and every node stops cleanly.
#[test]
fn permanent_replicas_drain_at_shutdown() {
    for technique in [Technique::FullReplication, Technique::MultiTechnique, Technique::Adaptive] {
        let mut cfg = Config::new(3, 2, Layout::uniform(60, 2).unwrap());
        cfg.technique = technique;
        cfg.hot_keys = std::sync::Arc::new((0..60).map(Key).collect());
        let c = start(&cfg, Options::default(), ThreadedOptions::default());
        let keys: Vec<Key> = (0..60).map(Key).collect();
        let done = run_all(c.workers, |_, w| {
            w.intent(&keys, Clock(0), Clock(1000)).unwrap();
            w.wait_sync().unwrap();
            w.wait_sync().unwrap();
            let t = w.push(&keys, &[1.0; 120]).unwrap();
            w.wait(t).unwrap();
        });
        finalize_all(done.into_iter().map(|(w, _)| w).collect());
        // After finalize every delta was merged: each main copy holds all six pushes.
        for n in &c.nodes {
            let mut v = [0.0f32; 2];
            for k in &keys {
                if n.inspect().holds(*k) {
                    assert!(n.inspect().read(*k, &mut v));
                    assert_eq!(v, [6.0, 6.0], "{technique:?}: key {k} on node {}", n.id());
                }
            }
        }
        shutdown_all(c.nodes);
    }
}
