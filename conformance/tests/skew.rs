//! The skewed workloads under every technique, small: facts that hold whatever the numbers.
//! Each run also checks every node's invariants after every simulation step, and at the end the
//! settled cluster's invariants and every key's value (inside `skew::run`).

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
