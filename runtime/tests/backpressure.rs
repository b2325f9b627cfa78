//! A full command queue is back-pressure, not a failure; a failed worker stops its siblings
//! at once (`NodeRuntime::abort`); a worker dropped without `finalize` ends its siblings'
//! barriers; a barrier waits for a slow live worker longer than any request timeout.
#![forbid(unsafe_code)]

mod common;

use std::time::{Duration, Instant};

use common::{finalize_all, run_all, shutdown_all, start};
use parma_core::{Clock, Config, Conformity, Distribution, Key, Layout, OpError, Technique};
use parma_runtime::Options;
use parma_transport_loopback::threaded::ThreadedOptions;

const KEYS: u64 = 64;

fn cfg(nodes: u16, workers: u16) -> Config {
    let mut cfg = Config::new(nodes, workers, Layout::uniform(KEYS, 2).unwrap());
    cfg.technique = Technique::Adaptive;
    cfg
}

fn tiny_queue() -> Options {
    let mut opts = Options::default();
    opts.command_queue_max = Some(2);
    opts
}

/// Steps of one example each, as `--batch 1` training takes them: a sample prepared for the
/// step (a command), its draws pulled, an intent for the next step (a command where the node
/// acts on intents), a push of +1 to the step's key and of +1 to each drawn key, and a clock
/// advance (a command). Returns how often each key was pushed.
fn small_steps(w: &mut parma_runtime::Worker, steps: u64, salt: u64) -> Vec<u64> {
    let dist = parma_core::DistId(0);
    let mut pushed = vec![0u64; KEYS as usize];
    let (ones, mut drawn, mut vals) = ([1.0f32; 2], [Key(0); 2], [0.0f32; 4]);
    for s in 0..steps {
        let c = w.clock();
        let h = w.prepare_sample(dist, 2, c, Clock(c.0 + 1)).unwrap();
        let key = Key((s * 7 + salt) % KEYS);
        w.intent(&[Key((key.0 + 1) % KEYS)], Clock(c.0 + 1), Clock(c.0 + 2)).unwrap();
        w.pull_sample(h, &mut drawn, &mut vals).unwrap();
        w.finish_sample(h).unwrap();
        for k in std::iter::once(key).chain(drawn) {
            let t = w.push(&[k], &ones).unwrap();
            w.wait(t).unwrap();
            pushed[k.0 as usize] += 1;
        }
        w.advance_clock().unwrap();
    }
    pushed
}

/// Runs `steps` small steps on every worker of a cluster whose command queue holds two
/// commands, then checks every key's value against the pushes made to it, exactly.
fn no_update_lost_through_a_tiny_queue(nodes: u16, workers: u16, steps: u64) {
    let cfg = cfg(nodes, workers);
    let c = start(&cfg, tiny_queue(), ThreadedOptions::default());
    let mut all = c.workers;
    for n in 0..usize::from(nodes) {
        let w = &mut all[n * usize::from(workers)];
        let uniform = Distribution::uniform(Key(0), Key(KEYS)).unwrap();
        w.register_distribution(uniform, Conformity::Conform).unwrap();
    }
    let out = run_all(all, |i, w| {
        w.barrier().unwrap();
        let pushed = small_steps(w, steps, i as u64);
        w.barrier().unwrap();
        pushed
    });
    let mut expected = vec![0u64; KEYS as usize];
    let mut waited = 0;
    for (w, pushed) in &out {
        expected.iter_mut().zip(pushed).for_each(|(e, p)| *e += p);
        waited += w.stats().commands_waited;
    }
    let mut all: Vec<_> = out.into_iter().map(|(w, _)| w).collect();
    let keys: Vec<Key> = (0..KEYS).map(Key).collect();
    let mut vals = vec![0.0f32; KEYS as usize * 2];
    all[0].pull(&keys, &mut vals).unwrap();
    for k in 0..KEYS as usize {
        let want = expected[k] as f32;
        assert_eq!((vals[2 * k], vals[2 * k + 1]), (want, want), "key {k}");
    }
    assert_eq!(expected.iter().sum::<u64>(), 3 * steps * u64::from(nodes) * u64::from(workers));
    // The queue holds two commands: the workers must have waited for room.
    assert!(waited > 0, "no command ever found the queue full");
    finalize_all(all);
    shutdown_all(c.nodes);
}

/// The case: one node, two workers, one example per step, 100,000 steps each.
#[test]
fn one_node_two_workers_small_steps_lose_nothing_through_a_tiny_queue() {
    no_update_lost_through_a_tiny_queue(1, 2, 100_000);
}

/// Two nodes: intents go to the node too, and pushes to keys owned elsewhere travel.
#[test]
fn two_nodes_small_steps_lose_nothing_through_a_tiny_queue() {
    no_update_lost_through_a_tiny_queue(2, 1, 10_000);
}

/// A command queue of no room at all is refused before anything starts.
#[test]
fn a_command_queue_of_zero_is_refused() {
    let cfg = cfg(1, 1);
    let mut opts = Options::default();
    opts.command_queue_max = Some(0);
    let t = parma_transport_loopback::threaded::cluster(1, ThreadedOptions::default()).remove(0);
    let err = parma_runtime::NodeRuntime::start_with(cfg, parma_core::NodeId(0), t, opts).unwrap_err();
    assert_eq!(err.to_string(), "runtime option command_queue_max must be at least 1");
}

/// One worker waits in a barrier while another fails; aborting the nodes ends the wait at
/// once with `Aborted`, and later calls fail the same way.
#[test]
fn an_abort_ends_a_siblings_barrier_at_once() {
    let cfg = cfg(2, 1);
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let mut ws = c.workers.into_iter();
    let (mut waiter, failing) = (ws.next().unwrap(), ws.next().unwrap());
    let nodes = &c.nodes;
    let (ended, aborted_at) = std::thread::scope(|s| {
        let h = s.spawn(move || {
            let r = waiter.barrier();
            (r, Instant::now(), waiter.pull(&[Key(1)], &mut [0.0; 2]))
        });
        std::thread::sleep(Duration::from_millis(50));
        // The failing worker's thread gives up: its job aborts every node's waits.
        drop(failing);
        let at = Instant::now();
        nodes.iter().for_each(parma_runtime::NodeRuntime::abort);
        (h.join().unwrap(), at)
    });
    let (barrier, when, later) = ended;
    // Either error ends the wait: the dropped worker's node, or the abort.
    assert!(matches!(
        barrier,
        Err(OpError::Aborted | OpError::WorkerLeft { .. } | OpError::PeerFailed { .. })
    ));
    assert!(
        when.saturating_duration_since(aborted_at) < Duration::from_secs(1),
        "the wait outlasted the abort"
    );
    assert_eq!(later, Err(OpError::Aborted));
    assert!(c.nodes.iter().all(parma_runtime::NodeRuntime::is_aborted));
    // An aborted node stops without waiting for a drain.
    for n in c.nodes {
        let started = Instant::now();
        let _ = n.shutdown();
        assert!(started.elapsed() < Duration::from_secs(10), "shutdown waited for a drain");
    }
}

/// A worker dropped without `finalize` ends the barrier its sibling on the same node waits in,
/// naming it.
#[test]
fn a_dropped_worker_ends_its_siblings_barrier() {
    let cfg = cfg(1, 2);
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let mut ws = c.workers.into_iter();
    let (mut waiter, gone) = (ws.next().unwrap(), ws.next().unwrap());
    let got = std::thread::scope(|s| {
        let h = s.spawn(move || waiter.barrier());
        std::thread::sleep(Duration::from_millis(50));
        drop(gone);
        h.join().unwrap()
    });
    assert_eq!(got, Err(OpError::WorkerLeft { worker: parma_core::WorkerId(1) }));
    assert_eq!(
        got.unwrap_err().to_string(),
        "worker 1 of this node was dropped without finalize, so no barrier can pass"
    );
    shutdown_all(c.nodes);
}

/// A barrier waits for a live worker that computes for longer than the request timeout (and
/// than the wait margin); with `barrier_timeout` set, it gives up with `BarrierTimeout`.
#[test]
fn a_barrier_waits_for_a_slow_live_worker_unless_told_otherwise() {
    let mut cfg = cfg(2, 1);
    cfg.request_timeout = parma_core::Duration(100_000);
    let mut opts = Options::default();
    opts.wait_margin = Duration::from_millis(100);
    let c = start(&cfg, opts.clone(), ThreadedOptions::default());
    let out = run_all(c.workers, |i, w| {
        if i == 1 {
            std::thread::sleep(Duration::from_millis(800));
        }
        w.barrier()
    });
    assert!(out.iter().all(|(_, r)| r.is_ok()), "{:?}", out.iter().map(|(_, r)| r).collect::<Vec<_>>());
    finalize_all(out.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);

    opts.barrier_timeout = Some(Duration::from_millis(100));
    let c = start(&cfg, opts, ThreadedOptions::default());
    let mut ws = c.workers;
    let alone = ws[0].barrier();
    assert_eq!(alone, Err(OpError::BarrierTimeout));
    assert!(alone.unwrap_err().to_string().contains("Options::barrier_timeout"));
    drop(ws);
    drop(c.nodes);
}
