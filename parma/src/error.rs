//! The façade's error: every way a call of this crate can fail, each with a message that
//! says what went wrong.

use std::fmt;

use parma_core::{ConfigError, NodeId, OpError};
use parma_runtime::checkpoint::CheckpointError;
use parma_runtime::startup::{NodeStartError, StartupError};

/// Why a call of this crate, or a worker operation inside [`crate::LocalCluster::run`], failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A worker operation (`pull`, `push`, `announce`, `advance_clock`, a barrier...).
    Op(OpError),
    /// The configuration or layout is invalid.
    Config(ConfigError),
    /// A node's runtime did not start or stop cleanly.
    Runtime(parma_runtime::Error),
    /// A multi-process node did not start (environment, token, rendezvous, transport).
    Start(NodeStartError),
    /// Writing or restoring a checkpoint.
    Checkpoint(CheckpointError),
    /// An option of this crate cannot work; the message says which and why.
    Options(String),
    /// A worker's closure panicked in [`crate::LocalCluster::run`]; the cluster was aborted.
    WorkerPanicked {
        /// The worker's node.
        node: NodeId,
        /// The worker's index on its node.
        worker: u16,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Op(e) => write!(f, "{e}"),
            Error::Config(e) => write!(f, "configuration: {e}"),
            Error::Runtime(e) => write!(f, "{e}"),
            Error::Start(e) => write!(f, "{e}"),
            Error::Checkpoint(e) => write!(f, "checkpoint: {e}"),
            Error::Options(e) => write!(f, "bad options: {e}"),
            Error::WorkerPanicked { node, worker } => {
                write!(
                    f,
                    "worker {worker} of node {} panicked; every node of the cluster was aborted",
                    node.0
                )
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Op(e) => Some(e),
            Error::Config(e) => Some(e),
            Error::Runtime(e) => Some(e),
            Error::Start(e) => Some(e),
            Error::Checkpoint(e) => Some(e),
            Error::Options(_) | Error::WorkerPanicked { .. } => None,
        }
    }
}

macro_rules! from {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::$v(e)
            }
        })*
    };
}

from!(
    OpError => Op,
    ConfigError => Config,
    parma_runtime::Error => Runtime,
    NodeStartError => Start,
    CheckpointError => Checkpoint,
);

impl From<StartupError> for Error {
    fn from(e: StartupError) -> Error {
        Error::Start(NodeStartError::Startup(e))
    }
}

impl From<parma_core::SampleError> for Error {
    fn from(e: parma_core::SampleError) -> Error {
        Error::Op(OpError::Sampling(e))
    }
}
