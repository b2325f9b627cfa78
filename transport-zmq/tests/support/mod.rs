//! What the fault tests share: a test token, short timers, clusters whose links run through
//! proxies, the process's resident memory, and a transport the test can watch while a runtime
//! drives it. Each test binary uses part of it.
#![allow(dead_code)]

pub mod exchange;
pub mod proxy;
pub mod stranger;
pub mod workload;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use parma_core::session::Token;
use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};
use parma_core::NodeId;
use parma_runtime::startup::ClusterToken;
use parma_transport_zmq::{Bound, ZmqOptions, ZmqStats, ZmqTransport};

use proxy::Proxy;

/// The configuration digest of the transport-level tests' clusters.
pub const DIGEST: u64 = 0xfeed;

/// What the handshakes of nodes started with [`DIGEST`] and `opts` carry: the session digest.
pub fn session_digest(opts: &ZmqOptions) -> u64 {
    parma_core::digest::session_digest(DIGEST, &opts.session)
}

/// The cluster's token (the start-up's HMAC token, over a fixed secret).
pub fn token() -> Arc<dyn Token + Send + Sync> {
    Arc::new(ClusterToken::from_secret(*b"the fault tests' cluster secret").expect("not empty"))
}

/// Timers short enough for tests: a heartbeat every 100 ms, a peer silent for
/// `peer_timeout_ms` has failed, lost links are opened again within 200 ms.
pub fn options(peer_timeout_ms: u64) -> ZmqOptions {
    use parma_core::time::Duration as D;
    let mut o = ZmqOptions::loopback();
    o.session.heartbeat_interval = D::from_millis(100);
    o.session.peer_timeout = D::from_millis(peer_timeout_ms);
    o.session.retransmit_timeout = D::from_millis(200);
    o.session.handshake_timeout = D::from_millis(500);
    o.session.reconnect_max = D::from_millis(200);
    o.linger = Duration::from_millis(500);
    o
}

/// Resident memory of this process (`/proc/self/status`), in KiB.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    /// Resident now (VmRSS).
    pub rss_kib: u64,
    /// The most ever resident (VmHWM).
    pub hwm_kib: u64,
    /// Address space (VmSize): what was reserved, touched or not.
    pub size_kib: u64,
}

pub fn memory() -> Memory {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
    };
    Memory { rss_kib: field("VmRSS:"), hwm_kib: field("VmHWM:"), size_kib: field("VmSize:") }
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

/// A cluster whose every link runs through a proxy of its own: node `i` (the end that
/// connects) reaches node `j > i` at the proxy for `(i, j)`.
pub struct Proxied {
    pub transports: Vec<ZmqTransport>,
    /// The proxy of each pair `(i, j)`, `i < j`.
    pub proxies: Vec<((u16, u16), Proxy)>,
    /// Where each node really listens.
    pub endpoints: Vec<String>,
}

impl Proxied {
    pub fn start(n: u16, opts: &ZmqOptions, digest: u64) -> Proxied {
        let bound: Vec<Bound> = (0..n).map(|_| Bound::bind(opts.clone()).expect("bind")).collect();
        let endpoints: Vec<String> = bound.iter().map(|b| b.endpoint().to_string()).collect();
        let mut proxies = Vec::new();
        let mut tables = vec![endpoints.clone(); usize::from(n)];
        for i in 0..n {
            for j in i + 1..n {
                let p = Proxy::start(socket_addr(&endpoints[usize::from(j)]));
                tables[usize::from(i)][usize::from(j)] = p.endpoint();
                proxies.push(((i, j), p));
            }
        }
        let transports = bound
            .into_iter()
            .zip(tables)
            .enumerate()
            .map(|(i, (b, t))| b.start(NodeId(i as u16), t, digest, token()).expect("start"))
            .collect();
        Proxied { transports, proxies, endpoints }
    }

    /// The proxies of the links of `node`.
    pub fn proxies_of(&self, node: u16) -> impl Iterator<Item = &Proxy> {
        self.proxies.iter().filter(move |((i, j), _)| *i == node || *j == node).map(|(_, p)| p)
    }

    /// Cuts every connection of every proxy; how many were cut.
    pub fn cut_all(&self) -> usize {
        self.proxies.iter().map(|(_, p)| p.cut()).sum()
    }
}

/// `tcp://host:port` as an address.
pub fn socket_addr(endpoint: &str) -> SocketAddr {
    endpoint.trim_start_matches("tcp://").parse().expect("an address")
}

/// Waits until `ok` holds, looking every 10 ms for at most `limit`; whether it held.
pub fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if ok() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A transport a runtime drives while the test watches it: its counters, its links, and when
/// it reported which peer failed.
pub struct Probe {
    transport: Arc<Mutex<ZmqTransport>>,
    failures: Arc<Mutex<Vec<(NodeId, Instant)>>>,
}

/// The test's side of a [`Probe`].
#[derive(Clone)]
pub struct Watch {
    me: NodeId,
    transport: Arc<Mutex<ZmqTransport>>,
    failures: Arc<Mutex<Vec<(NodeId, Instant)>>>,
}

impl Probe {
    pub fn new(t: ZmqTransport) -> (Probe, Watch) {
        let me = t.local_id();
        let transport = Arc::new(Mutex::new(t));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let probe = Probe { transport: transport.clone(), failures: failures.clone() };
        (probe, Watch { me, transport, failures })
    }

    fn lock(&self) -> MutexGuard<'_, ZmqTransport> {
        self.transport.lock().unwrap()
    }
}

impl Watch {
    pub fn id(&self) -> NodeId {
        self.me
    }
    pub fn stats(&self) -> ZmqStats {
        self.transport.lock().unwrap().stats()
    }
    pub fn is_up(&self, peer: NodeId) -> bool {
        self.transport.lock().unwrap().is_up(peer)
    }
    /// The peers this node's transport reported failed, and when.
    pub fn failures(&self) -> Vec<(NodeId, Instant)> {
        self.failures.lock().unwrap().clone()
    }
    pub fn kill_switch(&self) -> parma_transport_zmq::KillSwitch {
        self.transport.lock().unwrap().kill_switch()
    }
}

impl Transport for Probe {
    fn local_id(&self) -> NodeId {
        self.lock().local_id()
    }
    fn frame_len_max(&self) -> usize {
        self.lock().frame_len_max()
    }
    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        self.lock().try_send(to, len, fill)
    }
    fn poll_recv(&mut self, max: usize, sink: &mut dyn FnMut(NodeId, &[u8])) -> Result<usize, RecvError> {
        self.lock().poll_recv(max, sink)
    }
    fn poll_event(&mut self) -> Option<TransportEvent> {
        let e = self.lock().poll_event();
        if let Some(TransportEvent::PeerFailed(p)) = e {
            self.failures.lock().unwrap().push((p, Instant::now()));
        }
        e
    }
    fn register_waker(&mut self, waker: &Waker) {
        self.lock().register_waker(waker);
    }
    fn close(&mut self) {
        self.lock().close();
    }
}

/// A cluster of `n` nodes (default session bounds, short timers, links through proxies)
/// exchanging numbered frames all the time `during` runs; then every frame sent must have
/// arrived once, in order, and no peer failed. `during` gets the cluster (its transports
/// taken out: they are busy); returns what it returned and every node's counters.
pub fn busy_cluster<R>(n: u16, during: impl FnOnce(&Proxied) -> R) -> (R, Vec<ZmqStats>) {
    busy_cluster_with(n, &options(3000), during)
}

/// [`busy_cluster`] with other transport options.
pub fn busy_cluster_with<R>(
    n: u16,
    opts: &ZmqOptions,
    during: impl FnOnce(&Proxied) -> R,
) -> (R, Vec<ZmqStats>) {
    let mut c = Proxied::start(n, opts, DIGEST);
    let mut transports = std::mem::take(&mut c.transports);
    let plan = exchange::Plan {
        frames_per_pair: None,
        frame_len: 256,
        limit: Duration::from_secs(60),
        burst: 4,
        pace: Some(Duration::from_millis(1)),
    };
    let mut out = None;
    let reports = exchange::exchange(&mut transports, plan, |_| {
        // Let the links come up and carry frames before the strangers come.
        std::thread::sleep(Duration::from_millis(300));
        out = Some(during(&c));
        std::thread::sleep(Duration::from_millis(300));
    });
    for (me, r) in reports.iter().enumerate() {
        assert!(r.errors.is_empty(), "node {me}: {:#?}", r.errors);
        assert!(r.failed.is_empty(), "node {me} reported failed peers: {:?}", r.failed);
        assert!(r.done_at.is_some(), "node {me} did not finish: {:?} {:?}", r.sent, r.received);
        assert!(r.sent.iter().sum::<u64>() > 0, "node {me} sent nothing");
    }
    let stats = transports.iter().map(|t| t.stats()).collect();
    (out.expect("the closure ran"), stats)
}
