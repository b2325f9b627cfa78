//! The simulation: many seeds of random workloads with faults, every invariant after every step,
//! for every technique.

use parma_conformance::sim::{run_seed, seeds};
use parma_core::Technique;

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

#[test]
fn same_seed_same_trace() {
    for technique in [Technique::Relocation, Technique::Adaptive, Technique::MultiTechnique] {
        for seed in [3, 17, 99] {
            let a = run_seed(seed, technique).unwrap();
            let b = run_seed(seed, technique).unwrap();
            assert_eq!(a.trace_hash, b.trace_hash, "seed {seed} ({technique:?}) is not deterministic");
            assert_eq!(a.steps, b.steps);
        }
    }
}
