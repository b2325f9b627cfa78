//! The peak resident memory of restoring a checkpoint of 10^6 keys of 16 `f32` (64 MB of
//! values) onto one node, as the operating system counts it: the process's peak resident set
//! (`VmHWM`) is reset through `/proc/self/clear_refs` just before the restore and read after
//! it. The figure is printed for people, not asserted. Run by hand:
//!
//! `cargo test --release -p parma-runtime --test checkpoint_memory -- --ignored --nocapture`
#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::fs;

use common::{finalize_all, run_all, shutdown_all, start};
use parma_core::{Config, Init, Key, Layout};
use parma_runtime::Options;
use parma_transport_loopback::threaded::ThreadedOptions;

const KEYS: u64 = 1_000_000;
const LEN: usize = 16;

/// `VmRSS` and `VmHWM` of this process in KiB, if the system reports them.
fn rss_kib() -> Option<(u64, u64)> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse::<u64>().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[test]
#[ignore = "a measurement of 64 MB of values: run by hand in release (see the file's docs)"]
fn restore_peak_memory() {
    if fs::write("/proc/self/clear_refs", "5").is_err() || rss_kib().is_none() {
        println!("SKIPPED: this system cannot reset or report the peak resident set");
        return;
    }
    let dir = std::env::temp_dir().join(format!("parma-ckpt-mem-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let mut cfg = Config::new(1, 1, Layout::uniform(KEYS, LEN as u32).unwrap());
    cfg.init = Init::Uniform { scale: 0.5 };
    let c = start(&cfg, Options::default(), ThreadedOptions::default());
    let d = dir.clone();
    let done = run_all(c.workers, move |_, w| {
        let mut vals = Vec::new();
        for start in (0..KEYS).step_by(4096) {
            let keys: Vec<Key> = (start..(start + 4096).min(KEYS)).map(Key).collect();
            vals.clear();
            vals.extend((0..keys.len() * LEN).map(|i| i as f32 * 1e-3));
            let t = w.set(&keys, &vals).unwrap();
            w.wait(t).unwrap();
        }
        w.checkpoint(&d, &BTreeMap::new()).unwrap();
        fs::write("/proc/self/clear_refs", "5").unwrap();
        let (rss, _) = rss_kib().unwrap();
        w.restore(&d).unwrap();
        let (_, peak) = rss_kib().unwrap();
        (rss, peak)
    });
    let (rss, peak) = done[0].1;
    let part = fs::metadata(dir.join("part-00000.bin")).map(|m| m.len()).unwrap_or(0);
    println!(
        "restore of {KEYS} keys x {LEN} f32 (part {:.1} MB): resident {:.1} MB before, peak {:.1} MB, \
         peak growth {:.1} MB",
        part as f64 / 1e6,
        rss as f64 * 1024.0 / 1e6,
        peak as f64 * 1024.0 / 1e6,
        peak.saturating_sub(rss) as f64 * 1024.0 / 1e6
    );
    finalize_all(done.into_iter().map(|(w, _)| w).collect());
    shutdown_all(c.nodes);
    let _ = fs::remove_dir_all(&dir);
}
