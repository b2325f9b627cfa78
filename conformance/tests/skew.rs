//! The skewed workloads under every technique, small: facts that hold whatever the numbers.
//! Each run also checks every node's invariants after every simulation step, and at the end the
//! settled cluster's invariants and every key's value (inside `skew::run`).
#![forbid(unsafe_code)]

use parma_conformance::skew::{self, Kge, Mf, SkewOptions, SkewReport, Task};
use parma_core::Technique;

fn small(task: Task) -> SkewOptions {
    SkewOptions { steps: 40, ahead: 8, warmup_us: 3_000, seed: 11, check_every: 1, ..SkewOptions::new(task) }
}

fn kge() -> SkewOptions {
    small(Task::Kge(Kge { entities: 3_000, relations: 20, triples: 8, negatives: 8, ..Kge::default() }))
}

fn mf() -> SkewOptions {
    small(Task::Mf(Mf { rows: 1_600, cols: 400, cells: 16, ..Mf::default() }))
}

fn run_all(opts: &SkewOptions) -> Vec<SkewReport> {
    Technique::ALL.iter().map(|t| skew::run(opts, *t).unwrap_or_else(|e| panic!("{e}"))).collect()
}

fn check_structure(reports: &[SkewReport]) {
    let of = |t: Technique| reports.iter().find(|r| r.technique == t).unwrap();
    let table = skew::table(reports);
    // Every technique sees exactly the same accesses.
    assert!(
        reports.iter().all(|r| r.key_accesses == reports[0].key_accesses && r.key_accesses > 0),
        "{table}"
    );
    let s = of(Technique::StaticPartitioning);
    assert_eq!((s.relocations, s.replicas_created, s.sync_rounds), (0, 0, 0), "{table}");
    for t in [Technique::FullReplication, Technique::AdaptiveNoRelocation] {
        assert_eq!(of(t).relocations, 0, "{} relocated keys\n{table}", t.name());
    }
    assert_eq!(of(Technique::AdaptiveNoReplication).replicas_created, 0, "{table}");
    assert_eq!(of(Technique::Relocation).replicas_created, 0, "{table}");
    assert!(of(Technique::FullReplication).replicas_created > 0, "{table}");
    let a = of(Technique::Adaptive);
    assert!(a.remote_share() < s.remote_share(), "{table}");
    // Static partitioning serves locally only the keys homed on the accessing node.
    assert!(s.remote_share() > 0.5, "{table}");
}

#[test]
fn kge_every_technique() {
    check_structure(&run_all(&kge()));
}

#[test]
fn mf_every_technique() {
    check_structure(&run_all(&mf()));
}

#[test]
fn same_seed_same_figures() {
    let opts = SkewOptions { check_every: 0, ..kge() };
    for t in [Technique::Adaptive, Technique::Relocation] {
        assert_eq!(skew::run(&opts, t).unwrap(), skew::run(&opts, t).unwrap(), "{}", t.name());
    }
}

#[test]
fn sampled_negatives_under_every_technique() {
    use parma_conformance::skew::Negatives;
    use parma_core::Conformity;
    for t in Technique::ALL {
        let run =
            |negatives| skew::run(&SkewOptions { negatives, ..kge() }, t).unwrap_or_else(|e| panic!("{e}"));
        let off = run(Negatives::Off);
        let reports: Vec<SkewReport> = Conformity::ALL.iter().map(|c| run(Negatives::Sampled(*c))).collect();
        for (c, r) in Conformity::ALL.iter().zip(&reports) {
            let s = &r.sampling;
            assert_eq!(s.samples_pulled, 16 * 40 * 8, "{} {c:?}: every negative is drawn", t.name());
            assert!(r.key_accesses > off.key_accesses, "{} {c:?}", t.name());
            let pools = matches!(c, Conformity::Bounded | Conformity::LongTerm);
            assert_eq!(s.pools_drawn > 0, pools, "{} {c:?}: pools only for pool reuse", t.name());
            if *c == Conformity::NonConform {
                assert_eq!(s.samples_remote, 0, "{} {c:?}: local sampling drew a remote key", t.name());
            }
        }
    }
}

/// With one worker three times slower: without a gate the others' reads fall behind by many
/// clocks; SSP(s) keeps every read within s clocks and BSP within none, under every technique,
/// and the straggler's own pace bounds the loop's time under SSP.
#[test]
fn gates_bound_the_staleness_a_straggler_causes() {
    use parma_core::Gate;
    let base = SkewOptions { straggler: 3, check_every: 0, ..mf() };
    for t in Technique::ALL {
        let run =
            |gate| skew::run(&SkewOptions { gate, ..base.clone() }, t).unwrap_or_else(|e| panic!("{e}"));
        let free = run(Gate::Async);
        assert!(
            free.read_staleness_max > 3,
            "{}: async reads at most {} stale",
            t.name(),
            free.read_staleness_max
        );
        assert_eq!(free.gate_wait_us, 0);
        for s in [1, 3] {
            let r = run(Gate::Ssp { staleness: s });
            assert!(
                r.read_staleness_max <= u64::from(s),
                "{} ssp:{s}: {} stale",
                t.name(),
                r.read_staleness_max
            );
            assert!(r.gate_wait_us > 0);
            assert_eq!(r.key_accesses, free.key_accesses);
        }
        let bsp = run(Gate::Bsp);
        assert_eq!(bsp.read_staleness_max, 0, "{}", t.name());
        assert!(bsp.run_time_us >= free.run_time_us, "{}", t.name());
    }
}
