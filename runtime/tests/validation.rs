//! Bad calls are refused before anything changes; duplicate keys have a defined meaning.
#![forbid(unsafe_code)]

mod common;

use std::collections::HashMap;

use common::{finalize_all, key_homed_at, run_all, shutdown_all, start};
use parma_core::{Clock, Config, Gate, Key, Layout, NodeId, OpError, Technique};
use parma_runtime::{Options, WorkerStats};
use parma_transport_loopback::threaded::ThreadedOptions;

#[test]
fn invalid_calls_change_nothing() {
    let cfg = Config::new(2, 2, Layout::uniform(10, 2).unwrap());
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let mut workers = c.workers;
    let (local, remote) = (key_homed_at(NodeId(0), &cfg, 0), key_homed_at(NodeId(1), &cfg, 0));
    let outside = Key(10);
    let w = &mut workers[0];
    let mut v = [0.0; 6];
    assert_eq!(w.pull(&[local, outside], &mut v[..4]), Err(OpError::KeyOutsideLayout { key: outside }));
    assert_eq!(w.pull(&[local], &mut v[..3]), Err(OpError::ValueLength { expected: 2, got: 3 }));
    assert_eq!(
        w.push(&[local, remote, outside], &[5.0; 6]).err(),
        Some(OpError::KeyOutsideLayout { key: outside })
    );
    assert_eq!(w.push(&[local, remote], &[5.0; 5]).err(), Some(OpError::ValueLength { expected: 4, got: 5 }));
    assert_eq!(w.set(&[local, remote], &[5.0; 3]).err(), Some(OpError::ValueLength { expected: 4, got: 3 }));
    assert_eq!(w.set(&[outside], &[5.0; 2]).err(), Some(OpError::KeyOutsideLayout { key: outside }));
    assert_eq!(w.localize(&[remote, outside]).err(), Some(OpError::KeyOutsideLayout { key: outside }));
    assert_eq!(w.pull_if_local(&[outside], &mut v[..2]), Err(OpError::KeyOutsideLayout { key: outside }));
    assert_eq!(w.pull_if_local(&[local], &mut v[..1]), Err(OpError::ValueLength { expected: 2, got: 1 }));
    assert_eq!(w.stats(), WorkerStats::default());
    assert_eq!(w.outstanding(), 0);

    // A ticket belongs to the worker that issued it.
    let t = workers[0].push(&[remote], &[1.0, 1.0]).unwrap();
    assert_eq!(workers[1].wait(t), Err(OpError::InvalidArgument));

    let mut v = [9.0; 4];
    workers[1].pull(&[local, remote], &mut v).unwrap();
    assert_eq!(v, [0.0, 0.0, 1.0, 1.0]);
    assert_eq!(c.nodes[0].stats().node.ops_failed, 0);
    finalize_all(workers);
    shutdown_all(c.nodes);
}

#[test]
fn duplicate_keys_and_ranged_lengths() {
    let layout = Layout::ranges(1000, vec![(0, 1), (100, 3), (500, 2)]).unwrap();
    let cfg = Config::new(2, 1, layout.clone());
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let keys: Vec<Key> = [
        key_homed_at(NodeId(0), &cfg, 0),
        key_homed_at(NodeId(1), &cfg, 0),
        key_homed_at(NodeId(0), &cfg, 100),
        key_homed_at(NodeId(1), &cfg, 100),
        key_homed_at(NodeId(0), &cfg, 500),
        key_homed_at(NodeId(1), &cfg, 500),
    ]
    .to_vec();
    // Every key twice, in a scrambled order.
    let calls: Vec<Key> = [0, 3, 1, 5, 0, 2, 4, 3, 1, 5, 2, 4].iter().map(|i| keys[*i]).collect();
    let total: usize = calls.iter().map(|k| layout.len_of(*k).unwrap()).sum();
    let deltas: Vec<f32> = (0..total).map(|i| i as f32).collect();
    let done = run_all(c.workers, |i, w| {
        if i != 0 {
            return;
        }
        // Model: adds sum up, sets keep the last value.
        let mut model: HashMap<Key, Vec<f32>> = HashMap::new();
        let mut off = 0;
        for k in &calls {
            let len = layout.len_of(*k).unwrap();
            let m = model.entry(*k).or_insert_with(|| vec![0.0; len]);
            m.iter_mut().zip(&deltas[off..off + len]).for_each(|(a, d)| *a += *d);
            off += len;
        }
        let t = w.push(&calls, &deltas).unwrap();
        w.wait(t).unwrap();
        let mut got = vec![0.0; total];
        w.pull(&calls, &mut got).unwrap();
        let want: Vec<f32> = calls.iter().flat_map(|k| model[k].clone()).collect();
        assert_eq!(got, want);

        let values: Vec<f32> = (0..total).map(|i| 1000.0 + i as f32).collect();
        let mut off = 0;
        for k in &calls {
            let len = layout.len_of(*k).unwrap();
            model.insert(*k, values[off..off + len].to_vec());
            off += len;
        }
        let t = w.set(&calls, &values).unwrap();
        w.wait(t).unwrap();
        w.pull(&calls, &mut got).unwrap();
        let want: Vec<f32> = calls.iter().flat_map(|k| model[k].clone()).collect();
        assert_eq!(got, want);
    });
    finalize_all(done.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}

#[test]
fn intents_go_to_the_node_only_where_it_acts_on_them() {
    // (nodes, technique, gate) and whether the node should receive the worker's intent.
    let cases = [
        (1, Technique::Adaptive, Gate::Async, false),
        (2, Technique::StaticPartitioning, Gate::Async, false),
        (2, Technique::Adaptive, Gate::Async, true),
        (1, Technique::Adaptive, Gate::SparseSsp { staleness: 1, speculation: 1 }, true),
    ];
    for (nodes, technique, gate, sent) in cases {
        let mut cfg = Config::new(nodes, 1, Layout::uniform(10, 2).unwrap());
        cfg.technique = technique;
        cfg.gate = gate;
        assert_eq!(cfg.acts_on_intents(), sent, "{nodes} nodes, {technique:?}, {gate:?}");
        let c = start(&cfg, Options::default(), ThreadedOptions::default());
        let mut workers = c.workers;
        let w = &mut workers[0];
        // Validated either way.
        assert_eq!(
            w.intent(&[Key(1), Key(10)], Clock(1), Clock(2)),
            Err(OpError::KeyOutsideLayout { key: Key(10) })
        );
        w.intent(&[Key(1), Key(2)], Clock(1), Clock(2)).unwrap();
        finalize_all(workers);
        let stats = shutdown_all(c.nodes);
        let signaled: u64 = stats.iter().map(|s| s.node.intents_signaled).sum();
        assert_eq!(signaled, u64::from(sent), "{nodes} nodes, {technique:?}, {gate:?}");
    }
}
