//! A pull detached from its value buffer (`PullTicket::detach`, then `Worker::finish_pull`),
//! as a binding whose buffers belong to another runtime uses it: local values are written at
//! once, remote ones when it is finished; a buffer of another length is refused and the pull
//! is still waited for, so the worker is left with nothing outstanding.
#![forbid(unsafe_code)]

mod common;

use common::{finalize_all, key_homed_at, shutdown_all, start};
use parma_core::placement::Homes;
use parma_core::{Config, Key, Layout, NodeId, OpError, Technique};
use parma_runtime::Options;
use parma_transport_loopback::threaded::ThreadedOptions;

const LEN: usize = 3;

fn config() -> Config {
    let mut cfg = Config::new(2, 1, Layout::uniform(64, LEN as u32).unwrap());
    // Keys stay at their homes, so a key homed at node 1 is remote for node 0's worker.
    cfg.technique = Technique::StaticPartitioning;
    cfg
}

/// Every key's value is (key, key + 0.5, key + 0.25), written through node 1's worker.
fn expected(keys: &[Key]) -> Vec<f32> {
    keys.iter().flat_map(|k| [k.0 as f32, k.0 as f32 + 0.5, k.0 as f32 + 0.25]).collect()
}

#[test]
fn a_detached_pull_fills_local_values_at_once_and_remote_ones_when_finished() {
    let cfg = config();
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let mut workers = c.workers;
    let ([a, b], [x, y]) = (two_homed_at(NodeId(0), &cfg), two_homed_at(NodeId(1), &cfg));
    let keys = vec![a, x, b, y];
    let want = expected(&keys);
    let t = workers[1].set(&keys, &want).unwrap();
    workers[1].wait(t).unwrap();

    let homes = Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    let w = &mut workers[0];
    let mut vals = vec![-1.0f32; keys.len() * LEN];
    let pending = w.pull_async(&keys, &mut vals).unwrap().detach();
    assert!(!pending.is_complete(), "two of the keys are homed at the other node");
    assert_eq!((pending.len(), pending.is_empty()), (keys.len() * LEN, false));
    // The local keys' values are in the buffer already; the remote ones are not yet.
    for (i, k) in keys.iter().enumerate() {
        let got = &vals[i * LEN..(i + 1) * LEN];
        if homes.home(*k) == NodeId(0) {
            assert_eq!(got, &want[i * LEN..(i + 1) * LEN], "local key {k:?} before the finish");
        } else {
            assert_eq!(got, [-1.0; LEN], "remote key {k:?} written before the finish");
        }
    }
    w.finish_pull(pending, &mut vals).unwrap();
    assert_eq!(vals, want);
    assert_eq!(w.outstanding(), 0);

    // A pull of local keys only is complete when it is detached, and finishes at once.
    let local = [keys[0], keys[2]];
    let mut lv = vec![0.0f32; 2 * LEN];
    let pending = w.pull_async(&local, &mut lv).unwrap().detach();
    assert!(pending.is_complete());
    w.finish_pull(pending, &mut lv).unwrap();
    assert_eq!(lv, expected(&local));

    // A pull of no keys fills nothing.
    let pending = w.pull_async(&[], &mut []).unwrap().detach();
    assert!(pending.is_empty() && pending.is_complete());
    w.finish_pull(pending, &mut []).unwrap();

    finalize_all(workers);
    shutdown_all(c.nodes);
}

#[test]
fn finishing_on_a_buffer_of_another_length_is_refused_and_leaves_nothing_behind() {
    let cfg = config();
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let mut workers = c.workers;
    let remote = two_homed_at(NodeId(1), &cfg);
    let want = expected(&remote);
    let t = workers[1].set(&remote, &want).unwrap();
    workers[1].wait(t).unwrap();

    let w = &mut workers[0];
    let mut vals = vec![0.0f32; 2 * LEN];
    let pending = w.pull_async(&remote, &mut vals).unwrap().detach();
    let mut short = vec![7.0f32; LEN];
    assert_eq!(w.finish_pull(pending, &mut short), Err(OpError::ValueLength { expected: 2 * LEN, got: LEN }));
    assert_eq!(short, [7.0; LEN], "a refused buffer is not written");
    assert_eq!(w.outstanding(), 0, "the refused pull was still waited for");

    // The worker goes on: the next pull is whole.
    let mut again = vec![0.0f32; 2 * LEN];
    w.pull(&remote, &mut again).unwrap();
    assert_eq!(again, want);
    assert_eq!(c.nodes[0].stats().node.ops_failed, 0);
    finalize_all(workers);
    shutdown_all(c.nodes);
}

/// The first two keys whose home is `node`.
fn two_homed_at(node: NodeId, cfg: &Config) -> [Key; 2] {
    let first = key_homed_at(node, cfg, 0);
    [first, key_homed_at(node, cfg, first.0 + 1)]
}
