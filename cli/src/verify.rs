//! `parma sim` and `parma conformance`: the simulator's seeds and the conformance suite, from
//! the command line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use parma_conformance::process::AgentCommand;
use parma_conformance::sim::{fingerprint, run_seed_gated};
use parma_conformance::suite;
use parma_core::{Gate, Technique};

/// What one technique's seeds did.
#[derive(Clone, Debug, Default)]
pub struct SimSummary {
    /// Seeds whose every check held.
    pub passed: u64,
    /// Seeds with a violation (printed with the seed that replays it).
    pub failed: u64,
    /// Seeds whose run in another process differed (only with the determinism check, see
    /// [`compare_with_process`]); a passing seed counted here is not counted as passed.
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
    /// Each seed's [`fingerprint`]: what another run of the seed must reproduce.
    pub fingerprints: BTreeMap<u64, String>,
}

/// Runs seeds `first..first + count` under each of `techniques` and the clock gate `gate` on
/// `threads` threads. Every violation is printed as it is found (with the seed that replays
/// it). Returns a summary per technique, with every seed's fingerprint.
pub fn sim(
    techniques: &[Technique],
    gate: Gate,
    first: u64,
    count: u64,
    threads: usize,
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
                    let result = run_seed_gated(seed, t, gate);
                    let print = fingerprint(seed, t, &result);
                    let mut sum = summary.lock().unwrap_or_else(|p| p.into_inner());
                    sum.fingerprints.insert(seed, print);
                    match result {
                        Ok(r) => {
                            sum.passed += 1;
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

/// The determinism check across processes: runs the same seeds under each technique of
/// `rows` in another process, `exe sim --fingerprints` (a fresh `parma` process: nothing
/// drawn once per process, such as a hash table's random seed, is shared with this one), and
/// compares every seed's fingerprint with the one in `rows`. Each seed that differs is
/// printed and counted in `nondeterministic` (and no longer as passed). Errs if the other
/// process could not be started or did not report every seed.
pub fn compare_with_process(
    exe: &Path,
    gate: Gate,
    first: u64,
    count: u64,
    threads: usize,
    rows: &mut [(Technique, SimSummary)],
) -> Result<(), String> {
    for (t, sum) in rows.iter_mut() {
        let out = Command::new(exe)
            .args(["sim", "--fingerprints", "--technique", t.name(), "--gate", &gate.name()])
            .args(["--first", &first.to_string(), "--seeds", &count.to_string()])
            .args(["--threads", &threads.to_string()])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs: BTreeMap<u64, &str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("fingerprint "))
            .filter_map(|f| {
                let mut words = f.split(' ');
                (words.next() == Some(t.name())).then_some(())?;
                Some((words.next()?.parse().ok()?, f))
            })
            .collect();
        if theirs.len() as u64 != count {
            return Err(format!(
                "the second process reported {} of {count} seeds of {}:\n{text}{}",
                theirs.len(),
                t.name(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for (seed, mine) in &sum.fingerprints {
            let other = theirs.get(seed).copied().unwrap_or("(none)");
            if other != mine {
                sum.nondeterministic += 1;
                if mine.contains(" passed ") {
                    sum.passed -= 1;
                }
                println!(
                    "seed {seed} ({}): its run in another process differs (not deterministic)\n  here:  \
                     {mine}\n  there: {other}\n  replay with --first {seed} --seeds 1 --technique {}",
                    t.name(),
                    t.name()
                );
            }
        }
    }
    Ok(())
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
/// Returns whether every trace passed or was skipped. `zmq-processes` starts this very
/// executable once per node (`parma conformance-agent`).
pub fn conformance(transports: &[String], dir: &Path, seeds: u64, rewrite: bool) -> Result<bool, String> {
    let mut ok = true;
    for t in transports {
        let results = if t == "zmq-processes" {
            let exe =
                std::env::current_exe().map_err(|e| format!("cannot find the parma executable: {e}"))?;
            suite::run_processes(dir, &AgentCommand::parma(exe), rewrite)?
        } else {
            crate::conformance_zmq::run_transport(t, dir, 0..seeds, rewrite)?
        };
        ok &= suite::all_passed(&results);
        println!("{}", suite::table(t, &results));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_seeds_pass_with_their_fingerprints() {
        let rows = sim(&[Technique::Adaptive, Technique::StaticPartitioning], Gate::Async, 1, 4, 2);
        for (t, r) in &rows {
            assert_eq!((r.passed, r.failed, r.nondeterministic), (4, 0, 0), "{t:?}");
            assert!(r.ops > 0);
            assert_eq!(r.fingerprints.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
            assert!(r.fingerprints[&2].starts_with(&format!("{} 2 passed ", t.name())));
        }
        assert!(sim_table(1, 4, &rows).contains("| adaptive | 4 | 0 | 0 |"));
    }
}
