//! `parma sampling`: the KGE-like workload of `parma techniques` with its negatives drawn by
//! the sampling manager under each conformity level, against the same workload without
//! negatives, on the deterministic simulated cluster; a table of what sampling cost.
//!
//! "Due to sampling" is measured, not estimated: bytes sent with the negatives minus bytes sent
//! by the same run (same seed, same triples) without them. Remote accesses due to sampling are
//! the accesses (a pull and a push per step) to keys only the sampling manager drew in their
//! step that the node's store could not serve on the spot.

use std::fmt::Write as _;
use std::time::Instant;

use parma_conformance::skew::{self, Negatives, SkewOptions, SkewReport};
use parma_core::{Conformity, Technique};

/// Runs `opts` (a KGE task) under `technique`: without negatives, with the application's own
/// uniform negatives, and with negatives sampled under each level. Returns the report.
pub fn run(
    opts: &SkewOptions,
    technique: Technique,
    details: bool,
    progress: &mut dyn FnMut(&SkewReport, std::time::Duration),
) -> Result<String, String> {
    let mut kinds = vec![Negatives::Off, Negatives::Plan];
    kinds.extend(Conformity::ALL.into_iter().map(Negatives::Sampled));
    let mut reports = Vec::new();
    for negatives in kinds {
        let began = Instant::now();
        let r = skew::run(&SkewOptions { negatives, ..opts.clone() }, technique)?;
        progress(&r, began.elapsed());
        reports.push(r);
    }
    let mut out = crate::techniques::heading(opts);
    let o = opts.sampling;
    let _ = writeln!(
        out,
        "\nTechnique {}; sampling pool size G = {}, use frequency U = {}, with replacement: {}.\n",
        technique.name(),
        o.pool_size,
        o.reuse,
        o.with_replacement
    );
    out.push_str(&table(&reports));
    if details {
        out.push_str("\nRows in the order of the table above.\n\n");
        out.push_str(&skew::details(&reports));
    }
    Ok(out)
}

/// One row per run; bytes and ratios against the first run (no negatives) and against
/// independent sampling (CONFORM).
pub fn table(reports: &[SkewReport]) -> String {
    let base = reports.iter().find(|r| r.negatives == Negatives::Off).map_or(0, |r| r.bytes_sent);
    let due = |r: &SkewReport| r.bytes_sent.saturating_sub(base);
    let conform = reports.iter().find(|r| r.negatives == Negatives::Sampled(Conformity::Conform)).map(due);
    let mut out = String::from(
        "| negatives | scheme | sampled-key accesses | of which remote | bytes sent | bytes due to negatives \
         | independent / this | relocations | replicas created | pools drawn | postponed | virtual time |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in reports {
        let scheme = match r.negatives {
            Negatives::Sampled(c) => format!("{:?}", c.scheme()),
            Negatives::Plan => "drawn by the application, made local ahead".into(),
            _ => "–".into(),
        };
        let vs = match (conform, r.negatives) {
            (Some(c), Negatives::Sampled(_)) if due(r) > 0 => format!("{:.1}×", c as f64 / due(r) as f64),
            (Some(_), Negatives::Sampled(_)) => "∞".into(),
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {scheme} | {} | {} | {:.2} MB | {:.2} MB | {vs} | {} | {} | {} | {} | {:.0} ms |",
            r.negatives.name(),
            r.sampled_accesses,
            r.sampled_remote,
            r.bytes_sent as f64 / 1e6,
            due(r) as f64 / 1e6,
            r.relocations,
            r.replicas_created,
            r.sampling.pools_drawn,
            r.sampling.samples_postponed,
            r.run_time_us as f64 / 1000.0,
        );
    }
    out
}
