//! `--metrics` as the epochs end: a run killed in the middle of training leaves every epoch it
//! finished in the file, each line a whole record.
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const PARMA: &str = env!("CARGO_BIN_EXE_parma");
/// Longest the test waits for the run to write its first epochs.
const WAIT: Duration = Duration::from_secs(90);

/// A small ratings file (`user item rating`), planted: a user's rating is its group's liking
/// of the item's group.
fn write_ratings(path: &Path) {
    let mut text = String::new();
    for u in 0..40u32 {
        for k in 0..15u32 {
            let i = (u * 7 + k * 11) % 50;
            let rating = if (u % 2) == (i % 2) { 5 } else { 1 };
            text.push_str(&format!("{u} {i} {rating}\n"));
        }
    }
    std::fs::write(path, text).unwrap();
}

/// The whole lines of `path` (a line being written, without its newline, is left out).
fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole.lines().map(str::to_string).collect()
}

#[test]
fn a_killed_run_leaves_every_finished_epoch_in_the_metrics_file() {
    let dir = std::env::temp_dir().join(format!("parma-train-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (data, metrics) = (dir.join("ratings.txt"), dir.join("m.jsonl"));
    write_ratings(&data);
    // Far more epochs than the wait allows: the run is killed in the middle of its training.
    let mut child = Command::new(PARMA)
        .args(["train", "mf", "--data", data.to_str().unwrap(), "--dim", "8", "--epochs", "1000000"])
        .args(["--eval-every", "1", "--workers", "1", "--metrics", metrics.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("parma starts");
    let started = Instant::now();
    while lines(&metrics).len() < 3 && started.elapsed() < WAIT {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before it was killed");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(running, "the run ended before it was killed");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let all = lines(&metrics);
    assert!(all.len() >= 3, "{} lines after {WAIT:?}: {text}", all.len());
    // Each record is written with its newline in one call: the file ends with a whole line.
    assert!(text.ends_with('\n'), "a partial line: {text}");
    for (n, line) in all.iter().enumerate() {
        let rec: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}: {line}", n + 1));
        assert_eq!(rec["epoch"], n as u64 + 1, "{line}");
        assert_eq!(rec["task"], "mf", "{line}");
        assert!(rec["loss"].as_f64().is_some_and(f64::is_finite), "{line}");
        // Every epoch was evaluated, on the test split (MF has no validation split).
        assert!(rec["test"]["rmse"].as_f64().is_some_and(|r| r.is_finite() && r > 0.0), "{line}");
        assert!(rec["valid"].is_null(), "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
