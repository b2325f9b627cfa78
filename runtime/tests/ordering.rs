//! A worker's operations on one key are seen in the order it issued them (invariant 4),
//! whether the key is remote, local, or moving.
#![forbid(unsafe_code)]

mod common;

use common::{finalize_all, key_homed_at, run_all, shutdown_all, start, Rng};
use parma_core::{Config, Key, Layout, NodeId, Technique};
use parma_runtime::Options;
use parma_transport_loopback::threaded::ThreadedOptions;

#[test]
fn pull_after_own_push_sees_it() {
    let cfg = Config::new(2, 1, Layout::uniform(100, 2).unwrap());
    let k = key_homed_at(NodeId(1), &cfg, 0);
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let done = run_all(c.workers, |i, w| {
        if i != 0 {
            return;
        }
        let mut v = [0.0; 2];
        for n in 1..=100 {
            let t = w.push(&[k], &[1.0, 1.0]).unwrap();
            assert!(!t.is_complete());
            w.pull(&[k], &mut v).unwrap();
            assert_eq!(v, [n as f32; 2]);
            w.wait(t).unwrap();
        }
        let t = w.set(&[k], &[42.0, 43.0]).unwrap();
        w.pull(&[k], &mut v).unwrap();
        assert_eq!(v, [42.0, 43.0]);
        w.wait(t).unwrap();
        // A pull issued before a push does not see it, though the push is issued before the
        // pull is waited for.
        let mut before = [0.0; 2];
        let p = w.pull_async(&[k], &mut before).unwrap();
        let t = w.push(&[k], &[1.0, 1.0]).unwrap();
        w.wait_pull(p).unwrap();
        assert_eq!(before, [42.0, 43.0]);
        w.wait(t).unwrap();
        w.pull(&[k], &mut v).unwrap();
        assert_eq!(v, [43.0, 44.0]);
        // Two pulls in flight at once are fine.
        let (mut a, mut b) = ([0.0; 2], [0.0; 2]);
        let pa = w.pull_async(&[k], &mut a).unwrap();
        let pb = w.pull_async(&[k], &mut b).unwrap();
        assert_eq!(w.outstanding(), 2);
        w.wait_pull(pb).unwrap();
        w.wait_pull(pa).unwrap();
        assert_eq!((a, b), ([43.0, 44.0], [43.0, 44.0]));
    });
    finalize_all(done.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}

/// Each worker counts up its own key with pushes it does not wait for and checks every pull
/// against its count, while all workers keep localizing each other's keys, so the keys move
/// between nodes all the time.
#[test]
fn own_order_holds_while_keys_move() {
    let mut cfg = Config::new(2, 2, Layout::uniform(16, 1).unwrap());
    cfg.technique = Technique::Relocation;
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let done = run_all(c.workers, |i, w| {
        let mine = Key(i as u64);
        let mut rng = Rng(i as u64);
        let mut count = 0.0;
        let mut tickets = Vec::new();
        for round in 0..400 {
            let t = w.push(&[mine], &[1.0]).unwrap();
            count += 1.0;
            tickets.push(t);
            if round % 3 == 0 {
                let mut v = [0.0];
                w.pull(&[mine], &mut v).unwrap();
                assert_eq!(v[0], count, "worker {i} round {round}");
            }
            if round % 7 == 0 {
                let other = Key(rng.below(4));
                let t = w.localize(&[other]).unwrap();
                tickets.push(t);
            }
            if tickets.len() > 16 {
                for t in tickets.drain(..) {
                    w.wait(t).unwrap();
                }
            }
        }
        for t in tickets {
            w.wait(t).unwrap();
        }
        count
    });
    let counts: Vec<f32> = done.iter().map(|(_, c)| *c).collect();
    let checked = run_all(done.into_iter().map(|(w, _)| w).collect(), |_, w| {
        w.barrier().unwrap();
        let keys: Vec<Key> = (0..4).map(Key).collect();
        let mut v = [0.0; 4];
        w.pull(&keys, &mut v).unwrap();
        assert_eq!(v.to_vec(), counts);
    });
    let moved: u64 = c.nodes.iter().map(|n| n.stats().node.relocations_in).sum();
    assert!(moved > 0);
    finalize_all(checked.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
}
