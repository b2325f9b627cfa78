//! Streaming over a checkpoint's parts at once, in key order: the one walk under both the
//! check (every refusal before anything changes) and the apply pass of a restore.
//!
//! Each part's keys are strictly increasing (its reader refuses anything else), so a k-way
//! merge of the parts' streams meets every key of the checkpoint in increasing order, and a
//! key in two parts shows up as two equal keys one after the other: the check for duplicates
//! needs no set of keys. Memory is one read buffer and one value per part, and a heap of one
//! entry per part, whatever the number of keys.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::ErrorKind;
use std::path::PathBuf;

use parma_core::{Key, Layout};

use super::format::{Manifest, PartReader, StreamError};
use super::CheckpointError;

/// Read buffer per part by default, and what all parts' buffers share at most (never less
/// than [`BUFFER_MIN`] each).
pub(crate) const BUFFER_PER_PART: usize = 1 << 20;
const BUFFER_TOTAL: usize = 32 << 20;
const BUFFER_MIN: usize = 64 << 10;

/// The default read buffer of each of `parts` parts.
pub(crate) fn default_buffer(parts: usize) -> usize {
    (BUFFER_TOTAL / parts.max(1)).clamp(BUFFER_MIN, BUFFER_PER_PART)
}

/// Which pass a walk is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Everything is checked; a refusal names the first failing part in the manifest's
    /// order, as reading the parts one after the other would, and a duplicate key only when
    /// every part is sound.
    Check,
    /// The parts were checked already: whatever differs now (size, content, SHA-256) means
    /// a part changed since, and is reported as [`CheckpointError::Checksum`] at once.
    Apply,
}

/// What the walk needs of the checkpoint.
pub(crate) struct Walk<'a> {
    pub(crate) dir: &'a std::path::Path,
    pub(crate) manifest: &'a Manifest,
    pub(crate) layout: Option<&'a Layout>,
    pub(crate) buffer: usize,
}

impl Walk<'_> {
    /// Calls `f` with every record of every part in increasing key order, checking every
    /// part as `pass` says; the first error `f` returns ends the walk.
    pub(crate) fn run(
        &self,
        pass: Pass,
        mut f: impl FnMut(Key, &[f32]) -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        let parts = &self.manifest.parts;
        let mut failed: Vec<Option<CheckpointError>> = (0..parts.len()).map(|_| None).collect();
        let mut readers: Vec<Option<PartReader<File>>> = (0..parts.len()).map(|_| None).collect();
        let mut heap = BinaryHeap::with_capacity(parts.len());
        for i in 0..parts.len() {
            match self.open(i) {
                Ok(r) => readers[i] = Some(r),
                Err(e) => failed[i] = Some(e),
            }
            if let Some(e) = self.advance(i, &mut readers, &mut heap) {
                failed[i] = Some(e);
            }
            self.stop_early(pass, &mut failed)?;
        }
        let (mut last, mut duplicate) = (None, None);
        while let Some(Reverse((key, i))) = heap.pop() {
            if last == Some(key) && duplicate.is_none() {
                if pass == Pass::Apply {
                    return Err(self.checksum(i));
                }
                duplicate = Some(key);
            }
            last = Some(key);
            if let Some(r) = &readers[i] {
                f(key, r.value())?;
            }
            if let Some(e) = self.advance(i, &mut readers, &mut heap) {
                failed[i] = Some(e);
            }
            self.stop_early(pass, &mut failed)?;
        }
        if let Some(e) = failed.into_iter().flatten().next() {
            return Err(e);
        }
        match duplicate {
            Some(key) => Err(CheckpointError::DuplicateKey { dir: self.dir.to_path_buf(), key }),
            None => Ok(()),
        }
    }

    /// In the apply pass, the first failure ends the walk (as a checksum error unless the
    /// file could not be read at all).
    fn stop_early(&self, pass: Pass, failed: &mut [Option<CheckpointError>]) -> Result<(), CheckpointError> {
        if pass == Pass::Check {
            return Ok(());
        }
        match failed.iter().position(Option::is_some) {
            None => Ok(()),
            Some(i) => match failed[i].take() {
                Some(e @ (CheckpointError::Io { .. } | CheckpointError::MissingPart { .. })) => Err(e),
                _ => Err(self.checksum(i)),
            },
        }
    }

    fn path(&self, i: usize) -> PathBuf {
        self.dir.join(&self.manifest.parts[i].file)
    }

    fn checksum(&self, i: usize) -> CheckpointError {
        CheckpointError::Checksum { path: self.path(i) }
    }

    /// Part `i` opened, its size checked against the manifest and its header read and
    /// checked.
    fn open(&self, i: usize) -> Result<PartReader<File>, CheckpointError> {
        let (p, path) = (&self.manifest.parts[i], self.path(i));
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(CheckpointError::MissingPart { path, node: p.node });
            }
            Err(e) => return Err(CheckpointError::io("read", &path, e)),
        };
        let actual = file.metadata().map_err(|e| CheckpointError::io("read", &path, e))?.len();
        if actual != p.bytes {
            return Err(CheckpointError::Truncated { path, expected: p.bytes, actual });
        }
        let mut r = PartReader::new(file, self.buffer);
        let h = match r.read_header() {
            Ok(h) => h,
            Err(e) => return Err(self.settle(i, e, r)),
        };
        if h.node != p.node || h.records != p.keys {
            let reason = format!(
                "its header says node {} with {} keys, the manifest node {} with {}",
                h.node, h.records, p.node, p.keys
            );
            return Err(self.settle(i, StreamError::Malformed(reason), r));
        }
        Ok(r)
    }

    /// Reads part `i`'s next record and puts its key on the heap; after its last record, or
    /// on an error, the reader is finished and dropped, and what is wrong returned.
    fn advance(
        &self,
        i: usize,
        readers: &mut [Option<PartReader<File>>],
        heap: &mut BinaryHeap<Reverse<(Key, usize)>>,
    ) -> Option<CheckpointError> {
        let r = readers[i].as_mut()?;
        let next = r.next(|k, len| len_ok(self.manifest, self.layout, k, len));
        let r = match next {
            Ok(Some(k)) => {
                heap.push(Reverse((k, i)));
                return None;
            }
            Ok(None) => readers[i].take()?,
            Err(e) => {
                let r = readers[i].take()?;
                return Some(self.settle(i, e, r));
            }
        };
        let path = self.path(i);
        match r.finish() {
            Err(e) => Some(CheckpointError::io("read", &path, e)),
            Ok((_, bytes)) if bytes != self.manifest.parts[i].bytes => Some(CheckpointError::Truncated {
                path,
                expected: self.manifest.parts[i].bytes,
                actual: bytes,
            }),
            Ok((sha, _)) if sha != self.manifest.parts[i].sha256 => Some(CheckpointError::Checksum { path }),
            Ok(_) => None,
        }
    }

    /// The error of part `i` whose reading failed with `e`: a file whose SHA-256 is not the
    /// manifest's is damaged (whatever its bytes look like), one whose SHA-256 matches is
    /// malformed.
    fn settle(&self, i: usize, e: StreamError, r: PartReader<File>) -> CheckpointError {
        let (p, path) = (&self.manifest.parts[i], self.path(i));
        let reason = match e {
            StreamError::Io(e) => return CheckpointError::io("read", &path, e),
            StreamError::Malformed(reason) => reason,
        };
        match r.finish() {
            Err(e) => CheckpointError::io("read", &path, e),
            Ok((_, bytes)) if bytes != p.bytes => {
                CheckpointError::Truncated { path, expected: p.bytes, actual: bytes }
            }
            Ok((sha, _)) if sha != p.sha256 => CheckpointError::Checksum { path },
            Ok(_) => CheckpointError::CorruptPart { path, reason },
        }
    }
}

/// Whether `key` may have a value of `len`: inside the key range, of the length `layout`
/// gives (or the manifest's uniform one without a layout), at most the manifest's longest.
fn len_ok(m: &Manifest, layout: Option<&Layout>, k: Key, len: usize) -> Result<(), String> {
    let want = match layout {
        Some(l) => l.len_of(k),
        None if k.0 < m.key_end => m.value_len.map(|v| v as usize),
        None => None,
    };
    match want {
        _ if k.0 >= m.key_end => Err(format!("key {} outside the key range 0..{}", k.0, m.key_end)),
        Some(w) if w != len => Err(format!("key {} has {len} values, the layout says {w}", k.0)),
        None if len == 0 || len > m.value_len_max as usize => {
            Err(format!("key {} has {len} values, at most {} allowed", k.0, m.value_len_max))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
