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
    /// A runtime option is out of its range.
    Option {
        /// The option's name in [`crate::Options`].
        name: &'static str,
        /// What it must be.
        why: &'static str,
    },
    /// The driver thread could not be spawned.
    Spawn(std::io::Error),
    /// The driver thread panicked (a bug in parma); every waiting worker got `Closed`.
    DriverPanicked,
    /// The node stopped without finishing its work: its transport closed under it, or
    /// `Options::drain_timeout` ran out while some workers were still running or some work
    /// was still outstanding ([`Undrained`] says which). The transport is closed and the
    /// thread joined all the same.
    NotDrained(Box<Stats>, Undrained),
}

/// Why a node's drain ended before its work did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undrained {
    /// The transport reported itself closed (a kill, or a close not made by the driver).
    TransportClosed,
    /// The driver's host (a transport's thread) gave no outcome within the drain timeout and
    /// a grace period: it stopped running the driver. Its thread is not joined.
    HostStalled,
    /// The node's waits had been aborted (`NodeRuntime::abort`): it stopped without draining.
    Aborted,
    /// `Options::drain_timeout` ran out with this still outstanding.
    TimedOut {
        /// Workers neither finalized nor dropped (counted only by a graceful stop).
        workers_live: usize,
        /// A command waited in the queue.
        commands_waiting: bool,
        /// Frames the node made that the transport had not taken.
        frames_unsent: usize,
        /// The node itself was not idle (requests pending, rounds due, operations waiting).
        node_busy: bool,
    },
}

impl fmt::Display for Undrained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undrained::TransportClosed => f.write_str("its transport closed"),
            Undrained::HostStalled => f.write_str("the thread hosting its driver stopped running it"),
            Undrained::Aborted => f.write_str("its workers' waits were aborted"),
            Undrained::TimedOut { workers_live, commands_waiting, frames_unsent, node_busy } => write!(
                f,
                "the drain timeout ran out with {workers_live} workers live, {} command waiting, \
                 {frames_unsent} frames unsent and the node {}",
                if *commands_waiting { "a" } else { "no" },
                if *node_busy { "busy" } else { "idle" }
            ),
        }
    }
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
            Error::Option { name, why } => write!(f, "runtime option {name} {why}"),
            Error::Spawn(e) => write!(f, "could not spawn the driver thread: {e}"),
            Error::DriverPanicked => f.write_str("the driver thread panicked"),
            Error::NotDrained(_, why) => write!(f, "the node stopped before its work was drained: {why}"),
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
