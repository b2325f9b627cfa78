//! The whole start-up of one node of a multi-process cluster, for any transport that binds
//! before the rendezvous: bind, meet the others with the bound endpoint, start the transport
//! on the peer table, start the node's runtime on it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parma_core::session::Token;
use parma_core::{Config, NodeId, Transport};

use super::{establish, ClusterToken, Launch, StartupError};
use crate::{NodeRuntime, Options, Worker};

/// A transport of a multi-process cluster that listens before the rendezvous and connects
/// after it. ZeroMQ's and RDMA's `Bound` implement it; so can a transport of yours, which
/// then starts like theirs through [`start_node`].
pub trait BoundTransport: Sized {
    /// The started transport.
    type Transport: Transport + Send + 'static;
    /// Why starting it failed.
    type Error: fmt::Display;

    /// Where peers reach this node (e.g. `tcp://10.0.0.5:40123`): what the rendezvous
    /// hands to the others.
    fn endpoint(&self) -> &str;

    /// Starts the transport as node `me`, with `peers[i]` node `i`'s endpoint (this node's
    /// own entry included), the configuration `digest` every node shares and the cluster
    /// `token`.
    fn start(
        self,
        me: NodeId,
        peers: Vec<String>,
        digest: u64,
        token: Arc<dyn Token + Send + Sync>,
    ) -> Result<Self::Transport, Self::Error>;

    /// Starts the node's runtime on the started transport: [`NodeRuntime::start_with`]
    /// unless the transport runs the driver on a thread of its own.
    fn start_runtime(
        transport: Self::Transport,
        me: NodeId,
        cfg: Config,
        opts: Options,
    ) -> Result<(NodeRuntime, Vec<Worker>), crate::Error> {
        NodeRuntime::start_with(cfg, me, transport, opts)
    }
}

/// A node started by [`start_node`].
#[derive(Debug)]
pub struct StartedNode {
    /// This node's id (its rank).
    pub me: NodeId,
    /// The node's runtime.
    pub runtime: NodeRuntime,
    /// Its workers, one per `Config::workers_per_node`.
    pub workers: Vec<Worker>,
}

/// Why [`start_node`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeStartError {
    /// The launcher's environment, the token or the rendezvous.
    Startup(StartupError),
    /// The transport did not start (its own message).
    Transport(String),
    /// The runtime did not start.
    Runtime(crate::Error),
}

impl fmt::Display for NodeStartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeStartError::Startup(e) => write!(f, "start-up failed: {e}"),
            NodeStartError::Transport(e) => write!(f, "the transport did not start: {e}"),
            NodeStartError::Runtime(e) => write!(f, "the node did not start: {e}"),
        }
    }
}

impl std::error::Error for NodeStartError {}

impl From<StartupError> for NodeStartError {
    fn from(e: StartupError) -> Self {
        NodeStartError::Startup(e)
    }
}

/// Meets the other nodes with `bound`'s endpoint at the rendezvous `launch` names (rank 0
/// runs it), then starts the transport on the peer table. `Ok(None)`: this process is no
/// node (ps-lite's scheduler, after running the rendezvous). `digest` is what every node
/// must agree on ([`parma_core::cluster_digest`]; `docs/session.md` specifies it); `timeout`
/// bounds the rendezvous.
pub fn connect<B: BoundTransport>(
    launch: &Launch,
    bound: B,
    digest: u64,
    token: ClusterToken,
    timeout: Duration,
) -> Result<Option<(NodeId, B::Transport)>, NodeStartError> {
    let table = establish(launch, bound.endpoint(), digest, &token, timeout)?;
    let Some(me) = table.me() else { return Ok(None) };
    let peers: Vec<String> = table.iter().map(|(_, e)| e.to_string()).collect();
    let transport = bound
        .start(me, peers, digest, Arc::new(token))
        .map_err(|e| NodeStartError::Transport(e.to_string()))?;
    Ok(Some((me, transport)))
}

/// [`connect`], then the node's runtime with `cfg` and `opts` on the started transport.
pub fn start_node<B: BoundTransport>(
    launch: &Launch,
    bound: B,
    (cfg, opts): (Config, Options),
    digest: u64,
    token: ClusterToken,
    timeout: Duration,
) -> Result<Option<StartedNode>, NodeStartError> {
    let Some((me, transport)) = connect(launch, bound, digest, token, timeout)? else { return Ok(None) };
    let (runtime, workers) = B::start_runtime(transport, me, cfg, opts).map_err(NodeStartError::Runtime)?;
    Ok(Some(StartedNode { me, runtime, workers }))
}
