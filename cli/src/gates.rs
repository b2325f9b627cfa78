//! `parma gates`: the straggler experiment. The skewed workload of `parma techniques` on the
//! simulated cluster, with the first worker computing several times as long as the others,
//! under each clock gate: how long the training loop takes in virtual time, how long workers
//! wait at their gates, and how stale their reads are.

use std::fmt::Write as _;

use parma_conformance::skew::{self, SkewOptions, SkewReport};
use parma_core::{Gate, Technique};

/// One gate's run.
pub struct GateRow {
    /// The gate it ran under.
    pub gate: Gate,
    /// What it measured.
    pub report: SkewReport,
}

/// Runs each of `opts` under each technique and each gate, with the first worker `straggler`
/// times slower; returns the tables. `progress` hears of every run as it ends.
pub fn run(
    opts: &[SkewOptions],
    techniques: &[Technique],
    gates: &[Gate],
    straggler: u64,
    progress: &mut dyn FnMut(&SkewReport, Gate, std::time::Duration),
) -> Result<String, String> {
    let mut out = String::new();
    for o in opts {
        for &t in techniques {
            let mut rows = Vec::new();
            for &gate in gates {
                let began = std::time::Instant::now();
                let r = skew::run(&SkewOptions { gate, straggler, ..o.clone() }, t)?;
                progress(&r, gate, began.elapsed());
                rows.push(GateRow { gate, report: r });
            }
            let hiccups = if o.hiccups_per_mille > 0 {
                format!(
                    "; {} steps in a thousand of every worker take {}× as long",
                    o.hiccups_per_mille, o.hiccup_factor
                )
            } else {
                String::new()
            };
            let pace = if straggler > 1 {
                format!(
                    "worker 0 computes {straggler}× as long ({} µs per step, the others {} µs)",
                    o.compute_us * straggler,
                    o.compute_us
                )
            } else {
                format!("{} µs of compute per step", o.compute_us)
            };
            let _ = writeln!(
                out,
                "{} task, {}: {} nodes × {} workers, {} steps each, {pace}{hiccups}\n",
                o.task.name(),
                t.name(),
                o.nodes,
                o.workers,
                o.steps
            );
            out.push_str(&table(&rows, usize::from(o.nodes) * usize::from(o.workers)));
            out.push('\n');
        }
    }
    Ok(out)
}

/// The table of one task and technique, a row per gate; times relative to the first row.
pub fn table(rows: &[GateRow], workers: usize) -> String {
    let mut s = String::from(
        "| gate | training loop, virtual ms | vs first row | time at gates (share of workers' time) | read staleness, clocks: mean | max | remote accesses | messages |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let base = rows.first().map_or(1, |r| r.report.run_time_us.max(1));
    for r in rows {
        let p = &r.report;
        let share = p.gate_wait_us as f64 / (p.run_time_us.max(1) as f64 * workers.max(1) as f64);
        let stale = if p.reads == 0 { 0.0 } else { p.read_staleness_sum as f64 / p.reads as f64 };
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.2}× | {:.1} % | {:.2} | {} | {:.1} % | {} |",
            r.gate.name(),
            p.run_time_us as f64 / 1000.0,
            p.run_time_us as f64 / base as f64,
            100.0 * share,
            stale,
            p.read_staleness_max,
            100.0 * p.remote_accesses as f64 / p.key_accesses.max(1) as f64,
            p.messages_sent
        );
    }
    s
}
