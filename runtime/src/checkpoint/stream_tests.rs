//! The streaming walk on checkpoints written by hand: small read buffers, keys of several
//! parts interleaved, a key in two parts, and a part changed between the check and the apply
//! pass.

use std::fs;
use std::path::{Path, PathBuf};

use parma_core::{Config, Key, Layout};

use super::Pass;
use crate::checkpoint::format::{encode_part, part_name, sha256_hex, Manifest, PartRecord, MANIFEST};
use crate::checkpoint::{Checkpoint, CheckpointError};

const LEN: u32 = 3;

fn value(k: u64) -> Vec<f32> {
    (0..LEN).map(|i| k as f32 + i as f32 / 8.0).collect()
}

/// A checkpoint of keys `0..60` in `dir`: part `n` of `parts` holds the keys `k % parts == n`
/// (interleaved, as the hashed placement writes them) and the extra keys of `extra[n]`.
fn write(dir: &Path, parts: u16, extra: &[Vec<u64>]) -> Checkpoint {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    let cfg = Config::new(parts, 1, Layout::uniform(60, LEN).unwrap());
    let mut records = Vec::new();
    for n in 0..parts {
        let mut keys: Vec<u64> = (0..60).filter(|k| k % u64::from(parts) == u64::from(n)).collect();
        keys.extend(extra.get(usize::from(n)).into_iter().flatten());
        keys.sort_unstable();
        let vals: Vec<Vec<f32>> = keys.iter().map(|k| value(*k)).collect();
        let entries = keys.iter().zip(&vals).map(|(k, v)| (Key(*k), &v[..]));
        let bytes = encode_part(n, 5, keys.len(), entries);
        let file = part_name(n);
        fs::write(dir.join(&file), &bytes).unwrap();
        let (bytes_len, sha256) = (bytes.len() as u64, sha256_hex(&bytes));
        records.push(PartRecord {
            file,
            node: n,
            keys: keys.len() as u64,
            bytes: bytes_len,
            sha256,
            clock: 5,
        });
    }
    let m = Manifest::new(&cfg, records);
    fs::write(dir.join(MANIFEST), serde_json::to_string_pretty(&m).unwrap()).unwrap();
    Checkpoint::open(dir).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("parma-stream-{}-{name}", std::process::id()))
}

#[test]
fn any_read_buffer_gives_every_key_once_in_order() {
    let dir = scratch("buffers");
    let ck = write(&dir, 3, &[]);
    // 1 byte up to past a record (12 + 12 bytes): every way a record can straddle a refill.
    for buffer in (1..=30).chain([1 << 20]) {
        let v = ck.clone().with_read_buffer(buffer).scan(None, |k| k.0 % 2 == 0).unwrap();
        let want: Vec<Key> = (0..60).step_by(2).map(Key).collect();
        assert_eq!(v.keys, want, "buffer {buffer}");
        assert!(v.keys.iter().enumerate().all(|(i, k)| v.value(i) == value(k.0)), "buffer {buffer}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_key_in_two_parts_is_found_without_a_set_of_keys() {
    let dir = scratch("duplicate");
    // Key 7 is part 1's (7 % 3); part 2 holds it too.
    let ck = write(&dir, 3, &[vec![], vec![], vec![7]]).with_read_buffer(5);
    match ck.scan(None, |_| false) {
        Err(CheckpointError::DuplicateKey { key, .. }) => assert_eq!(key, Key(7)),
        other => panic!("expected a duplicate key, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_part_changed_after_the_check_is_refused_by_its_checksum() {
    let dir = scratch("changed");
    let ck = write(&dir, 2, &[]);
    ck.walk(None, Pass::Check, |_, _| Ok(())).unwrap();
    let part = dir.join(part_name(1));
    let good = fs::read(&part).unwrap();
    // A value changed (the file still parses) and a value length changed (it does not):
    // both are the checksum's refusal, with the keys streamed before it already delivered.
    for at in [good.len() - 2, 32 + 8] {
        let mut b = good.clone();
        b[at] ^= 0x10;
        fs::write(&part, &b).unwrap();
        let mut seen = 0;
        let r = ck.walk(None, Pass::Apply, |_, _| {
            seen += 1;
            Ok(())
        });
        assert!(matches!(&r, Err(CheckpointError::Checksum { path }) if *path == part), "byte {at}: {r:?}");
        // A damaged value is only known at the part's end, a damaged length at once.
        assert!(at == 32 + 8 || seen == 60, "byte {at}: {seen} keys delivered");
        assert!(at != 32 + 8 || seen < 60, "byte {at}: the walk went through");
        // The check pass refuses it too, before anything is delivered to a restore.
        assert!(matches!(ck.walk(None, Pass::Check, |_, _| Ok(())), Err(CheckpointError::Checksum { .. })));
    }
    fs::write(&part, &good).unwrap();
    ck.walk(None, Pass::Apply, |_, _| Ok(())).unwrap();
    let _ = fs::remove_dir_all(&dir);
}
