//! `parma techniques`: the same skewed, training-like workload under every technique on the
//! deterministic simulated cluster, and a table of what each did (see
//! [`parma_conformance::skew`] for the workload).

use std::time::Instant;

use parma_conformance::skew::{self, SkewOptions, SkewReport};
use parma_core::Technique;

/// Runs `opts` under each of `techniques` and returns the report: for each task a heading with
/// the workload, the table (and with `details` where the bytes went) and the ratios. `progress` hears of every run as it ends (technique
/// and wall time), for a terminal.
pub fn run(
    opts: &[SkewOptions],
    techniques: &[Technique],
    details: bool,
    progress: &mut dyn FnMut(&SkewReport, std::time::Duration),
) -> Result<String, String> {
    let mut out = String::new();
    for o in opts {
        let mut reports = Vec::new();
        for &t in techniques {
            let began = Instant::now();
            let r = skew::run(o, t)?;
            progress(&r, began.elapsed());
            reports.push(r);
        }
        out.push_str(&heading(o));
        out.push('\n');
        out.push_str(&skew::table(&reports));
        if details {
            out.push('\n');
            out.push_str(&skew::details(&reports));
        }
        let ratios = skew::ratios(&reports);
        if !ratios.is_empty() {
            out.push('\n');
            out.push_str(&ratios);
        }
        out.push('\n');
    }
    Ok(out)
}

/// One paragraph describing the workload of `o`.
pub fn heading(o: &SkewOptions) -> String {
    let shape = match &o.task {
        skew::Task::Kge(k) => format!(
            "KGE-like: {} entities (Zipf {}) + {} relations (Zipf {}); batch of {} triples + {} uniform negatives",
            k.entities, k.entity_zipf, k.relations, k.relation_zipf, k.triples, k.negatives
        ),
        skew::Task::Mf(m) => format!(
            "MF-like: {} rows (each worker its own {}), {} columns (Zipf {}); batch of {} cells",
            m.rows,
            m.rows / (u64::from(o.nodes) * u64::from(o.workers)).max(1),
            m.cols,
            m.col_zipf,
            m.cells
        ),
    };
    let rounds = o.sync_rounds_per_sec_max.map_or("unlimited".to_string(), |r| r.to_string());
    format!(
        "### {}\n\n{shape}; {} nodes × {} workers, {} steps each, {} f32 per key, intents (or localize) \
         {} steps ahead, {} µs compute per step, {} µs network delay, sync rounds/s {rounds}, seed {}.\n",
        o.task.name(),
        o.nodes,
        o.workers,
        o.steps,
        o.len,
        o.ahead,
        o.compute_us,
        o.delay_us,
        o.seed
    )
}
