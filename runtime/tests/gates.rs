//! Clock gates on whole clusters (threaded loopback): under BSP and SSP every read after
//! `advance_clock` sees every update old enough, whatever the technique, and no worker runs
//! further ahead of a straggler than its bound.
#![forbid(unsafe_code)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::{finalize_all, run_all, shutdown_all, start};
use parma_core::{Clock, Config, Gate, Key, Layout, Technique};
use parma_runtime::{Options, Worker};
use parma_transport_loopback::threaded::ThreadedOptions;

const KEYS: u64 = 12;
const CLOCKS: u64 = 12;
const NODES: u16 = 2;
const WORKERS: u16 = 2;

/// Every worker adds 1 to every key once per clock; worker 0 is slow. After each
/// `advance_clock` to clock c, a pull must show at least every add made at clocks below
/// c − s, and every other worker must have reached clock c − s.
fn gated(technique: Technique, gate: Gate) {
    let s = u64::from(gate.staleness().expect("a gate with a staleness bound"));
    let mut cfg = Config::new(NODES, WORKERS, Layout::uniform(KEYS, 1).unwrap());
    cfg.technique = technique;
    cfg.gate = gate;
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let total = u64::from(NODES * WORKERS);
    let clocks: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let keys: Vec<Key> = (0..KEYS).map(Key).collect();
    let done = run_all(c.workers, |i, w| {
        w.intent(&keys, Clock(0), Clock(CLOCKS + 1)).unwrap();
        let mut lowest_seen = u64::MAX;
        for clock in 0..CLOCKS {
            if i == 0 {
                std::thread::sleep(Duration::from_millis(3));
            }
            let t = w.push(&keys, &vec![1.0; KEYS as usize]).unwrap();
            w.wait(t).unwrap();
            clocks[i].store(clock + 1, SeqCst);
            let now = w.advance_clock().unwrap().0;
            assert_eq!(now, clock + 1);
            let need = now.saturating_sub(s);
            for (j, other) in clocks.iter().enumerate() {
                let at = other.load(SeqCst);
                assert!(at >= need, "{gate:?}: worker {i} passed clock {now} while worker {j} was at {at}");
            }
            let mut vals = vec![f32::NAN; KEYS as usize];
            w.pull(&keys, &mut vals).unwrap();
            for (k, v) in vals.iter().enumerate() {
                let want = need * total;
                assert!(
                    *v as u64 >= want,
                    "{} {gate:?}: worker {i} at clock {now} read {v} for key {k}, below the {want} adds of clocks < {need}",
                    technique.name()
                );
                lowest_seen = lowest_seen.min(*v as u64 - want);
            }
        }
        lowest_seen
    });
    let workers: Vec<Worker> = done.into_iter().map(|(w, _)| w).collect();
    finalize_all(workers);
    shutdown_all(c.nodes);
}

#[test]
fn bsp_holds_under_every_technique() {
    for t in Technique::ALL {
        gated(t, Gate::Bsp);
    }
}

#[test]
fn ssp_holds_under_every_technique() {
    for t in Technique::ALL {
        gated(t, Gate::Ssp { staleness: 2 });
    }
}

/// SparseSSP(0, 3): worker 0 is slow; each worker adds to its own key, and workers 0 and 1
/// also to a shared one, every key declared for every clock at the start (so from clock 3
/// on). A worker whose keys the slow one does not touch runs up to 3 clocks ahead of it; the
/// one that shares a key stays within SSP(0) of it, and every read of a declared key sees
/// every add of the clocks before.
fn sparse(technique: Technique) {
    let (s, p) = (0u64, 3u64);
    let gate = Gate::SparseSsp { staleness: s as u32, speculation: p as u32 };
    let total = u64::from(NODES * WORKERS);
    let shared = Key(total);
    let mut cfg = Config::new(NODES, WORKERS, Layout::uniform(total + 1, 1).unwrap());
    cfg.technique = technique;
    cfg.gate = gate;
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let clocks: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let done = run_all(c.workers, |i, w| {
        let mut keys = vec![Key(i as u64)];
        if i <= 1 {
            keys.push(shared);
        }
        w.intent(&keys, Clock(0), Clock(CLOCKS + 1)).unwrap();
        // Every worker's declaration is at its node before any worker runs: a worker whose
        // thread starts late would otherwise declare after the others passed clocks that its
        // updates, unknown to any node yet, could not hold back.
        w.barrier().unwrap();
        let mut lead_max = 0;
        for clock in 0..CLOCKS {
            if i == 0 {
                std::thread::sleep(Duration::from_millis(4));
            }
            let t = w.push(&keys, &vec![1.0; keys.len()]).unwrap();
            w.wait(t).unwrap();
            clocks[i].store(clock + 1, SeqCst);
            let now = w.advance_clock().unwrap().0;
            let slowest = clocks.iter().map(|c| c.load(SeqCst)).min().unwrap_or(0);
            let name = technique.name();
            assert!(
                slowest + s + p >= now,
                "{name}: worker {i} passed clock {now} with a worker at {slowest}"
            );
            if i == 1 && now >= p {
                let at = clocks[0].load(SeqCst);
                assert!(
                    at + s >= now,
                    "{name}: worker 1 passed clock {now} while worker 0, sharing a key, was at {at}"
                );
            }
            lead_max = lead_max.max(now - slowest);
            let mut vals = vec![f32::NAN; keys.len()];
            w.pull(&keys, &mut vals).unwrap();
            let need = if now >= p { now - s } else { now.saturating_sub(s + p) };
            let writers = keys.iter().map(|k| if *k == shared { 2 } else { 1 });
            for ((k, v), n) in keys.iter().zip(&vals).zip(writers) {
                assert!(
                    *v as u64 >= need * n,
                    "{name}: worker {i} at clock {now} read {v} for key {k}, below the adds of clocks < {need}"
                );
            }
        }
        lead_max
    });
    let lead = done.iter().map(|(_, l)| *l).max().unwrap_or(0);
    assert!(
        lead > s,
        "{}: no worker ever ran ahead of the bound s = {s} (largest lead {lead})",
        technique.name()
    );
    let workers: Vec<Worker> = done.into_iter().map(|(w, _)| w).collect();
    finalize_all(workers);
    shutdown_all(c.nodes);
}

#[test]
fn sparse_ssp_holds_under_every_technique() {
    for t in Technique::ALL {
        sparse(t);
    }
}
