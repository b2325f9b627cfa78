//! `parma node`'s start-up: the façade's (`parma::node`), with the command line's options.
//! ZeroMQ over TCP, or RDMA verbs when `parma` was built with the `rdma` feature.

use parma_core::{Config, NodeId};
use parma_runtime::startup::{ClusterToken, Launch};
use parma_runtime::{NodeRuntime, Options, Worker};

use crate::node::{NetOptions, NodeError};

pub use parma::node::NodeTransport;

/// `zmq` or `rdma`.
pub fn parse_node_transport(name: &str) -> Result<NodeTransport, String> {
    NodeTransport::from_name(name).map_err(|e| e.to_string())
}

/// A started node: its id, runtime and workers.
type Started = (NodeId, NodeRuntime, Vec<Worker>);

/// Binds the transport `opts` names, meets the others, starts the node's runtime with `run`.
/// `None`: not a node (ps-lite's scheduler). The digest it brings to the rendezvous is
/// `parma_runtime::startup::cluster_digest` of the configuration, `opts.job_digest` and the
/// peer timeout; the cluster token comes from the environment.
pub(crate) fn start(
    opts: &NetOptions,
    launch: &Launch,
    cfg: Config,
    run: Options,
) -> Result<Option<Started>, NodeError> {
    if opts.peer_timeout.as_micros() < 100_000 {
        return Err(NodeError::Options("--peer-timeout-ms must be at least 100".into()));
    }
    let mut n = parma::node::NodeOptions::default();
    n.transport = opts.transport;
    n.bind = opts.bind.clone();
    n.advertise = opts.advertise.clone();
    n.peer_timeout = opts.peer_timeout;
    n.startup_timeout = opts.startup_timeout;
    n.job_digest = opts.job_digest;
    let node = parma::node::start_with_launch(launch, cfg, &n, run).map_err(NodeError::Start)?;
    Ok(node.map(|c| (c.me, c.runtime, c.workers)))
}

/// A conformance agent's node over RDMA (`parma conformance-agent --transport rdma`), with
/// the suite's timers: a `kill` is noticed within about a second.
#[cfg(feature = "rdma")]
pub fn start_agent_node_rdma(
    launch: &Launch,
    cfg: Config,
    digest: u64,
    token: ClusterToken,
) -> Result<parma_conformance::trace::HostedNode, String> {
    use parma_conformance::process::agent::STARTUP_TIMEOUT;
    use parma_runtime::startup::connect;
    use parma_transport_rdma::{Bound as RdmaBound, RdmaOptions};

    let mut o = RdmaOptions::loopback();
    o.heartbeat_interval = std::time::Duration::from_millis(100);
    o.peer_timeout = std::time::Duration::from_millis(1000);
    o.linger = std::time::Duration::from_millis(500);
    o.frame_len_max = o.frame_len_max.max(cfg.frame_len_max);
    let bound = RdmaBound::bind(o).map_err(|e| e.to_string())?;
    let (me, transport) = connect(launch, bound, digest, token, STARTUP_TIMEOUT)
        .map_err(|e| e.to_string())?
        .ok_or("the start-up made this agent no node")?;
    parma_conformance::trace::HostedNode::start(cfg, me, transport)
}

/// Without the `rdma` feature: an error that says how to build it.
#[cfg(not(feature = "rdma"))]
pub fn start_agent_node_rdma(
    _launch: &Launch,
    _cfg: Config,
    _digest: u64,
    _token: ClusterToken,
) -> Result<parma_conformance::trace::HostedNode, String> {
    Err("this parma was built without RDMA: cargo build --release -p parma-apps --features rdma".into())
}
