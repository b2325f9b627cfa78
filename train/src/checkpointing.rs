//! Checkpoints of a training run (`--checkpoint-every N --checkpoint-dir DIR`, `--resume DIR`).
//!
//! At epoch granularity: after every N-th epoch (its evaluation included) all threads write a
//! checkpoint of the whole model ([`parma::Worker::checkpoint`]), recording the epoch,
//! the task, the model and the data in the manifest; each one replaces the one before in DIR.
//! A resumed run restores the model ([`parma::Worker::restore`]) and trains epochs
//! `k + 1 ..= --epochs` of the schedule the options give, where `k` is the checkpoint's epoch.
//! The data order of an epoch is a function of the seed, the thread and the epoch, so a resumed
//! run reads the data in the same order as an uninterrupted one. What is not in a checkpoint is
//! the state of the threads' random generators (negatives drawn outside the sampling manager,
//! and the sampling manager's own): a task with negatives continues with other draws, a task
//! without (MF) continues exactly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parma::checkpoint::Checkpoint;

use super::{Engine, TrainError};

/// Checkpoints written during a run, and the one it resumes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// Write a checkpoint after every this many epochs (0: never).
    pub every: u32,
    /// Where to write them (each replaces the one before).
    pub dir: Option<PathBuf>,
    /// Restore the model from this checkpoint and train the epochs after its own.
    pub resume: Option<PathBuf>,
}

impl CheckpointOptions {
    /// Refuses options that cannot work, with the flag to fix.
    pub fn check(&self, engine: Engine) -> Result<(), TrainError> {
        let bad = |s: &str| Err(TrainError::Options(s.into()));
        match (self.every, &self.dir) {
            (0, Some(_)) => return bad("--checkpoint-dir needs --checkpoint-every N (N ≥ 1)"),
            (1.., None) => return bad("--checkpoint-every needs --checkpoint-dir DIR"),
            (_, Some(d)) if d.as_os_str().is_empty() => return bad("--checkpoint-dir is an empty path"),
            _ => {}
        }
        if (self.every > 0 || self.resume.is_some()) && engine != Engine::Parma {
            return bad("--checkpoint-every and --resume need --engine parma");
        }
        if let (Some(r), Some(d)) = (&self.resume, &self.dir) {
            if r == d {
                return bad("--resume and --checkpoint-dir name the same directory: the first new checkpoint would replace the one being resumed; give another --checkpoint-dir");
            }
        }
        Ok(())
    }

    /// The directory to write a checkpoint to after `epoch`, if one is due.
    pub fn due(&self, epoch: u32) -> Option<&Path> {
        (self.every > 0 && epoch % self.every == 0).then_some(self.dir.as_deref()).flatten()
    }
}

/// What a training run records in a checkpoint's manifest.
pub fn extra(task: &str, model: &str, data: &str, epoch: u32) -> BTreeMap<String, String> {
    [("epoch", epoch.to_string()), ("task", task.into()), ("model", model.into()), ("data", data.into())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// The epoch the checkpoint in `dir` was written after, checked against the run that resumes
/// it (same task, model and data; epochs left to train). The model itself (layout, seed) is
/// checked when it is restored.
pub fn resumed_epoch(
    dir: &Path,
    task: &str,
    model: &str,
    data: &str,
    epochs: u32,
) -> Result<u32, TrainError> {
    let ck = Checkpoint::open(dir).map_err(TrainError::Checkpoint)?;
    let m = ck.manifest();
    let bad = |s: String| Err(TrainError::Options(format!("--resume {}: {s}", dir.display())));
    for (key, ours) in [("task", task), ("model", model), ("data", data)] {
        match m.extra.get(key) {
            Some(v) if v == ours => {}
            Some(v) => return bad(format!("the checkpoint is of {key} `{v}`, this run's is `{ours}`")),
            None => {
                return bad(format!("the checkpoint records no {key}: it was not written by `parma train`"))
            }
        }
    }
    let epoch = match m.extra.get("epoch").map(|e| e.parse::<u32>()) {
        Some(Ok(e)) => e,
        _ => return bad("the checkpoint records no epoch: it was not written by `parma train`".into()),
    };
    if epoch >= epochs {
        return bad(format!(
            "the checkpoint is after epoch {epoch}, and --epochs is {epochs}: nothing left to train"
        ));
    }
    Ok(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_at_the_edge() {
        let o = |every, dir: Option<&str>, resume: Option<&str>| CheckpointOptions {
            every,
            dir: dir.map(PathBuf::from),
            resume: resume.map(PathBuf::from),
        };
        assert!(o(2, Some("c"), None).check(Engine::Parma).is_ok());
        assert!(o(0, None, Some("c")).check(Engine::Parma).is_ok());
        for (bad, says) in [
            (o(2, None, None), "needs --checkpoint-dir"),
            (o(0, Some("c"), None), "needs --checkpoint-every"),
            (o(1, Some(""), None), "empty path"),
            (o(1, Some("c"), Some("c")), "same directory"),
        ] {
            let e = bad.check(Engine::Parma).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        let e = o(0, None, Some("c")).check(Engine::Hogwild).unwrap_err().to_string();
        assert!(e.contains("--engine parma"), "{e}");
        assert_eq!(o(2, Some("c"), None).due(4), Some(Path::new("c")));
        assert_eq!(o(2, Some("c"), None).due(3), None);
    }
}
