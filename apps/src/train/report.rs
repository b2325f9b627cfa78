//! What a training run reports: one [`EpochRecord`] per epoch (the lines of `--metrics`), a
//! [`RunReport`] per run, and the summary table over runs.

use std::io::Write;

use serde::Serialize;

use super::eval::Ranking;

/// One epoch of one run; `--metrics` writes one per line as JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EpochRecord {
    /// The task (`kge`).
    pub task: &'static str,
    /// The data set.
    pub data: String,
    /// The model.
    pub model: &'static str,
    /// `parma` or `hogwild`.
    pub engine: &'static str,
    /// parma's technique (`-` for the baseline).
    pub technique: &'static str,
    /// Nodes.
    pub nodes: u16,
    /// Workers per node.
    pub workers: u16,
    /// The epoch, from 1.
    pub epoch: u32,
    /// This epoch's training time, in seconds (evaluation excluded).
    pub epoch_secs: f64,
    /// Training time so far, in seconds (evaluation excluded).
    pub train_secs: f64,
    /// Training examples per second in this epoch.
    pub examples_per_sec: f64,
    /// Mean loss per training example in this epoch.
    pub loss: f64,
    /// Filtered ranking on the validation split, if evaluated after this epoch.
    pub valid: Option<Ranking>,
    /// Filtered ranking on the test split, after the last epoch.
    pub test: Option<Ranking>,
}

/// What one run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// Every epoch.
    pub epochs: Vec<EpochRecord>,
    /// Setup time (cluster start, initialization), in seconds.
    pub setup_secs: f64,
    /// Time spent evaluating, in seconds.
    pub eval_secs: f64,
    /// Key accesses (pulls and pushes, all workers) served locally.
    pub accesses_local: u64,
    /// Key accesses that went remote.
    pub accesses_remote: u64,
    /// Bytes the nodes sent.
    pub bytes_sent: u64,
    /// FNV-1a hash of the bits of every parameter after training: equal hashes, equal models.
    pub checksum: u64,
    /// Steps whose negatives local sampling could not draw because no entity was local; they
    /// were drawn uniformly by the worker instead and pulled remotely.
    pub negative_fallbacks: u64,
}

impl RunReport {
    /// The last epoch's record.
    pub fn last(&self) -> &EpochRecord {
        self.epochs.last().expect("a run has at least one epoch")
    }

    /// Mean epoch time in seconds.
    pub fn mean_epoch_secs(&self) -> f64 {
        self.epochs.iter().map(|e| e.epoch_secs).sum::<f64>() / self.epochs.len() as f64
    }

    /// Median epoch time in seconds (less sensitive to a neighbour's burst on a shared machine).
    pub fn median_epoch_secs(&self) -> f64 {
        let mut t: Vec<f64> = self.epochs.iter().map(|e| e.epoch_secs).collect();
        t.sort_by(f64::total_cmp);
        let n = t.len();
        if n % 2 == 1 {
            t[n / 2]
        } else {
            (t[n / 2 - 1] + t[n / 2]) / 2.0
        }
    }

    /// Share of key accesses that were remote.
    pub fn remote_share(&self) -> f64 {
        let all = self.accesses_local + self.accesses_remote;
        if all == 0 {
            0.0
        } else {
            self.accesses_remote as f64 / all as f64
        }
    }

    /// Writes one JSON line per epoch.
    pub fn write_jsonl(&self, out: &mut dyn Write) -> std::io::Result<()> {
        for e in &self.epochs {
            serde_json::to_writer(&mut *out, e)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

fn fmt_rank(r: Option<Ranking>) -> String {
    r.map_or("-".into(), |r| format!("{:.3} | {:.3} | {:.3} | {:.3}", r.mrr, r.hits1, r.hits3, r.hits10))
}

/// A markdown table of runs on the same data, with each run's median epoch time over the
/// first run's.
pub fn summary(reports: &[RunReport]) -> String {
    let mut out = String::from(
        "| engine | technique | nodes x workers | valid MRR | test MRR | H@1 | H@3 | H@10 | epoch (median) | \
         vs first | examples/s | remote share | bytes sent |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let base = reports.first().map(RunReport::median_epoch_secs);
    for r in reports {
        let l = r.last();
        let median = r.median_epoch_secs();
        let examples: f64 = r.epochs.iter().map(|e| e.examples_per_sec * e.epoch_secs).sum();
        let train: f64 = r.epochs.iter().map(|e| e.epoch_secs).sum();
        out.push_str(&format!(
            "| {} | {} | {} x {} | {} | {} | {:.4} s | {} | {:.0} | {:.2}% | {} |\n",
            l.engine,
            l.technique,
            l.nodes,
            l.workers,
            l.valid.map_or("-".into(), |v| format!("{:.3}", v.mrr)),
            fmt_rank(l.test),
            median,
            base.filter(|b| *b > 0.0).map_or("-".into(), |b| format!("{:.3}x", median / b)),
            examples / train.max(1e-9),
            100.0 * r.remote_share(),
            r.bytes_sent,
        ));
    }
    out
}
