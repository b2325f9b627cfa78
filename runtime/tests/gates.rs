//! Clock gates on whole clusters (threaded loopback): under BSP and SSP every read after
//! `advance_clock` sees every update old enough, whatever the technique, and no worker runs
//! further ahead of a straggler than its bound.

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
