//! `parma node`'s transport: ZeroMQ over TCP, or RDMA verbs when `parma` was built with the
//! `rdma` feature (`cargo build --release -p parma-apps --features rdma`: it needs libibverbs,
//! see `docs/deploy.md`). Either way the node binds first, meets the others at the
//! rendezvous with its endpoint (`tcp://…` or `rdma://…`), then connects to the peer table.

use std::sync::Arc;

use parma_core::{Config, NodeId};
use parma_runtime::startup::{establish, ClusterToken, Launch};
use parma_runtime::{NodeRuntime, Options, Worker};
use parma_transport_zmq::{Bound, ZmqOptions};

use crate::node::{local_address_towards, NetOptions, NodeError};

/// Which transport `parma node` uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeTransport {
    /// ZeroMQ over TCP (the default).
    #[default]
    Zmq,
    /// RDMA verbs: InfiniBand or RoCE.
    Rdma,
}

/// `zmq` or `rdma`.
pub fn parse_node_transport(name: &str) -> Result<NodeTransport, String> {
    match name {
        "zmq" => Ok(NodeTransport::Zmq),
        "rdma" => Ok(NodeTransport::Rdma),
        other => Err(format!("unknown transport `{other}`; one of: zmq, rdma")),
    }
}

/// A started node: its id, runtime and workers.
type Started = (NodeId, NodeRuntime, Vec<Worker>);

/// Where to listen and what to advertise, from the options and the rendezvous's place.
fn addresses(opts: &NetOptions, launch: &Launch, scheme: &str) -> (String, Option<String>) {
    let rv = launch.rendezvous();
    let rv_loopback =
        rv.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()) || rv.host == "localhost";
    let bind = match &opts.bind {
        Some(b) => b.clone(),
        None if rv_loopback => format!("{scheme}127.0.0.1:0"),
        None => format!("{scheme}0.0.0.0:0"),
    };
    let advertise =
        opts.advertise.clone().or_else(|| launch.advertised_host().map(str::to_string)).or_else(|| {
            (!rv_loopback)
                .then(|| local_address_towards(&rv.host, rv.port))
                .flatten()
                .map(|ip| ip.to_string())
        });
    (bind, advertise)
}

/// Binds the transport `opts` names, meets the others, starts the node's runtime. `None`:
/// not a node (ps-lite's scheduler).
/// The digest it brings to the rendezvous is the configuration's, `opts.job_digest` and the
/// peer timeout's; the cluster token comes from the environment (`PARMA_TOKEN_FILE` or `PARMA_TOKEN`).
/// The node's runtime runs with `run`.
pub(crate) fn start(
    opts: &NetOptions,
    launch: &Launch,
    cfg: Config,
    run: Options,
) -> Result<Option<Started>, NodeError> {
    let timeout_us = opts.peer_timeout.as_micros() as u64;
    if timeout_us < 100_000 {
        return Err(NodeError::Options("--peer-timeout-ms must be at least 100".into()));
    }
    let token = ClusterToken::from_process_env().map_err(NodeError::Startup)?;
    // Rotated, so that a job digest of 0 leaves the configuration's digest as it was. The peer
    // timeout joins it: a node heartbeats every tenth of its own, so a node with a longer one
    // would look silent to a node with a shorter one.
    let timeouts = crate::node::job_digest(&format!("peer timeout {timeout_us} us"));
    let digest = u64::from(cfg.wire_cluster().0) ^ opts.job_digest.rotate_left(17) ^ timeouts.rotate_left(41);
    match opts.transport {
        NodeTransport::Zmq => start_zmq(opts, launch, (cfg, run), digest, token, timeout_us),
        NodeTransport::Rdma => start_rdma(opts, launch, (cfg, run), digest, token),
    }
}

fn start_zmq(
    opts: &NetOptions,
    launch: &Launch,
    (cfg, run): (Config, Options),
    digest: u64,
    token: ClusterToken,
    timeout_us: u64,
) -> Result<Option<Started>, NodeError> {
    let mut zopts = ZmqOptions::loopback();
    (zopts.bind, zopts.advertise) = addresses(opts, launch, "tcp://");
    zopts.session.peer_timeout = parma_core::Duration(timeout_us);
    zopts.session.heartbeat_interval = parma_core::Duration(timeout_us / 10);
    zopts.session.retransmit_timeout = parma_core::Duration((timeout_us / 5).min(1_000_000));
    zopts.session.handshake_timeout = parma_core::Duration((timeout_us / 5).min(1_000_000));

    let bound = Bound::bind(zopts).map_err(NodeError::Transport)?;
    let table = establish(launch, bound.endpoint(), digest, &token, opts.startup_timeout)
        .map_err(NodeError::Startup)?;
    let Some(me) = table.me() else { return Ok(None) };
    let endpoints: Vec<String> = table.iter().map(|(_, e)| e.to_string()).collect();
    let transport = bound.start(me, endpoints, digest, Arc::new(token)).map_err(NodeError::Transport)?;
    let (node, workers) = transport.start_node(cfg, run).map_err(NodeError::Start)?;
    Ok(Some((me, node, workers)))
}

#[cfg(feature = "rdma")]
fn start_rdma(
    opts: &NetOptions,
    launch: &Launch,
    (cfg, run): (Config, Options),
    digest: u64,
    token: ClusterToken,
) -> Result<Option<Started>, NodeError> {
    use parma_transport_rdma::{Bound as RdmaBound, RdmaOptions};

    let mut ropts = RdmaOptions::loopback();
    let (bind, advertise) = addresses(opts, launch, "");
    ropts.bind = bind.strip_prefix("rdma://").unwrap_or(&bind).to_string();
    ropts.advertise = advertise;
    ropts.peer_timeout = opts.peer_timeout;
    ropts.heartbeat_interval = opts.peer_timeout / 10;
    ropts.frame_len_max = ropts.frame_len_max.max(cfg.frame_len_max);
    ropts.connect_timeout = opts.startup_timeout;

    let bound = RdmaBound::bind(ropts).map_err(|e| NodeError::Rdma(e.to_string()))?;
    let table = establish(launch, bound.endpoint(), digest, &token, opts.startup_timeout)
        .map_err(NodeError::Startup)?;
    let Some(me) = table.me() else { return Ok(None) };
    let endpoints: Vec<String> = table.iter().map(|(_, e)| e.to_string()).collect();
    let transport =
        bound.start(me, endpoints, digest, Arc::new(token)).map_err(|e| NodeError::Rdma(e.to_string()))?;
    let (node, workers) = NodeRuntime::start_with(cfg, me, transport, run).map_err(NodeError::Start)?;
    Ok(Some((me, node, workers)))
}

#[cfg(not(feature = "rdma"))]
fn start_rdma(
    _opts: &NetOptions,
    _launch: &Launch,
    _cfg: (Config, Options),
    _digest: u64,
    _token: ClusterToken,
) -> Result<Option<Started>, NodeError> {
    Err(NodeError::Rdma(
        "this parma was built without RDMA: cargo build --release -p parma-apps --features rdma \
         (needs libibverbs-dev; docs/deploy.md)"
            .into(),
    ))
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
    use parma_transport_rdma::{Bound as RdmaBound, RdmaOptions};

    let mut o = RdmaOptions::loopback();
    o.heartbeat_interval = std::time::Duration::from_millis(100);
    o.peer_timeout = std::time::Duration::from_millis(1000);
    o.linger = std::time::Duration::from_millis(500);
    o.frame_len_max = o.frame_len_max.max(cfg.frame_len_max);
    let bound = RdmaBound::bind(o).map_err(|e| e.to_string())?;
    let table =
        establish(launch, bound.endpoint(), digest, &token, STARTUP_TIMEOUT).map_err(|e| e.to_string())?;
    let me = table.me().ok_or("the start-up made this agent no node")?;
    let endpoints: Vec<String> = table.iter().map(|(_, e)| e.to_string()).collect();
    let transport = bound.start(me, endpoints, digest, Arc::new(token)).map_err(|e| e.to_string())?;
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
