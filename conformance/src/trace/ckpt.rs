//! The `checkpoint` and `restore` commands: every worker of every node calls
//! [`Worker::checkpoint`] or [`Worker::restore`] at once, on a subdirectory of a scratch
//! directory that the trace run owns, so that a checkpoint one cluster block wrote can be
//! restored by a later block, of another node count or technique.
//!
//! The scratch directory is made (under [`std::env::temp_dir`], with a name no other run
//! uses) when a trace first needs it, and removed with everything in it when the run ends,
//! however it ends. Every node sees it: the executors run every node on this machine (the
//! process executor passes its path to the agents). A `name=` maps to the subdirectory of that
//! name; names are short words, so that no trace reaches outside the scratch directory.
//!
//! What a command prints is the same on every executor: `ok` if every worker's call succeeded,
//! else `error: ` and every distinct error (a [`CheckpointError`]'s Display), in node and
//! worker order, with the scratch directory's path written as [`SCRATCH`].
//!
//! [`CheckpointError`]: parma_runtime::checkpoint::CheckpointError

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parma_runtime::Worker;
use serde::{Deserialize, Serialize};

use super::Args;

/// What an executor without runtime workers (the simulator) answers: its transport skips
/// the traces that use the commands.
pub const UNSUPPORTED: &str =
    "unsupported: this executor has no runtime `Worker`, so no checkpoints (skip the trace)";
/// How the scratch directory's path is written in a command's output.
pub const SCRATCH: &str = "<scratch>";
/// Longest `name=`.
const NAME_LEN_MAX: usize = 64;
/// Attempts at a fresh scratch directory name before giving up.
const SCRATCH_ATTEMPTS: u32 = 16;

/// Which of the two collective calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointOp {
    /// [`Worker::checkpoint`], with nothing extra in the manifest.
    Checkpoint,
    /// [`Worker::restore`].
    Restore,
}

impl CheckpointOp {
    /// The trace command's name.
    pub fn name(self) -> &'static str {
        match self {
            CheckpointOp::Checkpoint => "checkpoint",
            CheckpointOp::Restore => "restore",
        }
    }
}

/// The `name=` of a `checkpoint` or `restore` line: 1 to 64 ASCII letters, digits, `-`, `_`.
pub fn parse_name<'a>(a: &Args<'a>) -> Result<&'a str, String> {
    let name = a.req("name")?;
    let ok = !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(format!("`name=` is 1 to {NAME_LEN_MAX} letters, digits, `-` or `_`, not `{name}`"));
    }
    Ok(name)
}

/// One worker's part: its call on `dir`, its error as text.
pub fn call(w: &mut Worker, op: CheckpointOp, dir: &Path) -> Result<(), String> {
    let r = match op {
        CheckpointOp::Checkpoint => w.checkpoint(dir, &BTreeMap::new()),
        CheckpointOp::Restore => w.restore(dir).map(|_| ()),
    };
    r.map_err(|e| e.to_string())
}

/// Every worker's result as one answer: `Ok`, or every distinct error in the order given.
pub fn combine(results: impl IntoIterator<Item = Result<(), String>>) -> Result<(), String> {
    let mut failures: Vec<String> = Vec::new();
    for r in results {
        if let Err(e) = r {
            if !failures.contains(&e) {
                failures.push(e);
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// The trace run's scratch directory: made when first needed, removed when dropped.
#[derive(Debug, Default)]
pub struct Scratch {
    root: Option<PathBuf>,
}

impl Scratch {
    /// The directory a checkpoint called `name` lives in (not made: `checkpoint` makes it).
    pub fn dir(&mut self, name: &str) -> Result<PathBuf, String> {
        let root = match self.root.take() {
            Some(root) => root,
            None => fresh_dir()?,
        };
        let dir = root.join(name);
        self.root = Some(root);
        Ok(dir)
    }

    /// `text` with the scratch directory's path written as [`SCRATCH`].
    pub fn redact(&self, text: &str) -> String {
        match self.root.as_ref().and_then(|r| r.to_str()) {
            Some(root) if !root.is_empty() => text.replace(root, SCRATCH),
            _ => text.to_string(),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(root) = self.root.take() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// A new empty directory under the system's temporary one, named after this process, a
/// counter and the time, made with `create_dir` so that it is never one that existed.
fn fresh_dir() -> Result<PathBuf, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    let mut last = None;
    for _ in 0..SCRATCH_ATTEMPTS {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("parma-trace-{}-{n}-{nanos:08x}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(format!("cannot make a scratch directory in {}: {e}", base.display())),
        }
    }
    Err(format!("cannot make a fresh scratch directory in {}: {last:?}", base.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_words() {
        for (line, ok) in [
            ("checkpoint name=a", true),
            ("checkpoint name=epoch_3-b", true),
            ("checkpoint name=../up", false),
            ("checkpoint name=a/b", false),
            ("checkpoint name=", false),
            ("checkpoint", false),
        ] {
            let a = Args::parse(line).unwrap();
            assert_eq!(parse_name(&a).is_ok(), ok, "{line}: {:?}", parse_name(&a));
        }
        let long = format!("restore name={}", "x".repeat(NAME_LEN_MAX + 1));
        assert!(parse_name(&Args::parse(&long).unwrap()).unwrap_err().contains("1 to 64"));
        assert!(parse_name(&Args::parse("restore").unwrap()).unwrap_err().contains("needs `name=`"));
    }

    #[test]
    fn the_scratch_directory_is_made_once_redacted_and_removed() {
        let mut s = Scratch::default();
        assert_eq!(s.redact("/tmp/x"), "/tmp/x");
        let a = s.dir("a").unwrap();
        let root = a.parent().unwrap().to_path_buf();
        assert!(root.is_dir());
        assert_eq!(s.dir("b").unwrap(), root.join("b"));
        let said = format!("no checkpoint in {}: none", a.display());
        assert_eq!(s.redact(&said), "no checkpoint in <scratch>/a: none");
        std::fs::create_dir_all(&a).unwrap();
        drop(s);
        assert!(!root.exists());
        assert_ne!(Scratch::default().dir("a").unwrap(), a);
    }

    #[test]
    fn distinct_errors_are_kept_in_order() {
        assert_eq!(combine(vec![Ok(()), Ok(())]), Ok(()));
        let r = combine(vec![Err("x".into()), Ok(()), Err("y".into()), Err("x".into())]);
        assert_eq!(r, Err("x; y".into()));
    }
}
