//! `parma sim` and `parma conformance`: the simulator's seeds and the conformance suite, from
//! the command line.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use parma_conformance::sim::run_seed;
use parma_conformance::suite;
use parma_core::Technique;

/// What one technique's seeds did.
#[derive(Clone, Debug, Default)]
pub struct SimSummary {
    /// Seeds whose every check held.
    pub passed: u64,
    /// Seeds with a violation (printed with the seed that replays it).
    pub failed: u64,
    /// Seeds that passed but whose second run differed (only with the determinism check).
    pub nondeterministic: u64,
    /// Worker operations completed, passing seeds.
    pub ops: u64,
    /// Keys moved, passing seeds.
    pub relocations: u64,
    /// Protocol messages sent, passing seeds.
    pub messages: u64,
    /// Passing seeds in which a node stopped for good.
    pub stopped: u64,
    /// Keys lost with those nodes (each accounted for by the checks).
    pub keys_lost: u64,
    /// Operations that ended with the error a stopped node explains (the end-of-run probe's
    /// included).
    pub ops_failed: u64,
    /// Wall time for all seeds of the technique.
    pub time: Duration,
}

/// Runs seeds `first..first + count` under each of `techniques` on `threads` threads. Every
/// violation is printed as it is found (with the seed that replays it); with `determinism`,
/// every passing seed runs a second time and must give the same trace hash. Returns a
/// summary per technique.
pub fn sim(
    techniques: &[Technique],
    first: u64,
    count: u64,
    threads: usize,
    determinism: bool,
) -> Vec<(Technique, SimSummary)> {
    let mut out = Vec::new();
    for &t in techniques {
        let start = Instant::now();
        let next = AtomicU64::new(first);
        let summary = Mutex::new(SimSummary::default());
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + count {
                        break;
                    }
                    let result = run_seed(seed, t);
                    let again = match (&result, determinism) {
                        (Ok(_), true) => Some(run_seed(seed, t)),
                        _ => None,
                    };
                    let mut sum = summary.lock().unwrap_or_else(|p| p.into_inner());
                    match result {
                        Ok(r) => {
                            let same = match &again {
                                Some(Ok(b)) => b.trace_hash == r.trace_hash && b.steps == r.steps,
                                Some(Err(_)) => false,
                                None => true,
                            };
                            if same {
                                sum.passed += 1;
                            } else {
                                sum.nondeterministic += 1;
                                println!(
                                    "seed {seed} ({}): a second run differs (not deterministic)\n  replay \
                                     with PARMA_SEED={seed}",
                                    t.name()
                                );
                            }
                            sum.ops += r.ops;
                            sum.relocations += r.relocations;
                            sum.messages += r.messages;
                            sum.stopped += u64::from(r.killed.is_some());
                            sum.keys_lost += r.keys_lost;
                            sum.ops_failed += r.ops_failed;
                        }
                        Err(f) => {
                            sum.failed += 1;
                            println!("{f}");
                        }
                    }
                });
            }
        });
        let mut summary = summary.into_inner().unwrap_or_else(|p| p.into_inner());
        summary.time = start.elapsed();
        out.push((t, summary));
    }
    out
}

/// A markdown table of [`sim`]'s summaries.
pub fn sim_table(first: u64, count: u64, rows: &[(Technique, SimSummary)]) -> String {
    let mut s = format!(
        "seeds {first}..{}\n\n| technique | passed | failed | not deterministic | operations | relocations | \
         messages | node stopped (keys lost, ops failed) | time |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        first + count
    );
    for (t, r) in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}, {}) | {:.1} s |",
            t.name(),
            r.passed,
            r.failed,
            r.nondeterministic,
            r.ops,
            r.relocations,
            r.messages,
            r.stopped,
            r.keys_lost,
            r.ops_failed,
            r.time.as_secs_f64()
        );
    }
    s
}

/// Runs the conformance suite in `dir` on each of `transports`; prints a table per transport.
/// Returns whether every trace passed or was skipped.
pub fn conformance(transports: &[String], dir: &Path, seeds: u64, rewrite: bool) -> Result<bool, String> {
    let mut ok = true;
    for t in transports {
        let results = suite::run_loopback(t, dir, 0..seeds, rewrite)?;
        ok &= suite::all_passed(&results);
        println!("{}", suite::table(t, &results));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_seeds_pass_and_are_deterministic() {
        let rows = sim(&[Technique::Adaptive, Technique::StaticPartitioning], 1, 4, 2, true);
        for (t, r) in &rows {
            assert_eq!((r.passed, r.failed, r.nondeterministic), (4, 0, 0), "{t:?}");
            assert!(r.ops > 0);
        }
        assert!(sim_table(1, 4, &rows).contains("| adaptive | 4 | 0 | 0 |"));
    }
}
