//! What a training run reports: one [`EpochRecord`] per epoch (the lines of `--metrics`,
//! appended to a [`MetricsFile`] as each epoch ends), a [`RunReport`] per run, and the summary
//! table over runs.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::task::{figure, Quality};

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
    /// Quality on the validation split, if evaluated after this epoch.
    pub valid: Option<Quality>,
    /// Quality on the test split, after the last epoch.
    pub test: Option<Quality>,
}

/// `--metrics FILE`: every epoch's record is appended as one JSON line when the epoch ends,
/// written through to the file at once (the process keeps no buffer), so a run that dies
/// leaves every epoch it finished. Clones append to the same file (the runs of `--compare`).
#[derive(Clone)]
pub struct MetricsFile {
    path: PathBuf,
    /// The open file; `None` until the first record when opened lazily.
    file: Arc<Mutex<Option<File>>>,
}

impl MetricsFile {
    /// Creates (or truncates) `path` now.
    pub fn create(path: &Path) -> std::io::Result<MetricsFile> {
        let file = File::create(path)?;
        Ok(MetricsFile { path: path.to_path_buf(), file: Arc::new(Mutex::new(Some(file))) })
    }

    /// Creates (or truncates) `path` when the first record is appended: for a process of a
    /// cluster, of which only the one that evaluates writes records.
    pub fn lazy(path: &Path) -> MetricsFile {
        MetricsFile { path: path.to_path_buf(), file: Arc::new(Mutex::new(None)) }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `rec` as one line.
    pub fn append(&self, rec: &EpochRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(rec)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if file.is_none() {
            *file = Some(File::create(&self.path)?);
        }
        let f = file.as_mut().expect("opened above");
        f.write_all(&line)?;
        f.flush()
    }
}

impl std::fmt::Debug for MetricsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetricsFile({})", self.path.display())
    }
}

/// Two handles are equal when they append to the same open file.
impl PartialEq for MetricsFile {
    fn eq(&self, other: &MetricsFile) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
    }
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// CPU time of the whole process (every thread: workers, node drivers, transport) from
    /// starting the training threads to joining them, in seconds, if the platform tells it
    /// (Linux `/proc/self/stat`, 10 ms ticks). Less sensitive than wall time to other
    /// programs on a shared machine.
    pub cpu_secs: Option<f64>,
    /// Under `parma node`, this process's node: the accesses, bytes and CPU time above are
    /// its own. `None`: every node ran in this process.
    pub node: Option<u16>,
    /// What this process's nodes did, for the steps its threads took (parma only).
    pub counters: NodeCounters,
}

/// What a run's nodes (this process's) did, added up: the parts of a step's cost that are
/// the parameter manager's, to be read per step ([`NodeCounters::per_step`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Training steps this process's threads took.
    pub steps: u64,
    /// Sync rounds the nodes ran.
    pub sync_rounds: u64,
    /// Frames the nodes' drivers handed to the transport, and took from it.
    pub frames_sent: u64,
    /// Frames taken from the transport.
    pub frames_received: u64,
    /// Worker commands the drivers handed to the nodes.
    pub commands: u64,
    /// Times a driver went to sleep for lack of work (each sleep ends in a wake-up).
    pub driver_sleeps: u64,
    /// Replica deltas sent to owners.
    pub deltas_sent: u64,
    /// Keys of pulls and pushes that went to the node (not local when the worker asked).
    pub keys_remote: u64,
    /// Commands that waited for room in a full command queue.
    pub commands_waited: u64,
}

impl NodeCounters {
    /// One line: each counter divided by the steps.
    pub fn per_step(&self) -> String {
        let s = self.steps.max(1) as f64;
        let f = |n: u64| n as f64 / s;
        format!(
            "per step: {:.3} sync rounds, {:.3} frames sent, {:.3} received, {:.3} worker commands \
             ({:.4} waited for room), {:.3} driver sleeps, {:.3} replica deltas, {:.4} remote keys",
            f(self.sync_rounds),
            f(self.frames_sent),
            f(self.frames_received),
            f(self.commands),
            f(self.commands_waited),
            f(self.driver_sleeps),
            f(self.deltas_sent),
            f(self.keys_remote),
        )
    }
}

/// The CPU time (user + system) this process used so far, in seconds, where `/proc/self/stat`
/// exists (Linux). Assumes the usual 100 ticks per second.
pub fn process_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are
    // plain. utime and stime are fields 14 and 15, i.e. the 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
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

/// The test columns: MRR and Hits@1/3/10 for a ranking, RMSE for ratings.
fn fmt_test(q: Option<Quality>, ranking: bool) -> String {
    match (q, ranking) {
        (Some(Quality::Ranking(r)), _) => {
            format!("{:.3} | {:.3} | {:.3} | {:.3}", r.mrr, r.hits1, r.hits3, r.hits10)
        }
        (Some(q @ (Quality::Classification { .. } | Quality::Words { .. })), _) => {
            format!("{} ({})", figure(q.primary(), 4), q.details())
        }
        (Some(q), _) => figure(q.primary(), 4),
        (None, true) => "- | - | - | -".into(),
        (None, false) => "-".into(),
    }
}

/// A markdown table of runs on the same data, with each run's median epoch time over the
/// first run's. A validation column only where a run has a validation figure: a task without
/// a validation split (MF, LR, word vectors) has one quality column, its test figure.
pub fn summary(reports: &[RunReport]) -> String {
    // Ratings have one quality column per split, rankings four on test.
    let ranking = reports.iter().filter_map(|r| r.last().test).all(|q| q.ranking().is_some());
    let evaluated = || reports.iter().flat_map(|r| &r.epochs);
    let has_valid = evaluated().any(|e| e.valid.is_some());
    let name = evaluated().find_map(|e| e.test.or(e.valid)).map_or("MRR", |q| q.primary_name());
    let mut head = vec!["engine", "technique", "nodes x workers"];
    let valid_col = format!("valid {name}");
    let test_col = format!("test {name}");
    if has_valid {
        head.push(&valid_col);
    }
    head.push(&test_col);
    if ranking {
        head.extend(["H@1", "H@3", "H@10"]);
    }
    head.extend(["epoch (median)", "vs first", "examples/s", "CPU s", "remote share", "bytes sent"]);
    let mut out = format!("| {} |\n|{}\n", head.join(" | "), " --- |".repeat(head.len()));
    let base = reports.first().map(RunReport::median_epoch_secs);
    for r in reports {
        let l = r.last();
        let median = r.median_epoch_secs();
        let examples: f64 = r.epochs.iter().map(|e| e.examples_per_sec * e.epoch_secs).sum();
        let train: f64 = r.epochs.iter().map(|e| e.epoch_secs).sum();
        let valid = if has_valid {
            format!("{} | ", l.valid.map_or("-".into(), |v| figure(v.primary(), 3)))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| {} | {} | {} x {} | {valid}{} | {:.4} s | {} | {:.0} | {} | {:.2}% | {} |\n",
            l.engine,
            l.technique,
            l.nodes,
            l.workers,
            fmt_test(l.test, ranking),
            median,
            base.filter(|b| *b > 0.0).map_or("-".into(), |b| format!("{:.3}x", median / b)),
            examples / train.max(1e-9),
            r.cpu_secs.map_or("-".into(), |c| format!("{c:.2}")),
            100.0 * r.remote_share(),
            r.bytes_sent,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::Ranking;

    fn record(epoch: u32, secs: f64, valid: Option<f64>) -> EpochRecord {
        EpochRecord {
            task: "kge",
            data: "d".into(),
            model: "complex",
            engine: "parma",
            technique: "adaptive",
            nodes: 1,
            workers: 2,
            epoch,
            epoch_secs: secs,
            train_secs: secs,
            examples_per_sec: 100.0 / secs,
            loss: 1.0,
            valid: valid.map(|mrr| Quality::Ranking(Ranking { mrr, ..Ranking::default() })),
            test: None,
        }
    }

    #[test]
    fn records_are_json_lines_and_medians_are_medians() {
        let r = RunReport {
            epochs: vec![record(1, 0.3, None), record(2, 0.1, Some(0.5)), record(3, 0.2, None)],
            setup_secs: 0.0,
            eval_secs: 0.0,
            accesses_local: 3,
            accesses_remote: 1,
            bytes_sent: 0,
            checksum: 0,
            negative_fallbacks: 0,
            cpu_secs: None,
            node: None,
            counters: NodeCounters { steps: 4, sync_rounds: 2, ..NodeCounters::default() },
        };
        assert!(r.counters.per_step().starts_with("per step: 0.500 sync rounds, 0.000 frames sent"));
        assert_eq!(r.median_epoch_secs(), 0.2);
        assert_eq!(r.remote_share(), 0.25);
        let mut out = Vec::new();
        r.write_jsonl(&mut out).unwrap();
        let lines: Vec<serde_json::Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1]["epoch"], 2);
        assert_eq!(lines[1]["valid"]["mrr"], 0.5);
        assert!(lines[0]["valid"].is_null());
        assert!(
            summary(std::slice::from_ref(&r))
                .contains("| parma | adaptive | 1 x 2 | - | - | - | - | - | 0.2000 s | 1.000x |"),
            "{}",
            summary(std::slice::from_ref(&r))
        );
        // Test RMSE without a validation split: one quality column, named for the test split.
        let mut mf = r.clone();
        for e in &mut mf.epochs {
            e.valid = None;
        }
        mf.epochs[2].test = Some(Quality::Rmse { rmse: 0.93 });
        let table = summary(&[mf]);
        assert!(
            table.starts_with("| engine | technique | nodes x workers | test RMSE | epoch (median) |"),
            "{table}"
        );
        assert!(table.contains("| 1 x 2 | 0.9300 | 0.2000 s |"), "{table}");
        assert!(!table.contains("valid"), "{table}");
    }

    #[test]
    fn metrics_files_append_whole_lines_and_a_lazy_one_starts_at_its_first_record() {
        let dir = std::env::temp_dir().join(format!("parma-metrics-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.jsonl");
        std::fs::write(&path, "from before\n").unwrap();
        let lazy = MetricsFile::lazy(&path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "from before\n");
        lazy.clone().append(&record(1, 0.1, None)).unwrap();
        lazy.append(&record(2, 0.1, Some(0.5))).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let epochs: Vec<u64> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["epoch"].as_u64().unwrap())
            .collect();
        assert_eq!(epochs, [1, 2], "{text}");
        let eager = MetricsFile::create(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        assert!(eager == eager.clone() && eager != lazy);
        assert!(MetricsFile::create(&dir.join("no such dir").join("m.jsonl")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_cpu_time_is_read_and_grows() {
        let a = process_cpu_secs().expect("linux has /proc/self/stat");
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let b = process_cpu_secs().unwrap();
        assert!(b >= a, "{a} then {b} ({x})");
    }
}
