//! How a run gets its parma nodes: every node in this process ([`start_local`], on the
//! threaded loopback or on ZeroMQ over 127.0.0.1), or this process as one node of a cluster
//! of processes ([`start_node`], the façade's [`parma::node::start_with_launch`]: ZeroMQ, or
//! RDMA when the façade is built with its `rdma` feature). Only the façade's API is used:
//! which transport crate carries the frames is the façade's business.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parma::local_transports::{
    threaded_cluster as cluster, zmq_local_cluster as local_cluster, ThreadedOptions, ZmqOptions,
};
use parma::node::NodeTransport;
use parma::startup::{ClusterToken, Launch, StartupError};
use parma::{Config, NodeId, NodeRuntime, OpError, Options, RuntimeError, Worker};

/// Which transport carries the frames between the nodes of a cluster in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LocalTransport {
    /// The threaded loopback: frames move between threads through queues in memory.
    #[default]
    Threaded,
    /// ZeroMQ over TCP on 127.0.0.1 every node in this process.
    Zmq,
}

impl LocalTransport {
    /// Every transport, in the order of the CLI's help.
    pub const ALL: [LocalTransport; 2] = [LocalTransport::Threaded, LocalTransport::Zmq];

    /// The name `--transport` takes.
    pub fn name(self) -> &'static str {
        match self {
            LocalTransport::Threaded => "threaded",
            LocalTransport::Zmq => "zmq",
        }
    }

    /// The transport called `name`.
    pub fn from_name(name: &str) -> Option<LocalTransport> {
        LocalTransport::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The transport called `name`, or an error that lists the names (for `--transport`).
    pub fn parse(name: &str) -> Result<LocalTransport, String> {
        LocalTransport::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = LocalTransport::ALL.iter().map(|t| t.name()).collect();
            format!("unknown transport `{name}`; one of: {}", names.join(", "))
        })
    }
}

impl fmt::Display for LocalTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why [`start_local`] could not start the nodes.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The transport could not be set up.
    Transport(String),
    /// A node did not start.
    Start(RuntimeError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Transport(s) => write!(f, "the transport could not be set up: {s}"),
            StartError::Start(e) => write!(f, "a node did not start: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Starts the cluster's nodes on `transport`, with `cfg` and `ropts`: the nodes and every
/// node's workers. The transport's counters (bytes on the wire) come with each node's
/// `Stats::transport`.
pub fn start_local(
    transport: LocalTransport,
    cfg: &Config,
    ropts: &Options,
) -> Result<(Vec<NodeRuntime>, Vec<Worker>), StartError> {
    match transport {
        LocalTransport::Threaded => start_all(cluster(cfg.nodes, ThreadedOptions::default()), |i, t| {
            NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), t, ropts.clone())
        }),
        LocalTransport::Zmq => {
            let digest = parma::startup::cluster_digest(cfg, 0, None);
            let token = Arc::new(ClusterToken::generate());
            let ts = local_cluster(cfg.nodes, &ZmqOptions::loopback(), digest, token)
                .map_err(|e| StartError::Transport(e.to_string()))?;
            // Each node's driver on its transport's I/O thread.
            start_all(ts, |_, t| t.start_node(cfg.clone(), ropts.clone()))
        }
    }
}

/// Starts node `i` on `transports[i]` with `start`.
fn start_all<T>(
    transports: Vec<T>,
    start: impl Fn(usize, T) -> Result<(NodeRuntime, Vec<Worker>), RuntimeError>,
) -> Result<(Vec<NodeRuntime>, Vec<Worker>), StartError> {
    // Declared before the workers, so that on an early return the workers are dropped first.
    let mut nodes = Vec::new();
    let mut workers = Vec::new();
    for (i, t) in transports.into_iter().enumerate() {
        let (node, handles) = start(i, t).map_err(StartError::Start)?;
        nodes.push(node);
        workers.extend(handles);
    }
    Ok((nodes, workers))
}

/// How a node process meets the others and which transport carries its frames: what
/// `parma node` runs, the sums workload or a training task, does not change it.
#[derive(Clone, Debug, PartialEq)]
pub struct NetOptions {
    /// Rank, world size and rendezvous given explicitly (else from the launcher's environment).
    pub explicit: Option<(u16, u16, String)>,
    /// Which transport carries the frames.
    pub transport: NodeTransport,
    /// Where the transport listens; `None`: 127.0.0.1 when the rendezvous is on this machine's
    /// loopback, every address otherwise.
    pub bind: Option<String>,
    /// What peers connect to; `None`: the bound address, or the address this machine reaches
    /// the rendezvous from.
    pub advertise: Option<String>,
    /// A peer silent this long has failed.
    pub peer_timeout: Duration,
    /// Longest wait for every node at the rendezvous.
    pub startup_timeout: Duration,
    /// Serve the counters in Prometheus's text format here.
    pub metrics_addr: Option<String>,
    /// A digest of what the job runs beyond the node's configuration (a training task's
    /// command line), folded into the digest every node brings to the rendezvous: a node
    /// started with other options is refused there. 0: nothing beyond the configuration.
    pub job_digest: u64,
}

impl Default for NetOptions {
    fn default() -> NetOptions {
        NetOptions {
            explicit: None,
            transport: NodeTransport::Zmq,
            bind: None,
            advertise: None,
            peer_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(60),
            metrics_addr: None,
            job_digest: 0,
        }
    }
}

/// [`NetOptions::job_digest`] of a job described by `text` (e.g. its options' `Debug` form):
/// FNV-1a of its bytes.
pub fn job_digest(text: &str) -> u64 {
    parma::startup::fnv1a(text.as_bytes())
}

impl NetOptions {
    /// Where this process's rank, the world size and the rendezvous come from: the explicit
    /// options, else the launcher's environment.
    pub fn launch(&self) -> Result<Launch, NodeError> {
        match &self.explicit {
            Some((rank, world, rendezvous)) => Launch::explicit(NodeId(*rank), *world, rendezvous),
            None => Launch::from_process_env(),
        }
        .map_err(NodeError::Startup)
    }
}

/// Why a node failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeError {
    /// The options cannot work.
    Options(String),
    /// The start-up (launcher environment, token, rendezvous) failed.
    Startup(StartupError),
    /// The node did not start: its transport, or its runtime.
    Start(parma::Error),
    /// A worker operation failed: worker `worker` of node `node`, in batch `batch`, doing `op`.
    #[allow(missing_docs)]
    Worker { node: NodeId, worker: u16, batch: u64, op: &'static str, error: OpError },
    /// A worker thread could not be spawned or panicked.
    Thread(String),
    /// A peer failed (crashed, or silent for longer than the peer timeout): the job stops,
    /// as there is no failover yet.
    #[allow(missing_docs)]
    PeerFailed { peer: NodeId },
    /// Sums differ from what every worker pushed.
    #[allow(missing_docs)]
    Sums { wrong: u64, checked: u64, first: Vec<String> },
    /// The node did not stop cleanly.
    Shutdown(RuntimeError),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Options(s) => write!(f, "bad options: {s}"),
            NodeError::Startup(e) => write!(f, "start-up failed: {e}"),
            NodeError::Start(e) => write!(f, "{e}"),
            NodeError::Worker { node, worker, batch, op, error } => {
                write!(f, "worker {worker} of node {}: {op} of batch {batch} failed: {error}", node.0)
            }
            NodeError::Thread(s) => f.write_str(s),
            NodeError::PeerFailed { peer } => {
                write!(f, "node {} failed (crashed, or silent past the peer timeout); the job stops", peer.0)
            }
            NodeError::Sums { wrong, checked, first } => {
                write!(f, "{wrong} of {checked} values are wrong: {}", first.join("; "))
            }
            NodeError::Shutdown(e) => write!(f, "the node did not stop cleanly: {e}"),
        }
    }
}

impl std::error::Error for NodeError {}

/// A started node: its id, runtime and workers.
pub type Started = (NodeId, NodeRuntime, Vec<Worker>);

/// Binds the transport `opts` names, meets the others, starts the node's runtime with `run`.
/// `None`: not a node (ps-lite's scheduler). The digest it brings to the rendezvous is
/// `parma::startup::cluster_digest` of the configuration, `opts.job_digest` and the
/// peer timeout; the cluster token comes from the environment.
pub fn start_node(
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
