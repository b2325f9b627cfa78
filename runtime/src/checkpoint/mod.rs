//! Checkpoints: a consistent snapshot of the whole model, and restoring it onto a cluster of
//! the same or another number of nodes.
//!
//! # Writing ([`Worker::checkpoint`])
//!
//! Every worker of every node calls it at the same point of its work (it is collective, like
//! [`Worker::barrier`]). Consistency comes from the workers' own protocol:
//!
//! 1. a barrier: every worker's operations are complete (its remote pushes applied at their
//!    owners), and no worker updates the model until the checkpoint is written;
//! 2. [`Worker::wait_sync`], a barrier, and `wait_sync` again: the first makes every
//!    replica's unsent delta reach its owner, the barrier makes that true on every node, the
//!    second refreshes every replica from its owner after all deltas were merged (as
//!    [`Worker::finalize`] does);
//! 3. the first worker of each node (worker 0) lists the keys homed on its node that were ever
//!    touched ([`parma_core::Store::for_each_homed_touched`]: one list per home, so no key
//!    twice and none missed; a key never touched has its initial value, a function of the
//!    configuration) and reads their values with [`Worker::pull`], locally where the main copy
//!    or a (now fresh) replica is here, from the owner elsewhere. It writes them, keys
//!    increasing, to `part-NNNNN.bin.tmp`, CHUNK keys at a time (what it holds beyond the
//!    store is the sorted list of those keys, 8 bytes each, and one chunk), hashing as it
//!    goes, renames it to `part-NNNNN.bin` and records its SHA-256 and size in
//!    `part-NNNNN.sha256`;
//! 4. a barrier; node 0's worker 0 reads each part's sum and header and checks its size, and
//!    writes `manifest.json` (layout,
//!    configuration digest, technique, clocks, each part's size and SHA-256) the same way,
//!    last; a barrier. Each node's worker 0 then checks that the manifest lists the part it
//!    wrote. Node 0 removes the old manifest and parts before step 1, so a crash at any point
//!    leaves a directory without a manifest, which no restore accepts.
//!
//! The directory must be one that every node sees (a local one for an in-process cluster, a
//! shared file system across machines).
//!
//! # Restoring ([`Worker::restore`])
//!
//! Also collective. Every worker reads the manifest and checks every part (size, SHA-256,
//! format, every key inside the layout with its value length, no key twice) and that the
//! checkpoint is of this model (key range, value lengths, initial values, seed: the
//! configuration digest); any failure returns before anything changed. Then the workers pass
//! a barrier, `wait_sync` and a barrier (no unsent delta is left to land on the restored
//! values), each node's worker 0 sets every key its node now homes to the checkpoint's value
//! (keys touched since that the checkpoint lacks go back to their initial value), wherever
//! its main copy is, and barrier, `wait_sync`, barrier refresh every replica. The node count,
//! technique and placement may differ from the writer's: keys are re-homed by this cluster's
//! placement.
//!
//! Neither step holds the model: the parts are streamed, all at once in increasing key
//! order (each part's keys increase, so a k-way merge meets a key in two parts as two equal
//! keys in a row), through a bounded read buffer each; the apply step re-reads and re-hashes
//! them (see [`Worker::restore`] for a part that changed in between).

mod error;
pub mod format;
mod load;
mod stream;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use parma_core::Key;

pub use error::CheckpointError;
pub use format::{Manifest, PartRecord};
pub use load::{Checkpoint, Values};

use crate::Worker;

/// Keys per pull or set while writing or restoring.
const CHUNK: usize = 1024;

/// Bytes a part file is written and read through in one call.
const IO_BUFFER: usize = 1 << 20;

/// Encoded chunks a part's writer thread may have waiting.
const WRITE_AHEAD: usize = 4;

/// Writes `bytes` to `path` through a temporary file renamed into place, synced first.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let tmp = path.with_extension("tmp");
    let at = tmp.as_path();
    let io = |op| move |e| CheckpointError::io(op, at, e);
    let mut f = File::create(&tmp).map_err(io("create"))?;
    f.write_all(bytes).map_err(io("write"))?;
    f.sync_all().map_err(io("sync"))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| CheckpointError::io("rename into place", path, e))?;
    if let Some(dir) = path.parent() {
        // Makes the rename durable; not every platform can open a directory, which is harmless.
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn check_dir(dir: &Path) -> Result<(), CheckpointError> {
    if dir.as_os_str().is_empty() {
        return Err(CheckpointError::InvalidArgument("the checkpoint directory is an empty path".into()));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(CheckpointError::InvalidArgument(format!(
            "the checkpoint directory {} exists and is not a directory",
            dir.display()
        )));
    }
    Ok(())
}

/// Node 0's part of step 1: an empty place for the new checkpoint (the manifest goes first,
/// then every part, of any node count).
fn clear(dir: &Path) -> Result<(), CheckpointError> {
    fs::create_dir_all(dir).map_err(|e| CheckpointError::io("create", dir, e))?;
    let mut parts = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| CheckpointError::io("list", dir, e))? {
        let entry = entry.map_err(|e| CheckpointError::io("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("part-") && [".bin", ".tmp", ".sha256"].iter().any(|e| name.ends_with(e)) {
            parts.push(entry.path());
        }
    }
    for path in std::iter::once(dir.join(format::MANIFEST)).chain(parts) {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(CheckpointError::io("remove", &path, e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A file written under a temporary name, hashed as it goes, and renamed into place by
/// [`HashedFile::finish`] once synced; dropped unfinished, it leaves only the temporary file.
struct HashedFile {
    tmp: PathBuf,
    path: PathBuf,
    out: BufWriter<File>,
    sha: sha2::Sha256,
    bytes: u64,
}

impl HashedFile {
    fn create(path: &Path) -> Result<HashedFile, CheckpointError> {
        let tmp = path.with_extension("tmp");
        let f = File::create(&tmp).map_err(|e| CheckpointError::io("create", &tmp, e))?;
        let out = BufWriter::with_capacity(IO_BUFFER, f);
        Ok(HashedFile { tmp, path: path.to_path_buf(), out, sha: sha2::Digest::new(), bytes: 0 })
    }

    fn write(&mut self, b: &[u8]) -> Result<(), CheckpointError> {
        sha2::Digest::update(&mut self.sha, b);
        self.bytes += b.len() as u64;
        self.out.write_all(b).map_err(|e| CheckpointError::io("write", &self.tmp, e))
    }

    /// Syncs, renames into place; the SHA-256 (hex) and the length of what was written.
    fn finish(self) -> Result<(String, u64), CheckpointError> {
        let HashedFile { tmp, path, out, sha, bytes } = self;
        let f = out.into_inner().map_err(|e| CheckpointError::io("write", &tmp, e.into_error()))?;
        f.sync_all().map_err(|e| CheckpointError::io("sync", &tmp, e))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| CheckpointError::io("rename into place", &path, e))?;
        if let Some(dir) = path.parent() {
            // As in `write_atomically`.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok((format::hex(&sha2::Digest::finalize(sha)), bytes))
    }
}

/// A part as its writer recorded it in its sum file `sum`: (SHA-256 hex, bytes, the part's
/// first `PART_HEADER` bytes, fewer if it is shorter); `None` if the part or its sum file is
/// missing. The part's size on disk must be the recorded one; its bytes are not hashed again
/// here (a restore does that), so node 0 reads 32 bytes of each part, not the whole model.
fn written_part(path: &Path, sum: &Path) -> Result<Option<(String, u64, Vec<u8>)>, CheckpointError> {
    let missing = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let text = match fs::read_to_string(sum) {
        Ok(t) => t,
        Err(e) if missing(&e) => return Ok(None),
        Err(e) => return Err(CheckpointError::io("read", sum, e)),
    };
    let corrupt = |reason: String| CheckpointError::CorruptPart { path: path.to_path_buf(), reason };
    let Some((sha, bytes)) = format::decode_sum(&text) else {
        return Err(corrupt(format!("its sum file {} is not `<sha256> <bytes>`", sum.display())));
    };
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if missing(&e) => return Ok(None),
        Err(e) => return Err(CheckpointError::io("read", path, e)),
    };
    let on_disk = f.metadata().map_err(|e| CheckpointError::io("read", path, e))?.len();
    if on_disk != bytes {
        return Err(corrupt(format!("{on_disk} bytes on disk, its writer wrote {bytes}")));
    }
    let mut head = Vec::with_capacity(format::PART_HEADER);
    (&mut f)
        .take(format::PART_HEADER as u64)
        .read_to_end(&mut head)
        .map_err(|e| CheckpointError::io("read", path, e))?;
    Ok(Some((sha, bytes, head)))
}

impl Worker {
    /// Writes a consistent snapshot of the whole model to `dir` (see the module docs of
    /// `checkpoint`); `extra` is recorded in the manifest as given. Collective: every worker
    /// of every node calls it at the same point, with the same `dir`. Returns after the
    /// manifest is written. A node that fails to write has its worker 0 report why; every
    /// other worker 0 then finds its part missing from the manifest (or no manifest) and
    /// reports [`CheckpointError::Incomplete`].
    pub fn checkpoint(
        &mut self,
        dir: &Path,
        extra: &BTreeMap<String, String>,
    ) -> Result<(), CheckpointError> {
        check_dir(dir)?;
        let (me, writer) = (self.node(), self.id().0 == 0);
        let mut failed = None;
        if writer {
            let r = if me.0 == 0 {
                clear(dir)
            } else {
                fs::create_dir_all(dir).map_err(|e| CheckpointError::io("create", dir, e))
            };
            failed = r.err();
        }
        self.barrier().map_err(CheckpointError::worker("barrier"))?;
        self.quiesce()?;
        let mut written = None;
        if writer && failed.is_none() {
            match self.write_part(dir) {
                Ok(sha) => written = Some(sha),
                Err(e) => failed = Some(e),
            }
        }
        self.barrier().map_err(CheckpointError::worker("barrier"))?;
        if writer && me.0 == 0 && failed.is_none() {
            failed = self.write_manifest(dir, extra).err();
        }
        self.barrier().map_err(CheckpointError::worker("barrier"))?;
        if let Some(e) = failed {
            return Err(e);
        }
        // A writer checks that the manifest lists the part it wrote (not an old manifest that
        // node 0 could not remove); the other workers that there is one.
        let incomplete = || CheckpointError::Incomplete { dir: dir.to_path_buf() };
        match written {
            Some(sha) => {
                let ck = Checkpoint::open(dir).map_err(|_| incomplete())?;
                if !ck.manifest().parts.iter().any(|p| p.node == me.0 && p.sha256 == sha) {
                    return Err(incomplete());
                }
            }
            None if !dir.join(format::MANIFEST).is_file() => return Err(incomplete()),
            None => {}
        }
        Ok(())
    }

    /// Replaces the whole model with the checkpoint in `dir` (see the module docs of
    /// `checkpoint`), after checking all of it; a checkpoint that is truncated, corrupted or
    /// of another model is refused before anything changed. Collective like
    /// [`Worker::checkpoint`]. Returns the checkpoint's manifest.
    ///
    /// The parts are read twice, streamed both times (memory: a read buffer per part, a chunk
    /// of 1024 keys' values, and on each node's worker 0 the sorted list of the keys homed there
    /// that were ever touched, 8 bytes each): once by every worker to check everything, once by
    /// each node's worker 0 to set the values. If a part changed between the two reads (its
    /// size, content or SHA-256 differs from the manifest's), that worker returns
    /// [`CheckpointError::Checksum`] and the model is then partly restored: some keys homed on
    /// that node hold the checkpoint's values, the others what they held before, while other
    /// nodes may have finished. Restore again from a sound checkpoint before using it.
    pub fn restore(&mut self, dir: &Path) -> Result<Manifest, CheckpointError> {
        check_dir(dir)?;
        self.restore_from(&Checkpoint::open(dir)?)
    }

    /// [`Worker::restore`] from a checkpoint already opened (e.g. with a read buffer of its
    /// own, [`Checkpoint::with_read_buffer`]).
    pub fn restore_from(&mut self, ck: &Checkpoint) -> Result<Manifest, CheckpointError> {
        let cfg = &self.shared().cfg;
        ck.check_fits(cfg)?;
        ck.walk(Some(&cfg.layout), stream::Pass::Check, |_, _| Ok(()))?;
        // Everything is checked: from here on the model changes.
        self.barrier().map_err(CheckpointError::worker("barrier"))?;
        self.quiesce()?;
        let mut failed = None;
        if self.id().0 == 0 {
            failed = self.set_homed(ck).err();
        }
        self.barrier().map_err(CheckpointError::worker("barrier"))?;
        self.quiesce()?;
        match failed {
            Some(e) => Err(e),
            None => Ok(ck.manifest().clone()),
        }
    }

    /// `wait_sync`, barrier, `wait_sync`: every unsent delta merged at its owner, and every
    /// replica here refreshed after that.
    fn quiesce(&mut self) -> Result<(), CheckpointError> {
        self.wait_sync().map_err(CheckpointError::worker("wait_sync"))?;
        self.barrier().map_err(CheckpointError::worker("barrier"))?;
        self.wait_sync().map_err(CheckpointError::worker("wait_sync"))
    }

    /// Step 3: this node's part, streamed to disk CHUNK keys at a time; returns its SHA-256.
    fn write_part(&mut self, dir: &Path) -> Result<String, CheckpointError> {
        let store = std::sync::Arc::clone(&self.shared().store);
        let mut keys = Vec::new();
        store.for_each_homed_touched(|k| keys.push(k));
        keys.sort_unstable();
        keys.dedup();
        let layout = store.layout();
        let mut file = HashedFile::create(&dir.join(format::part_name(self.node().0)))?;
        file.write(&format::encode_header(self.node().0, self.clock().0, keys.len() as u64))?;
        // A thread of its own hashes and writes each chunk while this one pulls and encodes the
        // next: WRITE_AHEAD chunks in flight at most, their buffers handed back for reuse.
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(WRITE_AHEAD);
        let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(WRITE_AHEAD + 1);
        let writer = std::thread::Builder::new()
            .name("parma-checkpoint-write".into())
            .spawn(move || -> Result<HashedFile, CheckpointError> {
                for b in full_rx {
                    file.write(&b)?;
                    let _ = free_tx.try_send(b);
                }
                Ok(file)
            })
            .map_err(|e| CheckpointError::io("start a writer thread for", dir, e))?;
        let mut values = Vec::new();
        let mut pulled = Ok(());
        for chunk in keys.chunks(CHUNK) {
            let lens: Vec<usize> = chunk.iter().map(|k| layout.len_of(*k).unwrap_or(0)).collect();
            values.clear();
            values.resize(lens.iter().sum(), 0.0f32);
            if let Err(e) = self.pull(chunk, &mut values) {
                pulled = Err(CheckpointError::worker("pull")(e));
                break;
            }
            let mut bytes = free_rx.try_recv().unwrap_or_default();
            bytes.clear();
            let mut at = 0;
            for (k, len) in chunk.iter().zip(&lens) {
                format::encode_record(&mut bytes, *k, &values[at..at + len]);
                at += len;
            }
            if full_tx.send(bytes).is_err() {
                break; // The writer failed: its error is below.
            }
        }
        drop(full_tx);
        let panicked = || std::io::Error::other("its writer thread panicked");
        let part = dir.join(format::part_name(self.node().0));
        let file = writer.join().map_err(|_| CheckpointError::io("write", &part, panicked()))??;
        pulled?;
        let (sha, bytes) = file.finish()?;
        write_atomically(
            &dir.join(format::sum_name(self.node().0)),
            format::encode_sum(&sha, bytes).as_bytes(),
        )?;
        Ok(sha)
    }

    /// Step 4: the manifest, from the parts as they are on disk.
    fn write_manifest(
        &mut self,
        dir: &Path,
        extra: &BTreeMap<String, String>,
    ) -> Result<(), CheckpointError> {
        let cfg = &self.shared().cfg;
        let mut parts = Vec::with_capacity(usize::from(cfg.nodes));
        for node in 0..cfg.nodes {
            let file = format::part_name(node);
            let path = dir.join(&file);
            let Some((sha256, bytes, head)) = written_part(&path, &dir.join(format::sum_name(node)))? else {
                return Err(CheckpointError::Incomplete { dir: dir.to_path_buf() });
            };
            let h = format::part_header(&head)
                .map_err(|reason| CheckpointError::CorruptPart { path: path.clone(), reason })?;
            parts.push(PartRecord { file, node, keys: h.records, bytes, sha256, clock: h.clock });
        }
        let mut m = Manifest::new(cfg, parts);
        m.extra = extra.clone();
        let text = serde_json::to_string_pretty(&m)
            .map_err(|e| CheckpointError::InvalidArgument(format!("cannot encode the manifest: {e}")))?;
        write_atomically(&dir.join(format::MANIFEST), text.as_bytes())
    }

    /// Restore's step on each node's worker 0: every key homed here set to the checkpoint's
    /// value, and keys touched here that the checkpoint lacks to their initial one. The parts
    /// are streamed in key order (re-checked as [`stream::Pass::Apply`] says) beside the
    /// sorted keys touched here, so a touched key the checkpoint lacks is the one the stream
    /// passes over.
    fn set_homed(&mut self, ck: &Checkpoint) -> Result<(), CheckpointError> {
        let store = std::sync::Arc::clone(&self.shared().store);
        let (me, layout) = (self.node(), self.shared().cfg.layout.clone());
        let (init, seed) = (self.shared().cfg.init, self.shared().cfg.seed);
        let mut touched: Vec<Key> = Vec::new();
        store.for_each_homed_touched(|k| touched.push(k));
        touched.sort_unstable();
        touched.dedup();
        let mut next = 0usize;
        let (mut put, mut reset) = (Batch::default(), Batch::default());
        ck.walk(Some(&layout), stream::Pass::Apply, |k, v| {
            if store.homes().home(k) != me {
                return Ok(());
            }
            while let Some(t) = touched.get(next).copied().filter(|t| *t < k) {
                next += 1;
                let len = layout.len_of(t).unwrap_or(0);
                reset.push(t, (0..len).map(|i| parma_core::Store::initial_value(init, seed, t, i)));
                reset.flush_full(self)?;
            }
            if touched.get(next) == Some(&k) {
                next += 1;
            }
            put.push(k, v.iter().copied());
            put.flush_full(self)
        })?;
        put.flush(self)?;
        for &t in &touched[next..] {
            let len = layout.len_of(t).unwrap_or(0);
            reset.push(t, (0..len).map(|i| parma_core::Store::initial_value(init, seed, t, i)));
            reset.flush_full(self)?;
        }
        reset.flush(self)
    }
}

/// Keys and their values waiting to be set, at most [`CHUNK`] keys.
#[derive(Default)]
struct Batch {
    keys: Vec<Key>,
    vals: Vec<f32>,
}

impl Batch {
    fn push(&mut self, k: Key, v: impl Iterator<Item = f32>) {
        self.keys.push(k);
        self.vals.extend(v);
    }

    fn flush_full(&mut self, w: &mut Worker) -> Result<(), CheckpointError> {
        if self.keys.len() >= CHUNK {
            self.flush(w)?;
        }
        Ok(())
    }

    fn flush(&mut self, w: &mut Worker) -> Result<(), CheckpointError> {
        if !self.keys.is_empty() {
            let fail = CheckpointError::worker("set");
            let t = w.set(&self.keys, &self.vals).map_err(&fail)?;
            w.wait(t).map_err(&fail)?;
            self.keys.clear();
            self.vals.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("parma-ckpt-unit-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("a temporary directory");
        d
    }

    /// What a part's writer streams is what a whole-part encoding gives, and its sum names
    /// that file's SHA-256 and size.
    #[test]
    fn a_streamed_part_is_the_encoded_part_and_its_sum_matches() {
        let d = dir("streamed");
        let vals = [[1.0f32, -2.5], [0.25, 7.0]];
        let whole =
            format::encode_part(2, 5, 2, [(Key(3), &vals[0][..]), (Key(8), &vals[1][..])].into_iter());
        let path = d.join(format::part_name(2));
        let mut f = HashedFile::create(&path).expect("create");
        f.write(&format::encode_header(2, 5, 2)).expect("header");
        let mut rec = Vec::new();
        format::encode_record(&mut rec, Key(3), &vals[0]);
        f.write(&rec).expect("first record");
        rec.clear();
        format::encode_record(&mut rec, Key(8), &vals[1]);
        f.write(&rec).expect("second record");
        let (sha, bytes) = f.finish().expect("finish");
        assert_eq!(fs::read(&path).expect("the part"), whole);
        assert_eq!((sha.as_str(), bytes), (format::sha256_hex(&whole).as_str(), whole.len() as u64));
        assert!(!path.with_extension("tmp").exists(), "the temporary file was renamed");
        let sum = d.join(format::sum_name(2));
        fs::write(&sum, format::encode_sum(&sha, bytes)).expect("the sum");
        let (s2, b2, head) = written_part(&path, &sum).expect("read").expect("present");
        assert_eq!((s2, b2), (sha, bytes));
        assert_eq!(head, whole[..format::PART_HEADER]);
        let _ = fs::remove_dir_all(&d);
    }

    /// Node 0 refuses a part whose size on disk is not what its writer recorded, and a sum file
    /// that is not one; a missing part or sum is an incomplete checkpoint (`None`).
    #[test]
    fn a_part_that_differs_from_its_sum_or_a_bad_sum_is_named() {
        let d = dir("sums");
        let path = d.join(format::part_name(0));
        let sum = d.join(format::sum_name(0));
        assert!(written_part(&path, &sum).expect("no error").is_none());
        fs::write(&path, format::encode_header(0, 1, 0)).expect("a part");
        assert!(written_part(&path, &sum).expect("no error").is_none(), "no sum: incomplete");
        fs::write(&sum, format::encode_sum(&"a".repeat(64), 31)).expect("a sum");
        let e = written_part(&path, &sum).expect_err("the size differs").to_string();
        assert!(e.contains("32 bytes on disk, its writer wrote 31"), "{e}");
        for bad in ["", "abc 32", &format!("{} x", "a".repeat(64)), &format!("{} 32", "G".repeat(64))] {
            fs::write(&sum, bad).expect("a bad sum");
            let e = written_part(&path, &sum).expect_err("not a sum").to_string();
            assert!(e.contains("is not `<sha256> <bytes>`"), "{bad:?}: {e}");
        }
        let _ = fs::remove_dir_all(&d);
    }
}
