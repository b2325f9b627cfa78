//! Rust errors as Python exceptions.
//!
//! Bad input from the caller becomes the built-in exception a Python user expects, with the
//! Rust error's message: `IndexError` for a key outside the layout, `ValueError` for wrong
//! lengths, shapes, windows and options, `TypeError` for a wrong dtype. What happened to the
//! cluster becomes a class of `parma.errors` (re-exported by `parma`), all under
//! `parma.ParmaError`: a failed peer, a timeout, a closed node, a job refused at the
//! rendezvous, start-up and checkpoint failures.

use parma::checkpoint::CheckpointError;
use parma::startup::{NodeStartError, StartupError};
use parma::{ConfigError, Error, OpError, RuntimeError, SampleError};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// An exception of the Python module `parma.errors`, by class name.
pub fn parma_error(name: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        match py.import("parma.errors").and_then(|m| m.getattr(name)) {
            Ok(cls) => match cls.call1((msg.clone(),)) {
                Ok(e) => PyErr::from_value(e),
                Err(e) => e,
            },
            // The pure-Python half is missing (the extension imported on its own).
            Err(_) => pyo3::exceptions::PyRuntimeError::new_err(msg),
        }
    })
}

pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

pub fn type_error(msg: impl Into<String>) -> PyErr {
    PyTypeError::new_err(msg.into())
}

/// An operation's error.
pub fn op(e: OpError) -> PyErr {
    let msg = e.to_string();
    match e {
        OpError::KeyOutsideLayout { .. } => PyIndexError::new_err(msg),
        OpError::ValueLength { .. }
        | OpError::DuplicateKey { .. }
        | OpError::IntentWindow { .. }
        | OpError::InvalidArgument => PyValueError::new_err(msg),
        OpError::Sampling(s) => sampling(s),
        OpError::PeerFailed { .. } | OpError::Unreachable { .. } | OpError::WorkerLeft { .. } => {
            parma_error("PeerFailedError", msg)
        }
        OpError::Timeout | OpError::BarrierTimeout | OpError::GateTimeout | OpError::QueueStalled => {
            parma_error("TimeoutError", msg)
        }
        OpError::Closed | OpError::Aborted => parma_error("ClosedError", msg),
        _ => parma_error("ParmaError", msg),
    }
}

/// A sampling error: the caller's argument, or a mismatch between nodes.
pub fn sampling(e: SampleError) -> PyErr {
    let msg = e.to_string();
    match e {
        SampleError::DistributionMismatch { .. } => parma_error("ParmaError", msg),
        _ => PyValueError::new_err(msg),
    }
}

pub fn config(e: ConfigError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub fn checkpoint(e: CheckpointError) -> PyErr {
    let msg = e.to_string();
    match e {
        CheckpointError::InvalidArgument(_) => PyValueError::new_err(msg),
        _ => parma_error("CheckpointError", msg),
    }
}

pub fn startup(e: &StartupError) -> PyErr {
    let msg = e.to_string();
    match e {
        StartupError::WrongToken { .. }
        | StartupError::DigestMismatch { .. }
        | StartupError::WorldMismatch { .. }
        | StartupError::Version { .. }
        | StartupError::RankOutsideWorld { .. }
        | StartupError::DuplicateRank { .. }
        | StartupError::MixedRanks => parma_error("RefusedError", msg),
        StartupError::Missing { .. } => parma_error("StartupTimeoutError", msg),
        _ => parma_error("StartupError", msg),
    }
}

/// An error of the façade.
pub fn facade(e: Error) -> PyErr {
    match e {
        Error::Op(e) => op(e),
        Error::Config(e) => config(e),
        Error::Checkpoint(e) => checkpoint(e),
        Error::Start(NodeStartError::Startup(e)) => startup(&e),
        Error::Start(e) => parma_error("StartupError", e.to_string()),
        Error::Runtime(e) => runtime(e),
        Error::Options(msg) => PyValueError::new_err(msg),
        other => parma_error("ParmaError", other.to_string()),
    }
}

pub fn runtime(e: RuntimeError) -> PyErr {
    parma_error("ParmaError", e.to_string())
}
