//! `Worker::announce` and `Prefetch`: what an announcement does under each technique, the
//! clock a loop of steps advances, and the arguments they refuse.
#![forbid(unsafe_code)]

mod common;

use parma_core::{Clock, Config, Key, Layout, OpError, Technique};
use parma_runtime::{default_lookahead, Options, Prefetch, LOOKAHEAD_MAX};
use parma_transport_loopback::threaded::ThreadedOptions;

const STEPS: u64 = 40;
const KEYS: u64 = 200;

/// Worker `w`'s keys of step `s`: 4 keys of its own residue class, so no two workers share one.
fn batch(w: u64, s: u64) -> Vec<Key> {
    (0..4).map(|j| Key(((s * 4 + j) * 2 + w) % KEYS)).collect()
}

fn config(technique: Technique) -> Config {
    let mut cfg = Config::new(2, 1, Layout::uniform(KEYS, 1).unwrap());
    cfg.technique = technique;
    cfg
}

#[test]
fn a_loop_of_steps_announces_by_technique_and_advances_one_clock_per_step() {
    for technique in [Technique::Adaptive, Technique::StaticPartitioning, Technique::Relocation] {
        let cfg = config(technique);
        let c = common::start(&cfg, Options::default(), ThreadedOptions::default());
        let results = common::run_all(c.workers, |i, w| {
            let mut source = (0..STEPS).map(|s| batch(i as u64, s));
            let mut steps = Prefetch::new(8).unwrap();
            let (mut n, mut remote_after_localize) = (0, 0);
            let mut vals = [0.0f32; 4];
            while let Some(keys) = steps.next_step(w, &mut source).unwrap() {
                let before = w.stats().keys_pulled_remote;
                w.pull(&keys, &mut vals).unwrap();
                remote_after_localize += w.stats().keys_pulled_remote - before;
                let t = w.push(&keys, &[1.0; 4]).unwrap();
                w.wait(t).unwrap();
                n += 1;
            }
            assert_eq!(steps.announced(), 0);
            (n, w.clock(), remote_after_localize)
        });
        let mut workers = Vec::new();
        for (w, (n, clock, remote)) in results {
            assert_eq!((n, clock), (STEPS, Clock(STEPS)), "{}: one clock per step", technique.name());
            if technique == Technique::Relocation {
                // Every step's keys were localized and waited for before the pull, and no
                // other worker uses them: none is pulled remotely.
                assert_eq!(remote, 0, "relocation: remote keys after the localize");
            }
            workers.push(w);
        }
        common::finalize_all(workers);
        let stats = common::shutdown_all(c.nodes);
        let intents: u64 = stats.iter().map(|s| s.node.intents_signaled).sum();
        let relocations: u64 = stats.iter().map(|s| s.node.relocations_in).sum();
        match technique {
            Technique::Adaptive => assert_eq!(intents, 2 * STEPS, "one intent per step and worker"),
            Technique::StaticPartitioning => assert_eq!((intents, relocations), (0, 0), "static: nothing"),
            Technique::Relocation => {
                assert_eq!(intents, 0, "relocation announces by localize");
                assert!(relocations > 0, "relocation moved no key");
            }
            _ => unreachable!(),
        }
    }
}

#[test]
fn announcements_refuse_empty_windows_and_keys_outside_the_layout() {
    let cfg = config(Technique::Adaptive);
    let mut c = common::start(&cfg, Options::default(), ThreadedOptions::default());
    let w = &mut c.workers[0];
    let e = w.announce(&[Key(1)], Clock(5), Clock(5)).unwrap_err();
    assert_eq!(e, OpError::IntentWindow { start: Clock(5), end: Clock(5) });
    assert!(e.to_string().contains("[5, 5)"), "{e}");
    assert!(matches!(w.intent(&[Key(1)], Clock(7), Clock(3)), Err(OpError::IntentWindow { .. })));
    assert_eq!(
        w.announce(&[Key(KEYS)], Clock(0), Clock(1)).unwrap_err(),
        OpError::KeyOutsideLayout { key: Key(KEYS) }
    );

    let e = Prefetch::<Vec<Key>>::new(LOOKAHEAD_MAX + 1).unwrap_err();
    assert!(e.to_string().contains("65,536"), "{e}");
    let mut steps = Prefetch::new(2).unwrap();
    // The step to begin and two beyond it; a fourth is refused and queues nothing.
    for s in 0..3 {
        steps.announce(w, batch(0, s)).unwrap();
    }
    assert!(!steps.has_room());
    assert_eq!(steps.announce(w, batch(0, 3)), Err(OpError::Busy));
    let mut bad = Prefetch::new(2).unwrap();
    assert!(bad.announce(w, vec![Key(KEYS + 1)]).is_err());
    assert_eq!(bad.announced(), 0, "a refused announcement queues nothing");
    drop(c);
}

#[test]
fn finishing_early_ends_the_step_and_waits_for_the_localizes_ahead() {
    let cfg = config(Technique::Relocation);
    let c = common::start(&cfg, Options::default(), ThreadedOptions::default());
    let results = common::run_all(c.workers, |i, w| {
        let mut source = (0..STEPS).map(|s| batch(i as u64, s));
        let mut steps = Prefetch::new(5).unwrap();
        for _ in 0..3 {
            steps.next_step(w, &mut source).unwrap().unwrap();
        }
        assert_eq!(steps.announced(), 5);
        steps.finish(w).unwrap();
        (steps.announced(), w.clock())
    });
    let mut workers = Vec::new();
    for (w, (announced, clock)) in results {
        assert_eq!((announced, clock), (0, Clock(3)));
        workers.push(w);
    }
    common::finalize_all(workers);
    common::shutdown_all(c.nodes);
}

#[test]
fn the_default_look_ahead_is_about_a_thousand_examples() {
    assert_eq!(default_lookahead(1), 1024);
    assert_eq!(default_lookahead(100), 11);
    assert_eq!(default_lookahead(1_000_000), 8);
    assert_eq!(default_lookahead(0), 1024);
}
