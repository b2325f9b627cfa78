//! Checkpoints on in-process clusters (threaded loopback): a bit-exact round trip under the
//! adaptive technique with keys relocated and replicated, restores onto other cluster sizes,
//! and damaged or mismatched checkpoints refused without changing the model.
#![forbid(unsafe_code)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::{finalize_all, run_all, shutdown_all, start, Cluster, Rng};
use parma_core::{Clock, Config, Init, Key, Layout, Placement, Technique};
use parma_runtime::checkpoint::{Checkpoint, CheckpointError};
use parma_runtime::{Options, Worker};
use parma_transport_loopback::threaded::ThreadedOptions;

const KEYS: u64 = 600;
const LEN: usize = 3;

fn config(nodes: u16, technique: Technique) -> Config {
    let mut cfg = Config::new(nodes, 2, Layout::uniform(KEYS, LEN as u32).unwrap());
    cfg.technique = technique;
    cfg.init = Init::Uniform { scale: 0.5 };
    cfg.seed = 17;
    cfg
}

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("parma-ckpt-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Updates with fractional values (so that bit-exactness means something): keys 0..100 are
/// hot (every worker), each worker also has its own keys; keys 500.. are never touched. Every
/// worker signals intents for its keys far ahead, so that under adaptive management hot keys
/// are replicated and a worker's own keys move to its node.
fn train(workers: Vec<Worker>, rounds: u64, salt: u64) -> Vec<Worker> {
    run_all(workers, |i, w| {
        let mut rng = Rng(0x5eed ^ salt ^ ((i as u64) << 8));
        let own: Vec<Key> = (0..20).map(|j| Key(100 + 30 * i as u64 + j)).collect();
        let hot: Vec<Key> = (0..100).map(Key).collect();
        let now = w.clock();
        w.intent(&own, now, Clock(now.0 + 1_000_000)).unwrap();
        w.intent(&hot, now, Clock(now.0 + 1_000_000)).unwrap();
        for _ in 0..rounds {
            let mut keys: Vec<Key> = (0..4).map(|_| hot[rng.below(100) as usize]).collect();
            keys.extend((0..4).map(|_| own[rng.below(20) as usize]));
            let vals: Vec<f32> =
                (0..keys.len() * LEN).map(|_| (rng.below(1 << 20) as f32 / 7.0e6) - 0.07).collect();
            let t = w.push(&keys, &vals).unwrap();
            w.wait(t).unwrap();
            w.advance_clock().unwrap();
        }
        w.wait_sync().unwrap();
        w.barrier().unwrap();
    })
    .into_iter()
    .map(|(w, _)| w)
    .collect()
}

/// Every key's value as each worker reads it (all equal after a quiescent checkpoint/restore).
fn read_all(workers: Vec<Worker>) -> (Vec<Worker>, Vec<u32>) {
    let done = run_all(workers, |_, w| {
        w.wait_sync().unwrap();
        w.barrier().unwrap();
        w.wait_sync().unwrap();
        w.barrier().unwrap();
        let keys: Vec<Key> = (0..KEYS).map(Key).collect();
        let mut vals = vec![f32::NAN; KEYS as usize * LEN];
        w.pull(&keys, &mut vals).unwrap();
        w.barrier().unwrap();
        vals.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
    });
    let first = done[0].1.clone();
    for (i, (_, v)) in done.iter().enumerate() {
        assert!(*v == first, "worker {i} reads another model than worker 0");
    }
    (done.into_iter().map(|(w, _)| w).collect(), first)
}

fn checkpoint(workers: Vec<Worker>, dir: &Path, epoch: u32) -> Vec<Worker> {
    let extra = BTreeMap::from([("epoch".to_string(), epoch.to_string())]);
    run_all(workers, |_, w| w.checkpoint(dir, &extra).unwrap()).into_iter().map(|(w, _)| w).collect()
}

fn restore(workers: Vec<Worker>, dir: &Path) -> (Vec<Worker>, Vec<Result<(), String>>) {
    let done =
        run_all(workers, |_, w| w.restore(dir).map(|_| ()).map_err(|e: CheckpointError| e.to_string()));
    let results = done.iter().map(|(_, r)| r.clone()).collect();
    (done.into_iter().map(|(w, _)| w).collect(), results)
}

fn stop(c: Cluster, workers: Vec<Worker>) {
    finalize_all(workers);
    shutdown_all(c.nodes);
}

/// A trained 3-node cluster's checkpoint in `dir`, and the model's bits at that point.
fn trained_checkpoint(dir: &Path) -> Vec<u32> {
    let c = start(&config(3, Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let workers = train(c.workers, 150, 1);
    let (workers, model) = read_all(workers);
    let workers = checkpoint(workers, dir, 3);
    stop(Cluster { workers: Vec::new(), ..c }, workers);
    model
}

#[test]
fn round_trip_is_bit_exact_with_keys_relocated_and_replicated() {
    let dir = scratch("round-trip");
    let c = start(&config(3, Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let workers = train(c.workers, 150, 1);
    let moved: usize = c.nodes.iter().map(|n| n.inspect().moved_in()).sum();
    let replicas: usize = c.nodes.iter().map(|n| n.inspect().replicas_held()).sum();
    assert!(
        moved > 0 && replicas > 0,
        "the workload should relocate and replicate: {moved} moved, {replicas} replicas"
    );
    // A directory that is a file is refused by every worker before any barrier.
    let file = dir.join("not-a-dir");
    fs::write(&file, b"x").unwrap();
    let refused = run_all(workers, |_, w| w.checkpoint(&file, &BTreeMap::new()).unwrap_err().to_string());
    assert!(refused.iter().all(|(_, e)| e.contains("is not a directory")), "{:?}", refused[0].1);
    let workers: Vec<Worker> = refused.into_iter().map(|(w, _)| w).collect();
    let workers = checkpoint(workers, &dir, 3);
    // Read after the checkpoint (a read makes untouched keys' initial values real).
    let (workers, before) = read_all(workers);
    let m = Checkpoint::open(&dir).unwrap();
    let manifest = m.manifest().clone();
    assert_eq!(manifest.parts.len(), 3);
    assert_eq!(manifest.technique, "adaptive");
    assert_eq!(manifest.extra.get("epoch").map(String::as_str), Some("3"));
    // Keys 500.. were never touched: not written, and still read as their initial value below.
    let all = m.scan(None, |_| true).unwrap();
    assert_eq!(all.keys.len() as u64, manifest.keys());
    assert!(all.keys.iter().all(|k| k.0 < 500), "untouched keys are not written");
    assert!(manifest.keys() >= 100 + 6 * 20);
    // Change the model, then restore: every bit as at the checkpoint.
    let workers = train(workers, 40, 2);
    let (workers, changed) = read_all(workers);
    assert_ne!(changed, before);
    let (workers, results) = restore(workers, &dir);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (workers, after) = read_all(workers);
    assert!(after == before, "the restored model differs from the checkpoint's");
    stop(Cluster { workers: Vec::new(), ..c }, workers);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn restores_onto_other_cluster_sizes() {
    // 3 -> 2 under adaptive, then that cluster's own checkpoint 2 -> 4 under static
    // partitioning with the hashed placement (the writers' is dense).
    let dir = scratch("resize");
    let model = trained_checkpoint(&dir);
    let c = start(&config(2, Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let (workers, results) = restore(c.workers, &dir);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (workers, got) = read_all(workers);
    assert!(got == model, "3 -> 2: the model differs");
    let dir2 = scratch("resize-2");
    let workers = checkpoint(workers, &dir2, 3);
    assert_eq!(Checkpoint::open(&dir2).unwrap().manifest().parts.len(), 2);
    stop(Cluster { workers: Vec::new(), ..c }, workers);

    let mut four = config(4, Technique::StaticPartitioning);
    four.placement = Placement::Hashed;
    let c = start(&four, Options::default(), ThreadedOptions::default());
    let (workers, results) = restore(c.workers, &dir2);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (workers, got) = read_all(workers);
    assert!(got == model, "2 -> 4: the model differs");
    stop(Cluster { workers: Vec::new(), ..c }, workers);
    let _ = fs::remove_dir_all(&dir);
    let _ = fs::remove_dir_all(&dir2);
}

/// A copy of checkpoint `from` in a new directory `name`, changed by `damage`.
fn damaged(from: &Path, name: &str, damage: impl FnOnce(&Path)) -> PathBuf {
    let dir = scratch(name);
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    damage(&dir);
    dir
}

#[test]
fn damaged_or_mismatched_checkpoints_are_refused_and_change_nothing() {
    let good = scratch("good");
    trained_checkpoint(&good);
    let part = "part-00001.bin";
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            damaged(&good, "truncated", |d| {
                let b = fs::read(d.join(part)).unwrap();
                fs::write(d.join(part), &b[..b.len() - 5]).unwrap();
            }),
            "truncated",
        ),
        (
            damaged(&good, "corrupted", |d| {
                let mut b = fs::read(d.join(part)).unwrap();
                let mid = b.len() / 2;
                b[mid] ^= 0x40;
                fs::write(d.join(part), b).unwrap();
            }),
            "SHA-256",
        ),
        (damaged(&good, "missing-part", |d| fs::remove_file(d.join(part)).unwrap()), "is missing"),
        (
            damaged(&good, "no-manifest", |d| fs::remove_file(d.join("manifest.json")).unwrap()),
            "no checkpoint",
        ),
        (
            damaged(&good, "edited-manifest", |d| {
                let m = fs::read_to_string(d.join("manifest.json")).unwrap();
                let m = m.replace(&format!("\"key_end\": {KEYS}"), &format!("\"key_end\": {}", KEYS + 1));
                fs::write(d.join("manifest.json"), m).unwrap();
            }),
            "digest does not match",
        ),
    ];
    let c = start(&config(2, Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let workers = train(c.workers, 30, 9);
    let (mut workers, before) = read_all(workers);
    for (dir, expect) in &cases {
        let (ws, results) = restore(workers, dir);
        for r in &results {
            let e = r.as_ref().expect_err("a damaged checkpoint was restored");
            assert!(e.contains(expect), "{}: `{e}` should say `{expect}`", dir.display());
        }
        let (ws, now) = read_all(ws);
        assert!(now == before, "{}: a refused restore changed the model", dir.display());
        workers = ws;
    }
    stop(Cluster { workers: Vec::new(), ..c }, workers);

    // Another model: other value lengths, or another seed (other initial values).
    let mut other_len = config(2, Technique::Adaptive);
    other_len.layout = Layout::uniform(KEYS, 4).unwrap();
    let mut other_seed = config(2, Technique::Adaptive);
    other_seed.seed = 18;
    for (cfg, expect) in [
        (other_len, "value lengths 3 in the checkpoint, 4 in this cluster"),
        (other_seed, "seed 17 in the checkpoint, 18 in this cluster"),
    ] {
        let c = start(&cfg, Options::default(), ThreadedOptions::default());
        let (workers, results) = restore(c.workers, &good);
        for r in &results {
            let e = r.as_ref().expect_err("a mismatched checkpoint was restored");
            assert!(e.contains(expect), "`{e}` should say `{expect}`");
        }
        stop(Cluster { workers: Vec::new(), ..c }, workers);
    }
    for (dir, _) in cases {
        let _ = fs::remove_dir_all(dir);
    }
    let _ = fs::remove_dir_all(&good);
}

#[test]
fn a_restore_through_a_tiny_read_buffer_resets_keys_the_checkpoint_lacks() {
    // A 7-byte buffer splits almost every record (12 + 12 bytes) between two refills. Keys
    // 125.. (between written keys) and 550.. (past the last) are touched on the restoring
    // cluster but absent from the checkpoint: they must go back to their initial value, the
    // first as the stream passes them, the others after it.
    let dir = scratch("tiny-buffer");
    let c = start(&config(3, Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let workers = checkpoint(train(c.workers, 150, 1), &dir, 3);
    // Read after the checkpoint, so that the keys never touched are not written.
    let (workers, model) = read_all(workers);
    stop(Cluster { workers: Vec::new(), ..c }, workers);
    assert!(Checkpoint::open(&dir).unwrap().manifest().keys() < 500);
    let c = start(&config(2, Technique::Adaptive), Options::default(), ThreadedOptions::default());
    let workers = run_all(c.workers, |i, w| {
        let keys: Vec<Key> =
            (0..10).map(|j| Key(550 + 10 * i as u64 + j)).chain([Key(3), Key(125 + i as u64)]).collect();
        let t = w.push(&keys, &vec![0.25; keys.len() * LEN]).unwrap();
        w.wait(t).unwrap();
        w.wait_sync().unwrap();
        w.barrier().unwrap();
    });
    let workers: Vec<Worker> = workers.into_iter().map(|(w, _)| w).collect();
    let (workers, touched) = read_all(workers);
    assert_ne!(touched, model);
    let ck = Checkpoint::open(&dir).unwrap().with_read_buffer(7);
    let done = run_all(workers, |_, w| w.restore_from(&ck).map(|_| ()).map_err(|e| e.to_string()));
    assert!(done.iter().all(|(_, r)| r.is_ok()), "{:?}", done[0].1);
    let (workers, got) = read_all(done.into_iter().map(|(w, _)| w).collect());
    assert!(got == model, "the model restored through a 7-byte buffer differs");
    stop(Cluster { workers: Vec::new(), ..c }, workers);
    let _ = fs::remove_dir_all(&dir);
}
