//! The conformance suite as a product: every trace file of a directory, run on one transport,
//! with that transport's list of skipped traces, ending in a pass/fail table.
//!
//! A skip list is a text file with one trace per line, `<trace name>: <reason>` (the name
//! without `.trace`); blank lines and lines starting with `#` are ignored. A skip without a
//! reason, or for a trace that does not exist, is an error: a skip list says why, and stays
//! true as traces come and go. The lists for the transports in this repository are in
//! `conformance/skip/<transport>.skip`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::trace::{run_trace, Executor, Setup};

/// Starts a fresh cluster for a trace's `cluster` command, or says why it could not.
pub type MakeExecutor<'a> = dyn FnMut(&Setup) -> Result<Box<dyn Executor>, String> + 'a;

/// How one trace ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every block produced its expected output.
    Pass,
    /// A block's output differed (the trace as it ran, with the actual outputs), or the trace
    /// could not run (why).
    Fail(String),
    /// Listed in the transport's skip list, with this reason.
    Skip(String),
}

/// One trace's result.
#[derive(Clone, Debug)]
pub struct TraceResult {
    /// The file name without `.trace`.
    pub name: String,
    pub outcome: Outcome,
}

/// The directory of the traces shipped with this crate.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces")
}

/// The skip list shipped for `transport` (empty if there is none).
pub fn default_skip_list(transport: &str) -> Result<Vec<(String, String)>, String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("skip").join(format!("{transport}.skip"));
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_skip_list(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The `.trace` files of `dir`, sorted by name.
pub fn trace_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for e in entries {
        let path = e.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.extension().is_some_and(|x| x == "trace") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn trace_name(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Parses a skip list: `(trace name, reason)` pairs.
pub fn parse_skip_list(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut skips = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) =
            line.split_once(':').ok_or_else(|| format!("line {}: expected `<trace>: <reason>`", n + 1))?;
        let (name, reason) = (name.trim(), reason.trim());
        if name.is_empty() || reason.is_empty() {
            return Err(format!("line {}: a skip needs a trace name and a reason", n + 1));
        }
        skips.push((name.to_string(), reason.to_string()));
    }
    Ok(skips)
}

/// Runs every trace of `dir` on executors from `make`, except the skipped ones. With
/// `rewrite`, a trace whose outputs differ is rewritten with the actual outputs (review the
/// diff) and still reported as failed.
pub fn run_suite(
    dir: &Path,
    skips: &[(String, String)],
    make: &mut MakeExecutor<'_>,
    rewrite: bool,
) -> Result<Vec<TraceResult>, String> {
    let files = trace_files(dir)?;
    let names: Vec<String> = files.iter().map(|p| trace_name(p)).collect();
    if let Some((unknown, _)) = skips.iter().find(|(s, _)| !names.contains(s)) {
        return Err(format!("the skip list names `{unknown}`, which is not a trace in {}", dir.display()));
    }
    let mut results = Vec::new();
    for (path, name) in files.iter().zip(names) {
        if let Some((_, reason)) = skips.iter().find(|(s, _)| *s == name) {
            results.push(TraceResult { name, outcome: Outcome::Skip(reason.clone()) });
            continue;
        }
        let outcome = match std::fs::read_to_string(path) {
            Err(e) => Outcome::Fail(format!("cannot read: {e}")),
            Ok(text) => run_one(&text, make, path, rewrite),
        };
        results.push(TraceResult { name, outcome });
    }
    Ok(results)
}

fn run_one(text: &str, make: &mut MakeExecutor<'_>, path: &Path, rewrite: bool) -> Outcome {
    // `run_trace` takes an infallible maker: remember a start-up error and report it.
    let mut start_error = None;
    let mut maker = |s: &Setup| -> Box<dyn Executor> {
        match make(s) {
            Ok(e) => e,
            Err(e) => {
                start_error = Some(e);
                Box::new(Unstarted(s.clone()))
            }
        }
    };
    let result = run_trace(text, &mut maker);
    if let Some(e) = start_error {
        return Outcome::Fail(format!("the cluster did not start: {e}"));
    }
    match result {
        Ok((_, true)) => Outcome::Pass,
        Ok((actual, false)) => {
            if rewrite {
                if let Err(e) = std::fs::write(path, &actual) {
                    return Outcome::Fail(format!("cannot rewrite: {e}"));
                }
            }
            Outcome::Fail(actual)
        }
        Err(e) => Outcome::Fail(e),
    }
}

/// Stands in for a cluster that did not start: every operation fails.
struct Unstarted(Setup);

impl Executor for Unstarted {
    fn setup(&self) -> &Setup {
        &self.0
    }
    fn pull(
        &mut self,
        _: parma_core::NodeId,
        _: parma_core::WorkerId,
        _: &[parma_core::Key],
    ) -> Result<(Vec<f32>, Vec<bool>), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn write(
        &mut self,
        _: parma_core::NodeId,
        _: parma_core::WorkerId,
        _: bool,
        _: &[parma_core::Key],
        _: &[f32],
    ) -> Result<(), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn localize(
        &mut self,
        _: parma_core::NodeId,
        _: parma_core::WorkerId,
        _: &[parma_core::Key],
    ) -> Result<(), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn owners(&mut self, _: parma_core::Key) -> Vec<parma_core::NodeId> {
        Vec::new()
    }
    fn replicas(&mut self, _: parma_core::Key) -> Vec<parma_core::NodeId> {
        Vec::new()
    }
    fn intent(
        &mut self,
        _: parma_core::NodeId,
        _: parma_core::WorkerId,
        _: &[parma_core::Key],
        _: parma_core::Clock,
        _: parma_core::Clock,
    ) -> Result<(), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn advance(
        &mut self,
        _: parma_core::NodeId,
        _: parma_core::WorkerId,
        _: u64,
    ) -> Result<parma_core::Clock, parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn wait_sync(
        &mut self,
        _: parma_core::NodeId,
        _: parma_core::WorkerId,
    ) -> Result<(), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn settle(&mut self) -> Result<(), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn concurrent_push(&mut self, _: &[parma_core::Key], _: u32, _: f32) -> Result<(), parma_core::OpError> {
        Err(parma_core::OpError::Closed)
    }
    fn gated_steps(&mut self, _: &crate::trace::GatedSteps) -> Result<Vec<f32>, String> {
        Err("the cluster did not start".into())
    }
    fn keys_forwarded(&mut self) -> u64 {
        0
    }
    fn barrier(&mut self) -> crate::trace::BarrierOut {
        Vec::new()
    }
    fn finish(&mut self) -> Result<(), String> {
        Err("the cluster did not start".into())
    }
}

/// The transports of this repository the suite runs on by name: nodes in this process on the
/// simulated network (one run per fault seed), on the threaded in-process transport, on the
/// threaded transport with one frame in flight per pair (every send meets back-pressure), and
/// on ZeroMQ over TCP on 127.0.0.1 (`zmq`: run by parma-cli, which names the ZeroMQ
/// transport; [`run_transport`] refuses it); and one process per node over ZeroMQ on
/// 127.0.0.1 (`zmq-processes`, see [`run_processes`]).
pub const TRANSPORTS: [&str; 5] = ["sim", "threaded", "threaded-1frame", "zmq", "zmq-processes"];

/// Runs the suite in `dir` with one agent process per node, each started with `agent`, over
/// ZeroMQ on 127.0.0.1, with the `zmq-processes` skip list.
pub fn run_processes(
    dir: &Path,
    agent: &crate::process::AgentCommand,
    rewrite: bool,
) -> Result<Vec<TraceResult>, String> {
    let skips = default_skip_list("zmq-processes")?;
    let mut make = |s: &Setup| -> Result<Box<dyn Executor>, String> {
        Ok(Box::new(crate::process::ProcessExecutor::start(s, agent)?))
    };
    run_suite(dir, &skips, &mut make, rewrite)
}

/// Runs the suite in `dir` on the transport called `transport` (see [`TRANSPORTS`]) with its
/// shipped skip list (every one but `zmq`, which parma-cli runs). On `sim`, each trace runs once per seed in `seeds` and passes if it
/// passed on all; a failure names the first failing seed. `zmq-processes` finds the `parma`
/// binary through `PARMA_BIN` ([`crate::process::AgentCommand::from_env`]).
pub fn run_transport(
    transport: &str,
    dir: &Path,
    seeds: std::ops::Range<u64>,
    rewrite: bool,
) -> Result<Vec<TraceResult>, String> {
    use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

    use crate::trace::{RuntimeExecutor, SimExecutor};

    let skips = default_skip_list(transport)?;
    match transport {
        "sim" => {
            let mut merged: Option<Vec<TraceResult>> = None;
            for seed in seeds {
                let mut make = |s: &Setup| -> Result<Box<dyn Executor>, String> {
                    Ok(Box::new(SimExecutor::new(s, seed)?))
                };
                let results = run_suite(dir, &skips, &mut make, rewrite)?;
                merged = Some(match merged {
                    None => results
                        .into_iter()
                        .map(|mut r| {
                            if let Outcome::Fail(f) = r.outcome {
                                r.outcome = Outcome::Fail(format!("(seed {seed})\n{f}"));
                            }
                            r
                        })
                        .collect(),
                    Some(mut m) => {
                        for (a, b) in m.iter_mut().zip(results) {
                            if a.outcome == Outcome::Pass {
                                if let Outcome::Fail(f) = b.outcome {
                                    a.outcome = Outcome::Fail(format!("(seed {seed})\n{f}"));
                                }
                            }
                        }
                        m
                    }
                });
            }
            merged.ok_or_else(|| "no seeds to run".to_string())
        }
        "threaded" | "threaded-1frame" => {
            let opts = if transport == "threaded" {
                ThreadedOptions::default()
            } else {
                ThreadedOptions::default().with_pair_frames_max(1)
            };
            let mut make = |s: &Setup| -> Result<Box<dyn Executor>, String> {
                let ends = cluster(s.nodes, opts);
                let Some(control) = ends.first().map(|e| e.controller()) else {
                    return Err("a cluster without nodes".into());
                };
                Ok(Box::new(RuntimeExecutor::new(s, ends)?.with_kill(move |n| control.kill(n))))
            };
            run_suite(dir, &skips, &mut make, rewrite)
        }
        "zmq" => Err("the `zmq` transport names parma-transport-zmq, which this crate does not: it runs in \
                      parma-cli (`parma_cli::conformance_zmq::run_transport`, `parma conformance`)"
            .into()),
        "zmq-processes" => run_processes(dir, &crate::process::AgentCommand::from_env()?, rewrite),
        other => Err(format!("unknown transport `{other}`; one of: {}", TRANSPORTS.join(", "))),
    }
}

/// Whether every trace passed or was skipped.
pub fn all_passed(results: &[TraceResult]) -> bool {
    results.iter().all(|r| !matches!(r.outcome, Outcome::Fail(_)))
}

/// A markdown table of `results` on `transport`, then the actual output of each failed trace.
pub fn table(transport: &str, results: &[TraceResult]) -> String {
    let mut out = format!("| trace | {transport} |\n| --- | --- |\n");
    for r in results {
        let cell = match &r.outcome {
            Outcome::Pass => "pass".to_string(),
            Outcome::Fail(_) => "**FAIL**".to_string(),
            Outcome::Skip(reason) => format!("skip: {reason}"),
        };
        let _ = writeln!(out, "| {} | {cell} |", r.name);
    }
    let (pass, fail, skip) = results.iter().fold((0, 0, 0), |(p, f, s), r| match r.outcome {
        Outcome::Pass => (p + 1, f, s),
        Outcome::Fail(_) => (p, f + 1, s),
        Outcome::Skip(_) => (p, f, s + 1),
    });
    let _ = writeln!(out, "\n{transport}: {pass} passed, {fail} failed, {skip} skipped");
    for r in results {
        if let Outcome::Fail(actual) = &r.outcome {
            let _ = write!(out, "\n--- {} on {transport}: got\n{actual}", r.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_lists_need_names_and_reasons() {
        let ok = parse_skip_list("# comment\n\nlocalize: needs explicit relocation\n").unwrap();
        assert_eq!(ok, vec![("localize".to_string(), "needs explicit relocation".to_string())]);
        assert!(parse_skip_list("localize").is_err());
        assert!(parse_skip_list("localize:   ").is_err());
        assert!(parse_skip_list(": reason").is_err());
    }

    #[test]
    fn shipped_skip_lists_parse() {
        for t in TRANSPORTS {
            default_skip_list(t).unwrap();
        }
    }
}
