//! Checkpoints at size: one node's model of `n` keys written (`Worker::checkpoint`), restored
//! onto the same node and onto a cluster of two nodes (`Worker::restore`), each against this
//! disk's own sequential write and read of as many bytes, measured in the same run and the
//! same directory.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parma_core::{Config, Key, NodeId};
use parma_runtime::{NodeRuntime, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};

use crate::build::{build, Keys, LEN};
use crate::WORKERS;

/// Keys whose values the run changes and checks after each restore.
const PROBES: u64 = 1000;

/// The value the checkpoint should hold for probe `key`.
fn marked(key: Key) -> Vec<f32> {
    (0..LEN).map(|i| (key.0 % 1000) as f32 + i as f32 / 100.0).collect()
}

fn probe_keys(n: u64) -> Vec<Key> {
    let step = (n / PROBES).max(1);
    (0..n).step_by(step as usize).map(Key).collect()
}

/// Bytes per second as MB/s.
fn mbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e6
}

/// Writes `bytes` bytes to `path` in 1 MiB blocks and syncs; then reads them back. The two
/// times. The file is removed.
fn disk(path: &Path, bytes: u64) -> std::io::Result<(Duration, Duration)> {
    let block: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + 3) as u8).collect();
    let t0 = Instant::now();
    let mut f = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let write = t0.elapsed();
    let t1 = Instant::now();
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        match f.read(&mut buf)? {
            0 => break,
            k => got += k as u64,
        }
    }
    let read = t1.elapsed();
    assert_eq!(got, bytes, "read back what was written");
    fs::remove_file(path)?;
    Ok((write, read))
}

/// Runs `f` on every worker at once (checkpoints and restores are collective); the time until
/// the last returned.
fn on_all(workers: &mut [Worker], f: impl Fn(&mut Worker) + Sync) -> Duration {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in workers.iter_mut() {
            let f = &f;
            s.spawn(move || f(w));
        }
    });
    t0.elapsed()
}

/// Checks that every probe key holds its marked value, through `w` (remote where not here).
fn check_probes(w: &mut Worker, probes: &[Key], after: &str) {
    let mut v = vec![0.0f32; LEN];
    for k in probes {
        w.pull(&[*k], &mut v).expect("pull a probe key");
        assert_eq!(v, marked(*k), "key {} after {after}", k.0);
    }
}

fn part_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .expect("the checkpoint directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// The checkpoint rows for a dense model of `n` keys, in `dir` (created, emptied of the
/// bench's files at the end).
pub fn measure(n: u64, dir: &Path) {
    let keys = Keys::Dense(n);
    let ck = dir.join("checkpoint");
    let probe_file: PathBuf = dir.join("sequential-probe.bin");
    fs::create_dir_all(dir).expect("the checkpoint bench's directory");
    let (mut node, _) = build(keys, WORKERS);
    let probes = probe_keys(n);
    let w = &mut node.workers[0];
    for k in &probes {
        let t = w.set(&[*k], &marked(*k)).expect("mark a probe key");
        w.wait(t).expect("marked");
    }
    let extra = BTreeMap::new();
    let write = on_all(&mut node.workers, |w| w.checkpoint(&ck, &extra).expect("checkpoint"));
    let bytes = part_bytes(&ck);
    // Change the probes, so that a restore that did nothing is caught.
    let w = &mut node.workers[0];
    for k in &probes {
        let t = w.push(&[*k], &[1.0; LEN]).expect("push a probe key");
        w.wait(t).expect("pushed");
    }
    let restore_same = on_all(&mut node.workers, |w| {
        w.restore(&ck).expect("restore onto the same node");
    });
    check_probes(&mut node.workers[0], &probes, "a restore onto the same node");
    node.finish();

    // Two nodes, each with its workers, restore the one node's checkpoint.
    let mut cfg = Config::new(2, WORKERS, keys.layout());
    cfg.placement = keys.placement();
    let mut runtimes = Vec::new();
    let mut workers = Vec::new();
    for (i, t) in cluster(2, ThreadedOptions::default()).into_iter().enumerate() {
        let (rt, ws) = NodeRuntime::start(cfg.clone(), NodeId(i as u16), t).expect("a node of two starts");
        runtimes.push(rt);
        workers.extend(ws);
    }
    let restore_two = on_all(&mut workers, |w| {
        w.restore(&ck).expect("restore onto two nodes");
    });
    check_probes(&mut workers[0], &probes, "a restore onto two nodes");
    std::thread::scope(|s| {
        for w in workers {
            s.spawn(move || w.finalize().expect("finalize"));
        }
    });
    for rt in runtimes {
        rt.shutdown().expect("a clean shutdown");
    }

    let (disk_write, disk_read) = disk(&probe_file, bytes).expect("the sequential write and read");
    let _ = fs::remove_dir_all(&ck);
    println!(
        "\n== checkpoints: {n} dense keys of {LEN} f32, one node of {WORKERS} workers; part files {:.1} MB in {} ==",
        bytes as f64 / 1e6,
        dir.display()
    );
    println!("{:<44} {:>9} {:>9} {:>16}", "what", "s", "MB/s", "of the disk's");
    let line = |what: &str, t: Duration, base: Duration| {
        println!(
            "{what:<44} {:>9.2} {:>9.0} {:>15.2}x",
            t.as_secs_f64(),
            mbs(bytes, t),
            base.as_secs_f64() / t.as_secs_f64()
        )
    };
    line("sequential write of as many bytes, synced", disk_write, disk_write);
    line("checkpoint (write, sync, manifest)", write, disk_write);
    line("sequential read of as many bytes", disk_read, disk_read);
    line("restore onto the same node", restore_same, disk_read);
    line("restore onto two nodes", restore_two, disk_read);
}
