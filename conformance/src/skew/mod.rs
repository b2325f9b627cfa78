//! Skewed, training-like workloads on the simulated cluster, to compare the techniques on the
//! same accesses (adapm-cikm23.txt §5: remote accesses, communication and staleness).
//!
//! Every worker runs `steps` steps. A step pulls the keys of its batch, computes for
//! `compute_us` of virtual time (±10 %, from the seed), pushes an update (+1 in every element)
//! to the same keys without waiting for it, and advances the worker's clock. The batches come
//! from a [`Plan`] (KGE-like or MF-like, see [`plan`]) drawn up front from the seed, so every
//! technique sees exactly the same accesses. How a worker prepares its batches depends on the
//! technique:
//!
//! - the techniques with sync rounds: at step `t` the worker signals intent for the keys of step
//!   `t + ahead` (window `[t + ahead, t + ahead + 1)` of its clock);
//! - relocation (Lapse): at step `t` the worker localizes the keys of step `t + ahead`, without
//!   waiting for it;
//! - static partitioning: nothing.
//!
//! Before step 0 every worker signals (or localizes) its first `ahead` steps and waits
//! `warmup_us`; there are no key accesses in the warm-up, but everything sent in it counts. The
//! network is calm: every frame takes `delay_us`, no faults. A key access is local when the
//! node's store serves it on the spot (main copy or filled replica); otherwise it is remote.
//!
//! The figures are those of the training loop: from time zero until every worker has finished
//! its last step and every push has been applied. After that the cluster settles (see
//! [`crate::sim::settle`]), and the run checks the end state: the cluster's invariants, and
//! every key's value equals the number of pushes to it.

mod driver;
pub mod plan;

use std::fmt::Write as _;

use parma_core::{Conformity, Technique};

pub use plan::{Kge, Mf, Plan, Task, Zipf};

/// What a workload runs. [`SkewOptions::new`] gives the defaults of `parma techniques`.
#[derive(Clone, Debug, PartialEq)]
pub struct SkewOptions {
    pub task: Task,
    pub nodes: u16,
    /// Workers per node.
    pub workers: u16,
    /// Steps per worker.
    pub steps: u32,
    /// How many steps ahead workers signal intent (or localize).
    pub ahead: u32,
    /// `f32`s per key.
    pub len: u32,
    /// Virtual compute time of one step, in µs.
    pub compute_us: u64,
    /// One-way network delay of every frame, in µs.
    pub delay_us: u64,
    /// Virtual time between the first intents (or localizes) and step 0, in µs.
    pub warmup_us: u64,
    /// Most sync rounds per second a node starts (the same for every technique); `None`: back
    /// to back.
    pub sync_rounds_per_sec_max: Option<u32>,
    /// Seed of the plan, the nodes and the compute times.
    pub seed: u64,
    /// Check every node's invariants after every this many simulation steps (0: only at the
    /// end). Checking is O(keys), so only small runs check often.
    pub check_every: u64,
    /// Where the KGE task's negatives come from.
    pub negatives: Negatives,
    /// Pool size, use frequency and replacement of the sampling manager.
    pub sampling: parma_core::SamplingOptions,
    /// Where keys are homed.
    pub placement: parma_core::Placement,
    /// The clock gate: under any but `Async`, a worker waits at its gate after every step.
    pub gate: parma_core::Gate,
    /// The first worker computes this many times as long as the others (1: no straggler).
    pub straggler: u64,
    /// Transient stragglers: this many steps in a thousand, drawn per worker and step, take
    /// `hiccup_factor` times as long (0: none).
    pub hiccups_per_mille: u32,
    pub hiccup_factor: u64,
}

/// Where the negative entities of the KGE task come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Negatives {
    /// Drawn by the application, part of the plan's batches: accessed like the other keys
    /// (with intent ahead of time).
    #[default]
    Plan,
    /// None: the batches hold only the triples' keys (the baseline that the figures of
    /// sampling are measured against).
    Off,
    /// Drawn by the sampling manager under this conformity level, uniform over the entities:
    /// prepared `ahead` steps before the step that pulls them (the keys become the worker's
    /// intent for that step), pulled with the step's keys, pushed with them.
    Sampled(Conformity),
}

impl Negatives {
    /// The name in reports.
    pub fn name(self) -> String {
        match self {
            Negatives::Plan => "application".into(),
            Negatives::Off => "none".into(),
            Negatives::Sampled(c) => c.name().into(),
        }
    }
}

impl SkewOptions {
    /// The defaults for `task`: 8 nodes × 2 workers, 500 steps, intents 16 steps ahead, 16
    /// floats per key, 500 µs of compute per step, 100 µs network delay, 1,000 sync rounds per
    /// second at most.
    pub fn new(task: Task) -> SkewOptions {
        SkewOptions {
            task,
            nodes: 8,
            workers: 2,
            steps: 500,
            ahead: 16,
            len: 16,
            compute_us: 500,
            delay_us: 100,
            warmup_us: 5_000,
            sync_rounds_per_sec_max: Some(1_000),
            seed: 1,
            check_every: 0,
            negatives: Negatives::Plan,
            sampling: parma_core::SamplingOptions::default(),
            placement: parma_core::Placement::default(),
            gate: parma_core::Gate::Async,
            straggler: 1,
            hiccups_per_mille: 0,
            hiccup_factor: 1,
        }
    }

    /// Checks that the options describe a workload that can run.
    pub fn check(&self) -> Result<(), String> {
        let zipf_ok = |s: f64| s.is_finite() && s >= 0.0;
        let shape_ok = match &self.task {
            Task::Kge(k) => {
                k.entities >= 1
                    && k.relations >= 1
                    && k.triples + k.negatives >= 1
                    && zipf_ok(k.entity_zipf)
                    && zipf_ok(k.relation_zipf)
            }
            Task::Mf(m) => {
                m.rows >= u64::from(self.nodes) * u64::from(self.workers)
                    && m.cols >= 1
                    && m.cells >= 1
                    && zipf_ok(m.col_zipf)
            }
        };
        if !shape_ok {
            return Err(format!(
                "the {} task's shape is empty or invalid: {:?}",
                self.task.name(),
                self.task
            ));
        }
        if self.nodes == 0 || self.workers == 0 || self.steps == 0 || self.len == 0 {
            return Err("nodes, workers, steps and len must be at least 1".into());
        }
        if self.straggler == 0 || self.straggler > 1000 {
            return Err(format!("the straggler's slowdown must be 1 to 1000, not {}", self.straggler));
        }
        if self.hiccups_per_mille > 1000 || self.hiccup_factor == 0 || self.hiccup_factor > 1000 {
            return Err(format!(
                "hiccups are 0 to 1000 steps in a thousand, each 1 to 1000 times as long, not {} and {}",
                self.hiccups_per_mille, self.hiccup_factor
            ));
        }
        if self.task.keys() > 1 << 27 {
            return Err("at most 2^27 keys".into());
        }
        Ok(())
    }
}

/// The workload of `base` (sized for `base.nodes` nodes) on `nodes` nodes with the same work
/// per node (weak scaling): the same workers per node, steps, batches and options, and a key
/// space scaled by `nodes / base.nodes` so that every node's share of the keys stays the
/// same. KGE: the entities scale and the relations do not (a graph's relation vocabulary does
/// not grow with its entities, and 200 relations are a few hot keys at any size). MF: rows
/// and columns scale (each worker keeps its number of rows).
pub fn weak_scaled(base: &SkewOptions, nodes: u16) -> Result<SkewOptions, String> {
    if nodes == 0 || nodes > parma_core::config::NODES_MAX || base.nodes == 0 {
        return Err(format!(
            "a cluster has 1 to {} nodes, not {nodes} (scaled from {})",
            parma_core::config::NODES_MAX,
            base.nodes
        ));
    }
    let scale = |n: u64| -> Result<u64, String> {
        let scaled = u128::from(n) * u128::from(nodes) / u128::from(base.nodes);
        u64::try_from(scaled).ok().filter(|s| *s >= 1).ok_or_else(|| {
            format!("{n} keys scaled from {} to {nodes} nodes leave none (or too many)", base.nodes)
        })
    };
    let task = match &base.task {
        Task::Kge(k) => Task::Kge(Kge { entities: scale(k.entities)?, ..k.clone() }),
        Task::Mf(m) => Task::Mf(Mf { rows: scale(m.rows)?, cols: scale(m.cols)?, ..m.clone() }),
    };
    let o = SkewOptions { task, nodes, ..base.clone() };
    o.check()?;
    Ok(o)
}

/// What a run under one technique measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SkewReport {
    pub task: &'static str,
    pub technique: Technique,
    /// Keys of the model.
    pub keys: u64,
    /// Keys of all pulls and pushes of the training loop.
    pub key_accesses: u64,
    /// Those not served on the spot from the node's store.
    pub remote_accesses: u64,
    /// Of which pulls.
    pub remote_pulls: u64,
    /// Bytes and messages sent by all nodes.
    pub bytes_sent: u64,
    pub messages_sent: u64,
    /// Bytes sent by all nodes, by wire kind (index: `parma_core::wire::Kind as usize`; one
    /// entry per kind `Stats::bytes_sent` counts).
    pub bytes_by_kind: Vec<u64>,
    /// Keys moved between nodes (arrivals).
    pub relocations: u64,
    /// Replicas created (filled), over all nodes.
    pub replicas_created: u64,
    /// Replica refreshes owners sent (a value each), and replica deltas holders sent.
    pub refreshes_sent: u64,
    pub deltas_sent: u64,
    /// Keys of requests and sync entries forwarded by a node that did not hold them.
    pub keys_forwarded: u64,
    /// Replica staleness, sampled for every replica at the start of every round: mean and
    /// maximum in µs, and the number of samples.
    pub staleness_mean_us: f64,
    pub staleness_max_us: u64,
    pub staleness_samples: u64,
    /// Sync rounds run, over all nodes.
    pub sync_rounds: u64,
    /// Virtual time of the training loop, warm-up included, in µs.
    pub run_time_us: u64,
    /// Virtual time workers spent waiting at their clock gates, summed over the workers, in µs.
    pub gate_wait_us: u64,
    /// Staleness of the step's reads, in clocks: for a read at clock c of a key whose value
    /// holds every push to it issued at a clock below t (and not all of those of clock t), c − t
    /// (0 when t ≥ c). Summed over every key of every step's pull, with the count and maximum.
    pub read_staleness_sum: u64,
    pub read_staleness_max: u64,
    pub reads: u64,
    /// Simulation steps the training loop took.
    pub sim_steps: u64,
    /// Where the negatives came from.
    pub negatives: Negatives,
    /// Accesses (a pull and a push per step) to keys that only the sampling manager drew in
    /// their step, and those of them that were not local.
    pub sampled_accesses: u64,
    pub sampled_remote: u64,
    /// The workers' sampler counters, summed.
    pub sampling: parma_core::sampling::SamplingStats,
    /// Each of the nodes' tables at its largest: the high-water mark over the nodes, sampled
    /// every virtual millisecond of the training loop and at its end.
    pub tables_max: parma_core::Tables,
    /// Most frames in flight on the simulated network at once (sampled with the tables).
    pub in_flight_max: usize,
}

impl SkewReport {
    /// Remote accesses over all accesses (0 without accesses).
    pub fn remote_share(&self) -> f64 {
        ratio(self.remote_accesses, self.key_accesses)
    }
    /// Bytes sent per key access.
    pub fn bytes_per_access(&self) -> f64 {
        ratio(self.bytes_sent, self.key_accesses)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Runs the workload of `opts` under `technique` and checks the end state.
pub fn run(opts: &SkewOptions, technique: Technique) -> Result<SkewReport, String> {
    opts.check()?;
    driver::run(opts, technique).map_err(|e| format!("{} under {}: {e}", opts.task.name(), technique.name()))
}

/// A markdown table of `reports` (one row each).
pub fn table(reports: &[SkewReport]) -> String {
    let mut out = String::from(
        "| technique | remote accesses | remote share | bytes sent | bytes / access | messages \
         | relocations | replicas created | staleness mean / max | virtual time |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in reports {
        let staleness = if r.staleness_samples == 0 {
            "–".to_string()
        } else {
            format!("{:.2} / {:.1} ms", r.staleness_mean_us / 1000.0, r.staleness_max_us as f64 / 1000.0)
        };
        let _ = writeln!(
            out,
            "| {} | {} of {} | {} | {} | {:.1} | {} | {} | {} | {} | {:.0} ms |",
            r.technique.name(),
            thousands(r.remote_accesses),
            thousands(r.key_accesses),
            percent(r.remote_share()),
            megabytes(r.bytes_sent),
            r.bytes_per_access(),
            thousands(r.messages_sent),
            thousands(r.relocations),
            thousands(r.replicas_created),
            staleness,
            r.run_time_us as f64 / 1000.0,
        );
    }
    out
}

/// Where the bytes went: MB sent by message kind (the kinds sent at all), then the counters of
/// replica and routing work, one row per report.
pub fn details(reports: &[SkewReport]) -> String {
    const NAMES: [&str; 14] = [
        "?",
        "pull",
        "pull reply",
        "push",
        "push reply",
        "localize",
        "relocate",
        "owner update",
        "pointer release",
        "request failed",
        "barrier enter",
        "barrier release",
        "sync",
        "sync reply",
    ];
    let used: Vec<usize> = (0..NAMES.len())
        .filter(|k| reports.iter().any(|r| r.bytes_by_kind.get(*k).is_some_and(|b| *b > 0)))
        .collect();
    let mut out = String::from("MB sent by message kind:\n\n| technique |");
    for k in &used {
        let _ = write!(out, " {} |", NAMES[*k]);
    }
    out.push_str("\n| --- |");
    out.push_str(&" --- |".repeat(used.len()));
    out.push('\n');
    for r in reports {
        let _ = write!(out, "| {} |", r.technique.name());
        for k in &used {
            let _ = write!(out, " {:.1} |", r.bytes_by_kind.get(*k).copied().unwrap_or(0) as f64 / 1e6);
        }
        out.push('\n');
    }
    out.push_str(
        "\nReplica and routing work:\n\n| technique | replica refreshes | replica deltas | keys forwarded |\n\
         | --- | --- | --- | --- |\n",
    );
    for r in reports {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            r.technique.name(),
            thousands(r.refreshes_sent),
            thousands(r.deltas_sent),
            thousands(r.keys_forwarded)
        );
    }
    out
}

/// The ratios the papers state expectations for: bytes of adaptive over the other techniques,
/// and remote share of adaptive. Lines for techniques missing from `reports` are left out.
pub fn ratios(reports: &[SkewReport]) -> String {
    let find = |t: Technique| reports.iter().find(|r| r.technique == t);
    let Some(a) = find(Technique::Adaptive) else { return String::new() };
    let mut out = String::new();
    for t in [Technique::AdaptiveNoRelocation, Technique::StaticPartitioning, Technique::FullReplication] {
        if let Some(o) = find(t) {
            let _ = writeln!(
                out,
                "bytes(adaptive) / bytes({}) = {:.3}",
                t.name(),
                ratio(a.bytes_sent, o.bytes_sent)
            );
        }
    }
    let _ = writeln!(out, "remote share (adaptive) = {}", percent(a.remote_share()));
    out
}

/// `x` (a share) as a percentage with enough digits for tiny shares.
fn percent(x: f64) -> String {
    let p = 100.0 * x;
    if p == 0.0 {
        "0 %".into()
    } else if p >= 0.1 {
        format!("{p:.1} %")
    } else {
        format!("{p:.2e} %")
    }
}

fn megabytes(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// `n` with thousands separators.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(0.125), "12.5 %");
        assert_eq!(percent(0.000_001), "1.00e-4 %");
    }
}
