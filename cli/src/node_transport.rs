//! `parma node`'s start-up: the façade's (`parma::node`), with the command line's options.
//! ZeroMQ over TCP, or RDMA verbs when `parma` was built with the `rdma` feature.

use parma_core::Config;
use parma_runtime::startup::{ClusterToken, Launch};

pub use parma::node::NodeTransport;

/// `zmq` or `rdma`.
pub fn parse_node_transport(name: &str) -> Result<NodeTransport, String> {
    NodeTransport::from_name(name).map_err(|e| e.to_string())
}

/// Binds the transport `opts` names, meets the others, starts the node's runtime with `run`
/// ([`parma_train::nodes::start_node`]). `None`: not a node (ps-lite's scheduler).
pub(crate) use parma_train::nodes::start_node as start;

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
    Err("this parma was built without RDMA: cargo build --release -p parma-cli --features rdma".into())
}
