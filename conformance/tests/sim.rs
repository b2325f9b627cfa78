//! The simulation: many seeds of random workloads with faults, every invariant after every step,
//! for every technique.
#![forbid(unsafe_code)]

use std::process::{Command, Stdio};

use parma_conformance::sim::{fingerprint, kill_plan, run_seed, run_seed_gated, seeds};
use parma_core::{Gate, Technique};

fn run_many(technique: Technique, count: u64) {
    let mut failures = Vec::new();
    let (mut ops, mut moves, mut samples) = (0, 0, 0);
    for seed in seeds(1, count) {
        match run_seed(seed, technique) {
            Ok(r) => {
                ops += r.ops;
                moves += r.relocations;
                samples += r.samples - r.samples_nothing_local;
            }
            Err(f) => failures.push(f.to_string()),
        }
    }
    assert!(failures.is_empty(), "{} failing seeds:\n{}", failures.len(), failures.join("\n"));
    assert!(samples > count, "sampling hardly ran: {samples} sample operations drew keys");
    eprintln!("{technique:?}: {ops} operations ({samples} samples), {moves} relocations");
}

#[test]
fn adaptive_1000_seeds() {
    run_many(Technique::Adaptive, 1000);
}

#[test]
fn adaptive_without_replication_1000_seeds() {
    run_many(Technique::AdaptiveNoReplication, 1000);
}

#[test]
fn adaptive_without_relocation_1000_seeds() {
    run_many(Technique::AdaptiveNoRelocation, 1000);
}

#[test]
fn full_replication_1000_seeds() {
    run_many(Technique::FullReplication, 1000);
}

#[test]
fn multi_technique_1000_seeds() {
    run_many(Technique::MultiTechnique, 1000);
}

#[test]
fn relocation_1000_seeds() {
    run_many(Technique::Relocation, 1000);
}

#[test]
fn static_partitioning_1000_seeds() {
    run_many(Technique::StaticPartitioning, 1000);
}

/// Every technique under `gate`, `count` seeds each: the gate's bound on every read (BSP,
/// SSP, SparseSSP), and no run stuck at a gate. `parma sim --gate` runs more (docs/verification.md).
fn gated(gate: Gate, count: u64) {
    let mut failures = Vec::new();
    for t in Technique::ALL {
        for seed in seeds(1, count) {
            if let Err(f) = run_seed_gated(seed, t, gate) {
                failures.push(f.to_string());
            }
        }
    }
    assert!(failures.is_empty(), "{} failing seeds:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn bsp_60_seeds_per_technique() {
    gated(Gate::Bsp, 60);
}

#[test]
fn ssp_60_seeds_per_technique() {
    gated(Gate::Ssp { staleness: 2 }, 60);
}

#[test]
fn bounded_delay_60_seeds_per_technique() {
    gated(Gate::BoundedDelay { delay: 1 }, 60);
}

#[test]
fn sparse_ssp_60_seeds_per_technique() {
    gated(Gate::SparseSsp { staleness: 1, speculation: 2 }, 60);
}

/// Set in the child processes of [`a_seed_replays_exactly_in_another_process`].
const CHILD: &str = "PARMA_DETERMINISM_CHILD";

/// The runs the cross-process check compares: under every technique, the first 16 seeds in
/// which a node stops for good (the others' requests then fail with `PeerFailed`, often
/// several at once) and the first 4 in which none does.
fn determinism_runs() -> Vec<(Technique, u64)> {
    let stops = |s: &u64| kill_plan(*s, 8, 1000).is_some();
    let stopping = (1..).filter(stops).take(16);
    let plain = (1..).filter(|s| !stops(s)).take(4);
    let seeds: Vec<u64> = stopping.chain(plain).collect();
    Technique::ALL.into_iter().flat_map(|t| seeds.iter().map(move |s| (t, *s))).collect()
}

/// DESIGN's promise, "the same seed replays it exactly", across processes: this test runs
/// itself twice as a child process (each a fresh process, with its own random seeds for
/// hash tables), each child prints a fingerprint of every run (`sim::fingerprint`: the
/// delivered frames, and every transmit, worker completion and peer failure in the order the
/// nodes gave them), and the two lists must be equal. Two runs in one process may share a
/// seed drawn once per process (or per thread); two processes share none.
#[test]
fn a_seed_replays_exactly_in_another_process() {
    let me = "a_seed_replays_exactly_in_another_process";
    if std::env::var_os(CHILD).is_some() {
        let mut failed_ops = 0;
        for (t, seed) in determinism_runs() {
            let r = run_seed(seed, t);
            failed_ops += r.as_ref().map_or(0, |r| r.ops_failed);
            println!("fingerprint {}", fingerprint(seed, t, &r));
        }
        // The check must cover operations that end with an error, where `pending` is walked.
        assert!(failed_ops > 0, "no operation failed: the runs do not cover peer failures");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let spawn = || {
        Command::new(&exe)
            .args(["--exact", me, "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the test binary")
    };
    let children = [spawn(), spawn()];
    let lists: Vec<Vec<String>> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("child output");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "child failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
            // With `--nocapture`, libtest may print its "test ... " on the first line too.
            text.lines().filter_map(|l| l.split_once("fingerprint ")).map(|(_, f)| f.to_owned()).collect()
        })
        .collect();
    assert_eq!(lists[0].len(), determinism_runs().len(), "a child skipped runs");
    let differ: Vec<String> = lists[0]
        .iter()
        .zip(&lists[1])
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  {a}\n  {b}"))
        .collect();
    assert!(differ.is_empty(), "{} runs differ between two processes:\n{}", differ.len(), differ.join("\n"));
}
