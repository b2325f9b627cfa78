//! Why a checkpoint could not be written, read or restored.

use std::fmt;
use std::path::{Path, PathBuf};

use parma_core::{Key, OpError};

/// Why a checkpoint could not be written, read, restored or exported. Every refusal of a
/// checkpoint (all but `Io` during writing and `Worker`) comes before anything changed.
#[derive(Debug)]
#[non_exhaustive]
pub enum CheckpointError {
    /// An argument the call cannot work with.
    InvalidArgument(String),
    /// A file operation failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A worker operation of the collective protocol (barrier, sync, pull, set) failed.
    Worker {
        /// The operation.
        op: &'static str,
        /// The error.
        error: OpError,
    },
    /// The directory has no manifest: no checkpoint, or one whose writing did not finish.
    NoManifest {
        /// The directory.
        dir: PathBuf,
    },
    /// The manifest cannot be parsed or contradicts itself.
    BadManifest {
        /// The manifest's path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint is of another model than the cluster's.
    Mismatch {
        /// The checkpoint's directory.
        dir: PathBuf,
        /// What differs.
        what: &'static str,
        /// The checkpoint's.
        checkpoint: String,
        /// The cluster's.
        cluster: String,
    },
    /// A part the manifest lists is missing.
    MissingPart {
        /// The part's path.
        path: PathBuf,
        /// The node that wrote it.
        node: u16,
    },
    /// A part is shorter or longer than the manifest says.
    Truncated {
        /// The part's path.
        path: PathBuf,
        /// Bytes the manifest lists.
        expected: u64,
        /// Bytes on disk.
        actual: u64,
    },
    /// A part's SHA-256 is not the manifest's.
    Checksum {
        /// The part's path.
        path: PathBuf,
    },
    /// A part's content is malformed although its checksum matches (a bug in its writer).
    CorruptPart {
        /// The part's path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A key is in two parts.
    DuplicateKey {
        /// The checkpoint's directory.
        dir: PathBuf,
        /// The key.
        key: Key,
    },
    /// Writing did not complete on some node (its own call reports why); no manifest written.
    Incomplete {
        /// The directory.
        dir: PathBuf,
    },
}

impl CheckpointError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> CheckpointError {
        CheckpointError::Io { op, path: path.to_path_buf(), source }
    }

    pub(crate) fn worker(op: &'static str) -> impl Fn(OpError) -> CheckpointError {
        move |error| CheckpointError::Worker { op, error }
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CheckpointError as E;
        match self {
            E::InvalidArgument(s) => f.write_str(s),
            E::Io { op, path, source } => write!(f, "cannot {op} {}: {source}", path.display()),
            E::Worker { op, error } => write!(f, "checkpoint protocol: {op} failed: {error}"),
            E::NoManifest { dir } => write!(
                f,
                "no checkpoint in {}: it has no {} (a checkpoint whose writing did not finish has none)",
                dir.display(),
                super::format::MANIFEST
            ),
            E::BadManifest { path, reason } => {
                write!(f, "{} is not a valid parma checkpoint manifest: {reason}", path.display())
            }
            E::Mismatch { dir, what, checkpoint, cluster } => write!(
                f,
                "checkpoint {} is of another model: {what} {checkpoint} in the checkpoint, {cluster} in this cluster",
                dir.display()
            ),
            E::MissingPart { path, node } => {
                write!(f, "checkpoint part {} (node {node}) is missing", path.display())
            }
            E::Truncated { path, expected, actual } => write!(
                f,
                "checkpoint part {} is {actual} bytes, the manifest says {expected}: truncated or overwritten",
                path.display()
            ),
            E::Checksum { path } => write!(
                f,
                "checkpoint part {} fails its SHA-256 check: it is corrupted",
                path.display()
            ),
            E::CorruptPart { path, reason } => {
                write!(f, "checkpoint part {} is malformed: {reason}", path.display())
            }
            E::DuplicateKey { dir, key } => {
                write!(f, "checkpoint {} has key {} in two parts", dir.display(), key.0)
            }
            E::Incomplete { dir } => write!(
                f,
                "checkpoint {} was not completed: a node could not write its part (its own error says why)",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckpointError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
