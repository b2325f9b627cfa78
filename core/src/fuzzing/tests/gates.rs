//! `cluster_schedule` under clock gates: inputs for each gate, and the harness's own faults that
//! its gate checks must catch.

use super::*;

/// The header of a `cluster_schedule` input: three nodes (two if `two`) under `technique` (its
/// 3-bit field), two workers, room for every key, `gate`.
pub(super) fn gated_header(technique: u8, two: bool, gate: crate::Gate) -> [u8; 2] {
    let nodes = if two { 2 } else { 3 };
    let h0 = (0..32u8).find(|h| (h >> 2) & 7 == technique && 2 + h % 3 == nodes).unwrap();
    let h1 = (0..=255u8)
        .find(|h1| {
            let cfg = cluster::cluster_config(h0, *h1);
            cfg.gate == gate && cfg.workers_per_node == 2 && cfg.store_keys_max == cluster::KEYS as usize
        })
        .unwrap_or_else(|| panic!("no header for {gate:?}"));
    [h0, h1]
}

/// A clock step's parameter byte: node `n`, worker `w`, advance, and wait at the gate.
fn advance_and_wait(n: u8, w: u8) -> u8 {
    n | (w << 2) | 0x50
}

/// Three nodes of two workers in lockstep for four steps of two clocks: each worker adds to two
/// keys, advances, adds to two more, advances and waits at its gate, then the cluster delivers
/// and runs its timers a little and every worker pulls three keys (a worker still waiting does
/// nothing).
pub(super) fn lockstep(header: [u8; 2]) -> Vec<u8> {
    use cops::*;
    let mut v = header.to_vec();
    for r in 0..4u8 {
        for n in 0..3u8 {
            for w in 0..2u8 {
                let k = (n * 2 + w + r) % 8;
                v.extend_from_slice(&[PUSH, at(n, 2, r % 2 == 0) | (w << 2), k, k + 3, 0x09, 0x0a]);
                v.extend_from_slice(&[CLOCK, advance(n) | (w << 2)]);
                v.extend_from_slice(&[PUSH, at(n, 2, false) | (w << 2), k + 1, k + 5, 0x01, 0x08]);
                v.extend_from_slice(&[CLOCK, advance_and_wait(n, w)]);
            }
        }
        for q in 0..6u8 {
            v.extend_from_slice(&[BURST, q, 15]);
        }
        v.extend_from_slice(&[TIME, 0, 0x20, TIME, 1, 0x20, TIME, 2, 0x20]);
        for q in 0..6u8 {
            v.extend_from_slice(&[BURST, q, 15]);
        }
        for n in 0..3u8 {
            for w in 0..2u8 {
                v.extend_from_slice(&[PULL, at(n, 3, w == 0) | (w << 2), r, r + 2, r + 5]);
            }
        }
    }
    v
}

#[test]
fn cluster_schedule_gate_of_the_header() {
    use crate::Gate;
    // Every committed input from before the gates keeps running without one.
    for (name, bytes) in corpus("cluster_schedule").into_iter().filter(|(n, _)| !n.starts_with("gates-")) {
        let cfg = cluster::cluster_config(bytes[0], bytes[1]);
        assert_eq!(cfg.gate, Gate::Async, "{name}");
    }
    let gates: Vec<Gate> = (0..=255u8).map(cluster::gate_of).collect();
    let count = |g: Gate| gates.iter().filter(|x| **x == g).count();
    assert_eq!(count(Gate::Async), 96);
    for g in [
        Gate::Bsp,
        Gate::Ssp { staleness: 1 },
        Gate::Ssp { staleness: 2 },
        Gate::BoundedDelay { delay: 1 },
        Gate::SparseSsp { staleness: 1, speculation: 2 },
    ] {
        assert_eq!(count(g), 32, "{g:?}");
    }
}

/// Each gate under four techniques, in lockstep: the runs pass their checks, workers were held
/// at gates that wait, and under BSP and SSP reads were checked against the gate's bound.
#[test]
fn cluster_schedule_lockstep_under_each_gate() {
    use crate::Gate;
    let gates = [
        Gate::Async,
        Gate::Bsp,
        Gate::Ssp { staleness: 1 },
        Gate::Ssp { staleness: 2 },
        Gate::BoundedDelay { delay: 1 },
        Gate::SparseSsp { staleness: 1, speculation: 2 },
    ];
    // Relocation, adaptive, full replication, static partitioning.
    for technique in [0, 1, 4, 7] {
        for gate in gates {
            let data = lockstep(gated_header(technique, false, gate));
            let name = alloc::format!("lockstep, technique {technique}, {gate:?}");
            run_named(cluster_schedule, &name, &data);
            let tally = cluster::cluster_schedule_tally(&data, None);
            if gate == Gate::Async {
                assert_eq!(tally, cluster::GateTally::default(), "{name}");
            }
            if gate.staleness().is_some() {
                assert!(tally.checked > 0, "{name}: no read was checked against the gate: {tally:?}");
            }
            if gate == Gate::Bsp || matches!(gate, Gate::BoundedDelay { .. }) {
                assert!(tally.waited > 0, "{name}: no worker was held: {tally:?}");
            }
        }
    }
}

/// Under BSP, node 0's worker 0 adds to a key of node 1 at clock 0 while node 1's worker 0 moves
/// to clock 1 and waits: it may read the key only once the add is there and every other worker
/// reached clock 1. With the gate skipped, the same schedule reads the key too early, and the
/// read check says so.
fn bsp_read_after_remote_add() -> Vec<u8> {
    use cops::*;
    let header = gated_header(7, true, crate::Gate::Bsp);
    let cfg = cluster::cluster_config(header[0], header[1]);
    let homes = crate::placement::Homes::new(cfg.placement, cfg.nodes, cluster::KEYS);
    let k = (0..8u8).find(|k| homes.home(Key(u64::from(*k))) == NodeId(1)).unwrap();
    ops(&[
        &header,
        &[PUSH, at(0, 1, false), k, 0x09],
        &[CLOCK, advance_and_wait(1, 0)],
        &[PULL, at(1, 1, false), k],
        &[BURST, 0, 15, BURST, 0, 15],
        &[CLOCK, advance(0), CLOCK, advance(0) | 4, CLOCK, advance(1) | 4],
        &[BURST, 0, 15, BURST, 0, 15],
        &[PULL, at(1, 1, false), k],
    ])
}

#[test]
fn cluster_schedule_bsp_holds_a_read_until_the_add_is_in() {
    let data = bsp_read_after_remote_add();
    let tally = cluster::cluster_schedule_tally(&data, None);
    assert_eq!(tally, cluster::GateTally { waited: 1, checked: 1 });
}

#[test]
#[should_panic(
    expected = "by a pull issued after its worker passed the gate, below the [1.0, 1.0] added at clocks below 1"
)]
fn cluster_schedule_read_check_catches_a_skipped_gate() {
    cluster::cluster_schedule_tally(&bsp_read_after_remote_add(), Some(cluster::Mutation::SkipGates));
}

/// Node 1's worker moves to clock 1 and waits under BSP while node 0's stays at clock 0: only
/// node 0's worker retiring in the heal lets it pass. Without the retire it would wait for
/// ever, and the heal says so.
fn bsp_wait_for_a_retire() -> Vec<u8> {
    use cops::*;
    ops(&[&gated_header(7, true, crate::Gate::Bsp), &[CLOCK, advance_and_wait(1, 0)]])
}

#[test]
fn cluster_schedule_a_retire_releases_a_wait() {
    let tally = cluster::cluster_schedule_tally(&bsp_wait_for_a_retire(), None);
    assert_eq!(tally, cluster::GateTally { waited: 1, checked: 0 });
}

#[test]
#[should_panic(expected = "workers wait at their gates with nothing due (node 1 worker 0 at clock 1")]
fn cluster_schedule_heal_catches_a_wait_nothing_ends() {
    cluster::cluster_schedule_tally(&bsp_wait_for_a_retire(), Some(cluster::Mutation::SkipRetires));
}
