//! This process as one node of a multi-process cluster.
//!
//! [`start`] reads the launcher's environment ([`Launch::from_process_env`]: `parma launch`,
//! torchrun, Slurm, Open MPI or MPICH, ps-lite's variables, a host list; `docs/deploy.md` has
//! the table) and the cluster token (`PARMA_TOKEN_FILE` or `PARMA_TOKEN`), binds the
//! transport, meets the other nodes at the rendezvous that rank 0 runs, connects to them and
//! starts the node. Every node of the cluster must start with the same configuration and the
//! same [`NodeOptions::job_digest`]; a node that differs is refused at the rendezvous with an
//! error that says so.

use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use parma_core::{Config, NodeId};
use parma_runtime::startup::{cluster_digest, start_node, ClusterToken, Launch, StartedNode};
use parma_runtime::{NodeRuntime, Options, Worker};
use parma_transport_zmq::{Bound, ZmqOptions};

use crate::Error;

/// Which transport a node uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeTransport {
    /// ZeroMQ over TCP (the default).
    #[default]
    Zmq,
    /// RDMA verbs (InfiniBand, RoCE); needs this crate's `rdma` feature.
    Rdma,
}

impl NodeTransport {
    /// `zmq` or `rdma`.
    pub fn from_name(name: &str) -> Result<NodeTransport, Error> {
        match name {
            "zmq" => Ok(NodeTransport::Zmq),
            "rdma" => Ok(NodeTransport::Rdma),
            other => Err(Error::Options(format!("unknown transport `{other}`; one of: zmq, rdma"))),
        }
    }
}

/// How a node of a multi-process cluster binds, advertises itself and times its peers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeOptions {
    /// The transport.
    pub transport: NodeTransport,
    /// Where to listen (`tcp://host:port` for ZeroMQ, `host:port` for RDMA; port 0 picks a
    /// free one). `None`: 127.0.0.1 when the rendezvous is on this machine's loopback, else
    /// every interface.
    pub bind: Option<String>,
    /// The host peers reach this node at. `None`: the launcher's (ps-lite's `DMLC_NODE_HOST`),
    /// else the address of the interface that routes to the rendezvous.
    pub advertise: Option<String>,
    /// How long a peer may stay silent before it counts as failed (at least 100 ms; a node
    /// heartbeats every tenth of it). Every node must use the same.
    pub peer_timeout: Duration,
    /// How long the rendezvous waits for every node.
    pub startup_timeout: Duration,
    /// A digest of whatever else the nodes must agree on beyond the configuration (e.g. your
    /// training options: [`parma_runtime::startup::fnv1a`] of their text); 0 for none.
    pub job_digest: u64,
    /// The cluster token. `None`: read from the environment (`PARMA_TOKEN_FILE` or
    /// `PARMA_TOKEN`). Given, for a program that hands every node the same secret itself (a
    /// binding that shares one over `torch.distributed`); never take it from a command line.
    pub token: Option<ClusterToken>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            transport: NodeTransport::Zmq,
            bind: None,
            advertise: None,
            peer_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(60),
            job_digest: 0,
            token: None,
        }
    }
}

/// A node of a multi-process cluster, started by [`start`].
#[derive(Debug)]
pub struct ClusterNode {
    /// This node's id (its rank).
    pub me: NodeId,
    /// The node's runtime: shut it down when its workers are finalized.
    pub runtime: NodeRuntime,
    /// Its workers, one per `Config::workers_per_node`: one per training thread.
    pub workers: Vec<Worker>,
}

/// Starts this process as a node of the cluster its launcher describes, with `cfg` (every
/// node must pass the same) and the runtime's `run` options. `Ok(None)`: this process is no
/// node (ps-lite's scheduler, which ran the rendezvous; ps-lite's workers).
pub fn start(cfg: Config, opts: &NodeOptions, run: Options) -> Result<Option<ClusterNode>, Error> {
    let launch = Launch::from_process_env()?;
    start_with_launch(&launch, cfg, opts, run)
}

/// [`start`] with the rank, world and rendezvous given (e.g. from your own command line:
/// [`Launch::explicit`]) instead of read from the environment.
pub fn start_with_launch(
    launch: &Launch,
    cfg: Config,
    opts: &NodeOptions,
    run: Options,
) -> Result<Option<ClusterNode>, Error> {
    if launch.role() == parma_runtime::startup::Role::Worker {
        return Ok(None);
    }
    if opts.peer_timeout < Duration::from_millis(100) {
        return Err(Error::Options(format!(
            "the peer timeout must be at least 100 ms, not {:?}",
            opts.peer_timeout
        )));
    }
    if cfg.nodes != launch.world() {
        return Err(Error::Options(format!(
            "the configuration has {} nodes but the launcher started {}",
            cfg.nodes,
            launch.world()
        )));
    }
    cfg.validate(NodeId(0))?;
    let token = match &opts.token {
        Some(t) => t.clone(),
        None => ClusterToken::from_process_env()?,
    };
    let digest = cluster_digest(&cfg, opts.job_digest, Some(opts.peer_timeout));
    let started = match opts.transport {
        NodeTransport::Zmq => {
            let bound = Bound::bind(zmq_options(opts, launch)).map_err(transport_error)?;
            start_node(launch, bound, (cfg, run), digest, token, opts.startup_timeout)?
        }
        NodeTransport::Rdma => start_rdma(launch, (cfg, run), opts, digest, token)?,
    };
    Ok(started.map(|StartedNode { me, runtime, workers }| ClusterNode { me, runtime, workers }))
}

fn transport_error(e: impl std::fmt::Display) -> Error {
    Error::Start(parma_runtime::startup::NodeStartError::Transport(e.to_string()))
}

fn zmq_options(opts: &NodeOptions, launch: &Launch) -> ZmqOptions {
    let mut z = ZmqOptions::loopback();
    (z.bind, z.advertise) = addresses(opts, launch, "tcp://");
    let us = opts.peer_timeout.as_micros() as u64;
    z.session.peer_timeout = parma_core::Duration(us);
    z.session.heartbeat_interval = parma_core::Duration(us / 10);
    z.session.retransmit_timeout = parma_core::Duration((us / 5).min(1_000_000));
    z.session.handshake_timeout = parma_core::Duration((us / 5).min(1_000_000));
    z
}

#[cfg(feature = "rdma")]
fn start_rdma(
    launch: &Launch,
    (cfg, run): (Config, Options),
    opts: &NodeOptions,
    digest: u64,
    token: ClusterToken,
) -> Result<Option<StartedNode>, Error> {
    use parma_transport_rdma::{Bound as RdmaBound, RdmaOptions};

    let mut r = RdmaOptions::loopback();
    let (bind, advertise) = addresses(opts, launch, "");
    r.bind = bind.strip_prefix("rdma://").unwrap_or(&bind).to_string();
    r.advertise = advertise;
    r.peer_timeout = opts.peer_timeout;
    r.heartbeat_interval = opts.peer_timeout / 10;
    r.frame_len_max = r.frame_len_max.max(cfg.frame_len_max);
    r.connect_timeout = opts.startup_timeout;
    let bound = RdmaBound::bind(r).map_err(transport_error)?;
    Ok(start_node(launch, bound, (cfg, run), digest, token, opts.startup_timeout)?)
}

#[cfg(not(feature = "rdma"))]
fn start_rdma(
    _: &Launch,
    _: (Config, Options),
    _: &NodeOptions,
    _: u64,
    _: ClusterToken,
) -> Result<Option<StartedNode>, Error> {
    Err(Error::Options(
        "this build has no RDMA: build with the `rdma` feature (`cargo build --release -p parma-cli --features \
         rdma`; needs libibverbs-dev, docs/deploy.md)"
            .into(),
    ))
}

/// Where to listen and what to advertise, from the options and the rendezvous' place.
fn addresses(opts: &NodeOptions, launch: &Launch, scheme: &str) -> (String, Option<String>) {
    let rv = launch.rendezvous();
    let rv_loopback = rv.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) || rv.host == "localhost";
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

/// The address of this machine's interface that routes towards `host:port` (no packet is
/// sent: a UDP socket is only connected).
pub fn local_address_towards(host: &str, port: u16) -> Option<IpAddr> {
    let target = (host, port).to_socket_addrs().ok()?.next()?;
    let any = if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(target).ok()?;
    Some(s.local_addr().ok()?.ip())
}
