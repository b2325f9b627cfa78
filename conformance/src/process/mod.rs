//! The conformance traces with one process per node: the `zmq-processes` transport.
//!
//! ## Room
//!
//! [`ProcessExecutor`] runs a trace's cluster as one **agent** process per node on
//! 127.0.0.1, over ZeroMQ, started the way a deployment starts nodes: each agent gets
//! `PARMA_RANK`, `PARMA_WORLD_SIZE`, `PARMA_RENDEZVOUS` and a fresh `PARMA_TOKEN` in its
//! environment, meets the others at the start-up's rendezvous (`parma_runtime::startup`) and
//! starts its node over ZeroMQ with the suite's timers (the `parma` binary's
//! `parma_cli::conformance_zmq`: this crate names no transport).
//! What a node does for a trace command is the same code as in one process
//! ([`crate::trace::HostedNode`]); only the way the calls reach it differs. A `kill` is a
//! SIGKILL of the node's process.
//!
//! This crate does not build the agent's program: the `parma` binary serves as one
//! (`parma conformance-agent`, hidden), and the executor is told where it is
//! ([`AgentCommand`]). The agent's side is [`agent::serve_with`].
//!
//! ## The conversation
//!
//! One JSON object per line ([`wire`]): the executor writes the setup, the agent answers
//! `Ready` once its node is up; then the executor writes one request and the agent writes its
//! response, until `Shutdown` or the end of the agent's stdin (the executor is gone: the agent
//! stops at once). An agent answers one request at a time. A call that needs every node at
//! once (a barrier) is written to every agent before any answer is read, so every node's
//! workers enter it together. Every wait for an answer is bounded; every line is bounded in
//! length; nothing an agent writes can make the executor panic.

pub mod agent;
mod child;
mod executor;
pub mod wire;

use std::path::PathBuf;

pub use executor::ProcessExecutor;

/// The hidden subcommand of `parma` that runs an agent.
pub const AGENT_SUBCOMMAND: &str = "conformance-agent";
/// The environment variable that names the `parma` binary for [`AgentCommand::from_env`].
pub const PARMA_BIN_VAR: &str = "PARMA_BIN";

/// How to start an agent: a program and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl AgentCommand {
    /// `<parma> conformance-agent`, with `parma` the path of the `parma` binary.
    pub fn parma(parma: impl Into<PathBuf>) -> AgentCommand {
        AgentCommand { program: parma.into(), args: vec![AGENT_SUBCOMMAND.into()] }
    }

    /// [`AgentCommand::parma`] with the binary named by `PARMA_BIN`.
    pub fn from_env() -> Result<AgentCommand, String> {
        match std::env::var_os(PARMA_BIN_VAR) {
            Some(p) if !p.is_empty() => Ok(AgentCommand::parma(p)),
            _ => Err(format!(
                "the zmq-processes transport starts a `parma {AGENT_SUBCOMMAND}` per node: set \
                 {PARMA_BIN_VAR} to the parma binary (or run `parma conformance`)"
            )),
        }
    }
}
