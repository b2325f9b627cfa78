//! Errors of starting and stopping a node. Worker operations return [`parma_core::OpError`].

use std::fmt;

use parma_core::{ConfigError, NodeId};

use crate::stats::Stats;

/// Why a node could not start, or did not stop cleanly.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot work for this node.
    Config(ConfigError),
    /// The transport belongs to another node than the one being started.
    WrongTransport {
        /// The node being started.
        me: NodeId,
        /// The node the transport belongs to.
        transport: NodeId,
    },
    /// The configured frame length is larger than the transport accepts.
    FrameLenMax {
        /// `Config::frame_len_max`.
        config: usize,
        /// The transport's `frame_len_max()`.
        transport: usize,
    },
    /// The driver thread could not be spawned.
    Spawn(std::io::Error),
    /// The driver thread panicked (a bug in parma); every waiting worker got `Closed`.
    DriverPanicked,
    /// The node stopped without finishing its work within `Options::drain_timeout`: some
    /// workers were still running or some requests were still outstanding. The transport is
    /// closed and the thread joined all the same.
    NotDrained(Box<Stats>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => write!(f, "invalid configuration: {e}"),
            Error::WrongTransport { me, transport } => {
                write!(f, "node {me} was given the transport of node {transport}")
            }
            Error::FrameLenMax { config, transport } => {
                write!(f, "configured frame_len_max {config} exceeds the transport's maximum {transport}")
            }
            Error::Spawn(e) => write!(f, "could not spawn the driver thread: {e}"),
            Error::DriverPanicked => f.write_str("the driver thread panicked"),
            Error::NotDrained(_) => f.write_str("the node stopped before its work was drained"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) => Some(e),
            Error::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(e)
    }
}
