//! # parma-transport-zmq: frames between processes over TCP
//!
//! ## Room
//!
//! This crate implements [`parma_core::Transport`] between processes (or machines) with the
//! `zeromq` crate, pure Rust on tokio. Tokio lives here, on one I/O thread per node
//! (`parma-zmq-<id>`, a current-thread runtime); neither the core nor the runtime sees it.
//!
//! The `zeromq` crate gives framing and sockets but none of what the `Transport` contract
//! promises (its DEALER and ROUTER sockets do not reconnect, it has no high-water marks, and
//! it trusts a peer's length header; see `vendor/zeromq/PATCHED.md` for the last one, mended
//! there). Everything the contract needs comes from the core's sans-IO session layer
//! ([`parma_core::session`]), one [`parma_core::session::Session`] per peer, driven here:
//!
//! - **links**: every node binds one ROUTER socket. For each pair, the node with the lower id
//!   connects a DEALER to the other's ROUTER (with a fresh random identity per connection, so
//!   a stranger cannot take over a link's routing); the one connection carries both
//!   directions. A lost connection is opened again with backoff by the session's
//!   [`parma_core::session::SessionEvent::Connect`];
//! - **handshake**: the first packet of every connection is the session's Hello, answered by a
//!   Welcome and a Proof: protocol version, node ids, the configuration digest and the
//!   cluster token (proved against fresh nonces, never sent). Packets of a connection that did
//!   not pass it are dropped and counted ([`ZmqStats::strangers_refused`]);
//! - **reliability**: sequence numbers, cumulative acknowledgements, a bounded retransmission
//!   buffer, resumption after a reconnect: a dropped TCP connection loses and doubles nothing;
//! - **back-pressure**: at most `window_frames_max` frames and `window_bytes_max` bytes
//!   unacknowledged per peer, and the peer grants at most `recv_frames_max` frames and
//!   `recv_bytes_max` bytes it has not taken: `try_send` answers `WouldBlock`, and the waker
//!   fires when room frees;
//! - **failure**: a peer silent for `peer_timeout`, or back as a new incarnation, becomes
//!   [`parma_core::transport::TransportEvent::PeerFailed`], once. So does a peer that closed;
//!   its goodbye names the first peer it had lost, if any, and that one is reported failed
//!   first, so that what waits here names the node that failed rather than one that stopped
//!   because of it;
//! - **bounded input**: a frame that would make a message longer than the largest session
//!   packet ends its connection before its body is buffered;
//! - **strangers**: a connection to this node's port has `handshake_timeout` to finish the
//!   ZMTP handshake and `handshake_timeout` more to send its Hello, and may send 1 KiB before
//!   that Hello is complete; a connection refused is closed. At most `connections_max`
//!   connections are open on the port at once (the vendored crate closes one beyond as it is
//!   accepted), so strangers cannot take every file descriptor. What a stranger can still hold is
//!   in `docs/verification.md` ("ZeroMQ transport: faults and strangers").
//!
//! ## The node's driver on the I/O thread
//!
//! [`ZmqTransport::start_node`] starts a node whose driver runs on this I/O thread, as one more
//! task ([`ZmqTransport::driver_host`], `parma_runtime::host`), instead of a thread of its
//! own: a frame the node sends and a frame it receives then cross no thread boundary. A
//! one-key remote pull wakes four threads instead of eight and takes about half the time
//! (`docs/performance-transports.md`, "ZeroMQ transport"). `NodeRuntime::start` with this transport
//! still works, with a driver thread.
//!
//! ## Use
//!
//! Binding comes first, so that a node can advertise the port it got before it knows its
//! peers (the start-up exchanges the endpoints); then [`Bound::start`] with the peer table:
//!
//! ```no_run
//! use std::sync::Arc;
//! use parma_core::NodeId;
//! use parma_runtime::startup::ClusterToken;
//! use parma_transport_zmq::{Bound, ZmqOptions};
//!
//! let token = Arc::new(ClusterToken::from_process_env().unwrap());
//! let bound = Bound::bind(ZmqOptions::loopback()).unwrap();
//! let my_endpoint = bound.endpoint().to_string(); // tell the others (the rendezvous does)
//! # let peer_endpoints = vec![my_endpoint.clone()];
//! # let cfg = parma_core::Config::new(1, 1, parma_core::Layout::uniform(10, 1).unwrap());
//! let digest = parma_core::cluster_digest(&cfg, 0, None);
//! let transport = bound.start(NodeId(0), peer_endpoints, digest, token).unwrap();
//! // The node, its driver on the transport's I/O thread, and its workers.
//! let (node, workers) = transport.start_node(cfg, parma_runtime::Options::default()).unwrap();
//! ```
#![forbid(unsafe_code)]

mod host;
mod io;
mod shapes;
mod shared;

pub use host::ZmqDriverHost;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::thread::JoinHandle;

use parma_core::session::{Identity, SessionOptions, Token};
use parma_core::transport::{RecvError, SendError, Transport, TransportCounters, TransportEvent};
use parma_core::{Config, NodeId};
use parma_runtime::{Error as RuntimeError, NodeRuntime, Options, Worker};

use shared::{Shared, State};

/// Options of one node's transport. The session's bounds and timers must be the same on
/// every node.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ZmqOptions {
    /// Where to listen: `tcp://host:port` (port 0 picks a free one), IPv4 or IPv6
    /// (`tcp://[::1]:0`).
    pub bind: String,
    /// What peers connect to, if not the bound address: `tcp://host:port`, `host:port`, or a
    /// host alone (the bound port is kept), for containers and NAT. Required when binding a
    /// wildcard address (`0.0.0.0`, `::`).
    pub advertise: Option<String>,
    /// The session layer's bounds and timers.
    pub session: SessionOptions,
    /// Frames a node may have queued to itself and not yet received.
    pub self_frames_max: usize,
    /// How long [`Transport::close`] keeps delivering frames already accepted before the I/O
    /// thread stops.
    pub linger: std::time::Duration,
    /// Most connections this node's port keeps open at once, peers' and strangers' (each holds
    /// a file descriptor until it closes); one beyond is closed as it is accepted, and counted
    /// in [`ZmqStats::strangers_refused`]. Must exceed the number of nodes.
    pub connections_max: usize,
}

impl ZmqOptions {
    /// Listens on a free port of 127.0.0.1, session defaults.
    pub fn loopback() -> ZmqOptions {
        ZmqOptions {
            bind: "tcp://127.0.0.1:0".into(),
            advertise: None,
            session: SessionOptions::default(),
            self_frames_max: 4096,
            linger: std::time::Duration::from_secs(2),
            connections_max: 512,
        }
    }

    /// Sets where to listen (`tcp://host:port`): [`ZmqOptions::bind`].
    #[must_use]
    pub fn with_bind(mut self, bind: impl Into<String>) -> ZmqOptions {
        self.bind = bind.into();
        self
    }

    /// Sets what peers connect to, if not the bound address: [`ZmqOptions::advertise`].
    #[must_use]
    pub fn with_advertise(mut self, advertise: Option<String>) -> ZmqOptions {
        self.advertise = advertise;
        self
    }

    /// Sets the session layer's bounds and timers: [`ZmqOptions::session`].
    #[must_use]
    pub fn with_session(mut self, session: SessionOptions) -> ZmqOptions {
        self.session = session;
        self
    }
}

/// Why the transport could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum ZmqError {
    /// The options do not fit together.
    Options(String),
    /// Listening failed.
    Bind { endpoint: String, reason: String },
    /// The peer table does not fit this node or the cluster.
    Peers(String),
    /// The I/O thread could not be started.
    Io(std::io::Error),
}

impl fmt::Display for ZmqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZmqError::Options(what) => write!(f, "transport options: {what}"),
            ZmqError::Bind { endpoint, reason } => write!(f, "cannot listen on {endpoint}: {reason}"),
            ZmqError::Peers(what) => write!(f, "peer table: {what}"),
            ZmqError::Io(e) => write!(f, "cannot start the transport's I/O thread: {e}"),
        }
    }
}

impl std::error::Error for ZmqError {}

/// The transport's counters, summed over its peers: the core's [`TransportCounters`], which
/// the runtime also publishes in its `Stats`.
pub type ZmqStats = TransportCounters;

/// A node's transport, listening but not yet started: learn [`Bound::endpoint`], exchange it,
/// then [`Bound::start`].
pub struct Bound {
    opts: ZmqOptions,
    endpoint: String,
    io: io::Prepared,
}

impl Bound {
    /// Listens on `opts.bind`. The node's id may be learnt later (a launcher that gives no
    /// rank has the start-up assign one).
    pub fn bind(opts: ZmqOptions) -> Result<Bound, ZmqError> {
        opts.session.validate().map_err(|r| ZmqError::Options(r.to_string()))?;
        if opts.self_frames_max == 0 {
            return Err(ZmqError::Options("self_frames_max must be positive".into()));
        }
        if opts.connections_max == 0 {
            return Err(ZmqError::Options("connections_max must be positive".into()));
        }
        let (io, bound_addr) = io::Prepared::bind(&opts)?;
        let endpoint = advertised(&opts, bound_addr)?;
        Ok(Bound { opts, endpoint, io })
    }

    /// What peers connect to: give it to the others (the start-up's rendezvous does).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Starts the I/O thread as node `me`, with `peers[i]` the endpoint of node `i` (this
    /// node's own entry included, and ignored), `digest` the configuration digest every node
    /// shares ([`parma_core::cluster_digest`]) and the cluster `token`.
    pub fn start(
        self,
        me: NodeId,
        peers: Vec<String>,
        digest: u64,
        token: Arc<dyn Token + Send + Sync>,
    ) -> Result<ZmqTransport, ZmqError> {
        let n = peers.len();
        if n == 0 || n > usize::from(u16::MAX) {
            return Err(ZmqError::Peers(format!("{n} nodes; a cluster has 1 to {}", u16::MAX)));
        }
        if usize::from(me.0) >= n {
            return Err(ZmqError::Peers(format!("this node is node {} but the table has {n} nodes", me.0)));
        }
        if self.opts.connections_max <= n {
            return Err(ZmqError::Options(format!(
                "connections_max ({}) must exceed the number of nodes ({n})",
                self.opts.connections_max
            )));
        }
        for (i, p) in peers.iter().enumerate() {
            if i != usize::from(me.0) {
                io::check_endpoint(p).map_err(|e| ZmqError::Peers(format!("node {i}: {e}")))?;
            }
        }
        let id = Identity { me, digest, incarnation: rand::random() };
        let state = State::new(id, n, &self.opts, token).map_err(|r| ZmqError::Options(r.to_string()))?;
        let shared = Arc::new(Shared::new(state));
        let (thread, io) = self.io.start(me, peers, shared.clone(), &self.opts)?;
        Ok(ZmqTransport {
            me,
            frame_len_max: self.opts.session.frame_len_max,
            shared,
            thread: Some(thread),
            io,
            taken: Vec::new(),
        })
    }
}

/// The endpoint peers connect to, from the bound address and `advertise`.
fn advertised(opts: &ZmqOptions, bound: std::net::SocketAddr) -> Result<String, ZmqError> {
    let port = bound.port();
    let Some(adv) = opts.advertise.as_deref() else {
        if bound.ip().is_unspecified() {
            return Err(ZmqError::Options(format!(
                "{} listens on every address: say which one peers reach this node at (advertise)",
                opts.bind
            )));
        }
        return Ok(format!("tcp://{}", bound));
    };
    let rest = adv.strip_prefix("tcp://").unwrap_or(adv);
    let endpoint = if rest.parse::<std::net::SocketAddr>().is_ok() {
        format!("tcp://{rest}")
    } else if let Ok(ip) = rest.parse::<std::net::IpAddr>() {
        format!("tcp://{}", std::net::SocketAddr::new(ip, port))
    } else if let Some((host, p)) = rest.rsplit_once(':').filter(|(h, _)| !h.contains(':')) {
        let p: u16 =
            p.parse().map_err(|_| ZmqError::Options(format!("advertise {adv:?}: bad port {p:?}")))?;
        format!("tcp://{host}:{p}")
    } else {
        format!("tcp://{rest}:{port}")
    };
    io::check_endpoint(&endpoint).map_err(|e| ZmqError::Options(format!("advertise {adv:?}: {e}")))?;
    Ok(endpoint)
}

/// `n` transports of one cluster in this process, each listening on `opts.bind` (a free
/// port each: use port 0), connected through the peer table their endpoints make: for tests,
/// benchmarks, and the conformance suite.
pub fn local_cluster(
    n: u16,
    opts: &ZmqOptions,
    digest: u64,
    token: Arc<dyn Token + Send + Sync>,
) -> Result<Vec<ZmqTransport>, ZmqError> {
    let bound = (0..n).map(|_| Bound::bind(opts.clone())).collect::<Result<Vec<_>, _>>()?;
    let table: Vec<String> = bound.iter().map(|b| b.endpoint().to_string()).collect();
    bound
        .into_iter()
        .enumerate()
        .map(|(i, b)| b.start(NodeId(i as u16), table.clone(), digest, token.clone()))
        .collect()
}

/// One node's end of the cluster over ZeroMQ. See the crate docs.
pub struct ZmqTransport {
    me: NodeId,
    frame_len_max: usize,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The I/O thread's runtime, to run a node's driver there.
    io: tokio::runtime::Handle,
    /// Frames taken out of the lock for the sink (kept to reuse its room).
    taken: shared::Frames,
}

impl ZmqTransport {
    /// The transport's counters.
    pub fn stats(&self) -> ZmqStats {
        self.lock().stats()
    }

    /// Whether the session with `peer` has an authenticated link now.
    pub fn is_up(&self, peer: NodeId) -> bool {
        self.lock().is_up(peer)
    }

    /// A handle that stops this transport as a crash would (for fault tests): its sockets
    /// close without a goodbye, its own calls answer `Closed`, and the peers report it failed
    /// once `peer_timeout` passes without a word from it.
    pub fn kill_switch(&self) -> KillSwitch {
        KillSwitch(self.shared.clone())
    }

    /// A host that runs a node's driver on this transport's I/O thread, as one more task
    /// beside the sockets: give it to `parma_runtime::NodeRuntime::start_hosted` with this
    /// transport. Handing a frame to the sockets and a received frame to the node then wakes no
    /// other thread. The host takes over waiting for the I/O thread's end, so the transport's
    /// drop no longer does: `None` if a host was taken already.
    pub fn driver_host(&mut self) -> Option<ZmqDriverHost> {
        let thread = self.thread.take()?;
        Some(ZmqDriverHost::new(self.io.clone(), thread))
    }

    /// Starts the node `cfg` describes as this transport's node, its driver on the I/O thread
    /// ([`ZmqTransport::driver_host`]): `parma_runtime::NodeRuntime::start_hosted` with this
    /// transport and its host. What parma's own commands do.
    pub fn start_node(
        mut self,
        cfg: Config,
        opts: Options,
    ) -> Result<(NodeRuntime, Vec<Worker>), RuntimeError> {
        let me = self.me;
        match self.driver_host() {
            Some(host) => NodeRuntime::start_hosted(cfg, me, self, host, opts),
            None => NodeRuntime::start_with(cfg, me, self, opts),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }
}

/// Stops a [`ZmqTransport`] as a crash would; see [`ZmqTransport::kill_switch`].
#[derive(Clone)]
pub struct KillSwitch(Arc<Shared>);

impl KillSwitch {
    /// Stops the transport now.
    pub fn kill(&self) {
        let mut st = lock(&self.0.state);
        st.killed = true;
        if let Some(w) = &st.waker {
            w.wake_by_ref();
        }
        drop(st);
        self.0.io_wake.notify_one();
    }
}

pub(crate) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock is our bug; the state is still consistent enough to
    // report and shut down, so poisoning is not propagated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Transport for ZmqTransport {
    fn local_id(&self) -> NodeId {
        self.me
    }

    fn frame_len_max(&self) -> usize {
        self.frame_len_max
    }

    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let r = self.lock().send(to, len, fill);
        if r.is_ok() && to != self.me {
            self.shared.io_wake.notify_one();
        }
        r
    }

    fn poll_recv(
        &mut self,
        max_frames: usize,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> Result<usize, RecvError> {
        // Frames leave the lock before the sink sees them: the node's work on a frame never
        // holds up the I/O thread.
        let mut frames = std::mem::take(&mut self.taken);
        frames.clear();
        let r = self.lock().take(max_frames, &mut frames);
        let window_moved = match r {
            Ok(m) => m,
            Err(e) => {
                self.taken = frames;
                return Err(e);
            }
        };
        if window_moved {
            self.shared.io_wake.notify_one();
        }
        let n = frames.len();
        for (from, f) in frames.drain(..) {
            // The bytes as they came off the socket: no copy, and dropped (freeing the
            // socket's read buffer) as soon as the sink returns.
            sink(from, &f);
        }
        self.taken = frames;
        Ok(n)
    }

    fn poll_event(&mut self) -> Option<TransportEvent> {
        self.lock().next_event()
    }

    fn counters(&self) -> TransportCounters {
        self.stats()
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.lock().waker = Some(waker.clone());
    }

    fn close(&mut self) {
        self.lock().close();
        self.shared.io_wake.notify_one();
    }
}

impl Drop for ZmqTransport {
    fn drop(&mut self) {
        self.close();
        if let Some(t) = self.thread.take() {
            // The I/O thread stops within `linger` of the close.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests;

/// The start-up's view of a bound ZeroMQ transport: `parma_runtime::startup::start_node`
/// starts a node over ZeroMQ with it, the driver on the I/O thread.
impl parma_runtime::startup::BoundTransport for Bound {
    type Transport = ZmqTransport;
    type Error = ZmqError;

    fn endpoint(&self) -> &str {
        Bound::endpoint(self)
    }

    fn start(
        self,
        me: NodeId,
        peers: Vec<String>,
        digest: u64,
        token: Arc<dyn Token + Send + Sync>,
    ) -> Result<ZmqTransport, ZmqError> {
        Bound::start(self, me, peers, digest, token)
    }

    fn start_runtime(
        transport: ZmqTransport,
        _me: NodeId,
        cfg: Config,
        opts: Options,
    ) -> Result<(NodeRuntime, Vec<Worker>), RuntimeError> {
        transport.start_node(cfg, opts)
    }
}
