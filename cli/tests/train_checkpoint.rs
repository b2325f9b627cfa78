//! `parma train` stopped after epoch k with a checkpoint and resumed from it reaches what an
//! uninterrupted run reaches: bit for bit for MF on one node and one worker (no randomness
//! outside the checkpoint), and within the seed-to-seed spread for KGE on the shipped UMLS on
//! two nodes (the negatives' draws and the threads' interleaving differ after the resume).
#![forbid(unsafe_code)]

use std::fs;
use std::path::PathBuf;

use parma_core::Technique;
use parma_train::checkpointing::CheckpointOptions;
use parma_train::harness::{run_kge, run_mf};
use parma_train::kg::Kg;
use parma_train::mf::{MfOptions, Rating, Ratings};
use parma_train::{KgeOptions, TrainOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("parma-train-ckpt-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// 60 users × 50 items, ratings `3 + <u, v>` of random rank-2 factors, 1,500 cells observed.
fn ratings() -> Ratings {
    let mut rng = StdRng::seed_from_u64(3);
    let f = |rng: &mut StdRng| [rng.gen_range(-1.0f32..1.0), rng.gen_range(-1.0f32..1.0)];
    let (uf, vf): (Vec<_>, Vec<_>) =
        ((0..60).map(|_| f(&mut rng)).collect(), (0..50).map(|_| f(&mut rng)).collect());
    let all = (0..1500)
        .map(|_| {
            let (u, i) = (rng.gen_range(0..60u32), rng.gen_range(0..50u32));
            let (a, b): ([f32; 2], [f32; 2]) = (uf[u as usize], vf[i as usize]);
            Rating { user: u, item: i, value: 3.0 + a[0] * b[0] + a[1] * b[1] }
        })
        .collect();
    Ratings::split(60, 50, all, parma_train::mf::SPLIT_SEED)
}

fn with_checkpoints(
    o: &TrainOptions,
    every: u32,
    dir: Option<&PathBuf>,
    resume: Option<&PathBuf>,
) -> TrainOptions {
    TrainOptions {
        checkpoint: CheckpointOptions { every, dir: dir.cloned(), resume: resume.cloned() },
        metrics: None,
        ..o.clone()
    }
}

#[test]
fn mf_resumed_after_epoch_3_equals_an_uninterrupted_run_bit_for_bit() {
    let data = ratings();
    let mf = MfOptions::default();
    let o = TrainOptions {
        nodes: 1,
        workers: 1,
        epochs: 6,
        dim: 8,
        lr: 0.02,
        batch: 16,
        eval_every: 0,
        ..Default::default()
    };
    let whole = run_mf(&data, "low-rank", &o, &mf).unwrap();

    let dir = scratch("mf");
    let first = TrainOptions { epochs: 3, ..with_checkpoints(&o, 3, Some(&dir), None) };
    run_mf(&data, "low-rank", &first, &mf).unwrap();
    let resumed = run_mf(&data, "low-rank", &with_checkpoints(&o, 0, None, Some(&dir)), &mf).unwrap();
    assert_eq!(resumed.epochs.first().map(|e| e.epoch), Some(4), "the resumed run starts after epoch 3");
    assert_eq!(resumed.checksum, whole.checksum, "the resumed model differs from the uninterrupted one");
    assert_eq!(resumed.last().loss.to_bits(), whole.last().loss.to_bits());
    let (a, b) = (resumed.last().test.unwrap().primary(), whole.last().test.unwrap().primary());
    assert_eq!(a.to_bits(), b.to_bits(), "test RMSE {a} resumed, {b} uninterrupted");

    // A run of another task or past its epochs is refused before it trains.
    let e = run_mf(&data, "other-data", &with_checkpoints(&o, 0, None, Some(&dir)), &mf).unwrap_err();
    assert!(e.to_string().contains("data `low-rank`"), "{e}");
    let e = run_mf(
        &data,
        "low-rank",
        &TrainOptions { epochs: 3, ..with_checkpoints(&o, 0, None, Some(&dir)) },
        &mf,
    )
    .unwrap_err();
    assert!(e.to_string().contains("nothing left to train"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn kge_on_umls_resumed_after_epoch_5_reaches_the_uninterrupted_quality() {
    let kg = Kg::shipped("umls").unwrap();
    let kge = KgeOptions::default();
    let o = TrainOptions {
        nodes: 2,
        workers: 1,
        epochs: 10,
        eval_every: 0,
        technique: Technique::Adaptive,
        gate: parma_core::Gate::Async,
        ..Default::default()
    };
    let whole = run_kge(&kg, "umls", &o, &kge).unwrap();
    let dir = scratch("kge");
    let first = TrainOptions { epochs: 5, ..with_checkpoints(&o, 5, Some(&dir), None) };
    let half = run_kge(&kg, "umls", &first, &kge).unwrap();
    let resumed = run_kge(&kg, "umls", &with_checkpoints(&o, 0, None, Some(&dir)), &kge).unwrap();
    let mrr = |r: &parma_train::report::RunReport| r.last().test.unwrap().primary();
    let (a, b, h) = (mrr(&resumed), mrr(&whole), mrr(&half));
    eprintln!("UMLS test MRR: uninterrupted {b:.4}, resumed {a:.4}, at the checkpoint {h:.4}");
    // On two nodes the uninterrupted run is not reproducible either (the threads' interleaving):
    // six runs of this test spanned 0.899 to 0.914, and the resumed run, one more draw of the
    // interleaving and the negatives, differed from its uninterrupted twin by 0.006 to 0.017.
    // 0.04 is well outside that spread. (That the restore itself is exact is the MF test's
    // and the runtime's tests' job; here the resumed run must also beat the checkpoint's model,
    // which is what five epochs from scratch reach.)
    assert!((a - b).abs() <= 0.04, "resumed {a}, uninterrupted {b}");
    assert!(a > h, "the resumed run trained on: {h} at the checkpoint, {a} after");
    let _ = fs::remove_dir_all(&dir);
}

/// Runs the `parma` binary; its stdout, or a panic with its stderr.
fn parma(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_parma")).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

#[test]
fn the_cli_checkpoints_verifies_and_exports_tables_numpy_and_pytorch_read() {
    let dir = scratch("cli");
    let d = dir.to_str().unwrap();
    let common = ["--data", "umls", "--nodes", "2", "--workers", "1", "--dim", "8", "--eval-every", "0"];
    let train = |extra: &[&str]| parma(&[&["train", "kge"][..], &common, extra].concat());
    train(&["--epochs", "2", "--checkpoint-every", "2", "--checkpoint-dir", d]).unwrap();
    let v = parma(&["checkpoint", "verify", d]).unwrap();
    assert!(v.contains("valid") && v.contains("epoch: 2") && v.contains("task: kge"), "{v}");
    train(&["--epochs", "3", "--resume", d]).unwrap();

    // UMLS: 135 entities (keys 0..135), then relations; each row an entity's 8 reals and
    // their 8 AdaGrad accumulators.
    let ck = parma_runtime::checkpoint::Checkpoint::open(&dir).unwrap();
    let (cols, want) = ck.table(0..135).unwrap();
    let npy = dir.join("entities.npy");
    let st = dir.join("entities.safetensors");
    for out in [&npy, &st] {
        let o =
            parma(&["checkpoint", "export", d, "--keys", "0..135", "--out", out.to_str().unwrap()]).unwrap();
        assert!(o.contains(&format!("135 rows x {cols} f32")), "{o}");
    }
    let raw = fs::read(&npy).unwrap();
    let file = npyz::NpyFile::new(&raw[..]).unwrap();
    assert_eq!(file.shape(), &[135, cols as u64]);
    let got: Vec<f32> = file.into_vec().unwrap();
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()) && got.len() == want.len());
    let bytes = fs::read(&st).unwrap();
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let e = t.tensor("embeddings").unwrap();
    assert_eq!((e.dtype(), e.shape()), (safetensors::Dtype::F32, &[135, cols][..]));
    let got: Vec<f32> =
        e.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()) && got.len() == want.len());

    // Refusals, each with a readable reason.
    let part = dir.join("part-00001.bin");
    let mut b = fs::read(&part).unwrap();
    b[40] ^= 1;
    fs::write(&part, b).unwrap();
    let e = parma(&["checkpoint", "verify", d]).unwrap_err();
    assert!(e.contains("fails its SHA-256 check"), "{e}");
    let e = parma(&["checkpoint", "export", d, "--keys", "9..3", "--out", "x.npy"]).unwrap_err();
    assert!(e.contains("START..END"), "{e}");
    let e = train(&["--epochs", "2", "--checkpoint-every", "1"]).unwrap_err();
    assert!(e.contains("--checkpoint-dir"), "{e}");
    let _ = fs::remove_dir_all(&dir);
}
