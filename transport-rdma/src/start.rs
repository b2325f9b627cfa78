//! Setting a node's transport up: listen, learn the peer table, open the device, create and
//! connect the queue pairs, start the progress thread.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use parma_core::session::Token;
use parma_core::NodeId;

use crate::connect::{self, Acceptor, Me};
use crate::state::{Peer, State, MAILBOX_LEN};
use crate::verbs::{self, Device, QpInfo};
use crate::{lock, progress, Completion, RdmaError, RdmaOptions, RdmaTransport, Shared};

/// A node's transport, listening for handshakes but not yet started: learn
/// [`Bound::endpoint`], exchange it (the start-up's rendezvous does), then [`Bound::start`].
pub struct Bound {
    opts: RdmaOptions,
    listener: TcpListener,
    endpoint: String,
}

impl Bound {
    /// Listens on `opts.bind` for the queue-pair handshakes.
    pub fn bind(opts: RdmaOptions) -> Result<Bound, RdmaError> {
        opts.validate().map_err(RdmaError::Options)?;
        verbs::probe(opts.device.as_deref()).map_err(RdmaError::NoDevice)?;
        let listener = TcpListener::bind(&opts.bind)
            .map_err(|e| RdmaError::Bind { addr: opts.bind.clone(), reason: e.to_string() })?;
        let bound = listener.local_addr().map_err(RdmaError::Io)?;
        let endpoint = advertised(&opts, bound)?;
        Ok(Bound { opts, listener, endpoint })
    }

    /// What peers connect to: `rdma://host:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Opens the device, connects a queue pair to every other node of `peers` (node `i`'s
    /// endpoint at `peers[i]`, this node's own entry ignored) and starts the progress
    /// thread. `digest` is the configuration digest every node shares, `token` the cluster
    /// token. Returns once every pair is connected, or with an error naming the peer that was
    /// not, within `connect_timeout`.
    pub fn start(
        self,
        me: NodeId,
        peers: Vec<String>,
        digest: u64,
        token: Arc<dyn Token + Send + Sync>,
    ) -> Result<RdmaTransport, RdmaError> {
        let n = peers.len();
        let m = usize::from(me.0);
        if n == 0 || n > 4096 {
            return Err(RdmaError::Peers(format!("{n} nodes; this transport takes 1 to 4096")));
        }
        if m >= n {
            return Err(RdmaError::Peers(format!("this node is node {m} but the table has {n} nodes")));
        }
        let mut addrs = Vec::with_capacity(n);
        for (i, p) in peers.iter().enumerate() {
            addrs.push(if i == m {
                None
            } else {
                Some(connect::parse_endpoint(p).map_err(|e| RdmaError::Peers(format!("node {i}: {e}")))?)
            });
        }
        let o = &self.opts;
        let cq_len = n * (o.send_wr_max() as usize + o.recvs_per_peer()) + 16;
        let dev = Device::open(o.device.as_deref(), o.gid_index, cq_len)
            .map_err(|e| RdmaError::Device(e.to_string()))?;
        if o.completion == Completion::Channel {
            dev.channel_nonblocking().map_err(|e| RdmaError::Device(e.to_string()))?;
        }
        let now = Instant::now();
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            let qp = if i == m {
                None
            } else {
                Some(
                    dev.qp(o.send_wr_max(), o.recvs_per_peer() as u32)
                        .map_err(|e| RdmaError::Device(e.to_string()))?,
                )
            };
            list.push(Peer::new(qp, o, now));
        }
        let mut st =
            State::new(m, self.opts.clone(), dev, list).map_err(|e| RdmaError::Device(e.to_string()))?;
        let mut psns = Vec::with_capacity(n);
        for i in 0..n {
            psns.push(rand::random::<u32>() & 0x00ff_ffff);
            if i != m {
                for s in 0..st.opts.recvs_per_peer() as u32 {
                    st.post_recv(i, s).map_err(RdmaError::Device)?;
                }
            }
        }
        let st = Mutex::new(st);
        handshakes(&st, &self.listener, me, &addrs, &psns, digest, &*token, &self.opts)?;
        let st = st.into_inner().unwrap_or_else(|p| p.into_inner());
        let shared = Arc::new(Shared { state: Mutex::new(st) });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("parma-rdma-{}", me.0))
            .spawn(move || progress::run(s2))
            .map_err(RdmaError::Io)?;
        Ok(RdmaTransport {
            me,
            frame_len_max: self.opts.frame_len_max,
            shared,
            thread: Some(thread),
            lent: Vec::new(),
            clock: progress::SparseClock::new(),
        })
    }
}

/// What this node tells peer `i` about itself.
fn info_for(st: &State, i: usize, psn: u32) -> Option<QpInfo> {
    let qp = st.peers.get(i)?.qp.as_ref()?;
    Some(QpInfo {
        qpn: qp.num(),
        psn,
        lid: st.dev.lid,
        gid: st.dev.gid,
        mailbox_addr: st.mailbox.addr() + (i * MAILBOX_LEN) as u64,
        mailbox_rkey: st.mailbox.rkey(),
        ring_addr: st.rings.get(i).map_or(0, |r| r.addr()),
        ring_rkey: st.rings.get(i).map_or(0, |r| r.rkey()),
    })
}

fn connect_peer(
    st: &Mutex<State>,
    i: usize,
    psn: u32,
    theirs: &QpInfo,
    o: &RdmaOptions,
) -> Result<(), String> {
    let mut s = lock(st);
    let s = &mut *s;
    s.peers[i].remote_mailbox = (theirs.mailbox_addr, theirs.mailbox_rkey);
    s.peers[i].remote_ring = (theirs.ring_addr, theirs.ring_rkey);
    let qp = s.peers[i].qp.as_ref().ok_or("no queue pair")?;
    qp.connect(&s.dev, psn, theirs, o.qp_timeout, o.qp_retry).map_err(|e| e.to_string())?;
    s.peers[i].last_heard = Instant::now();
    Ok(())
}

struct Accepting<'a> {
    st: &'a Mutex<State>,
    psns: &'a [u32],
    me: usize,
    opts: &'a RdmaOptions,
}

impl Acceptor for Accepting<'_> {
    fn info_for(&self, peer: NodeId) -> Option<QpInfo> {
        let i = usize::from(peer.0);
        if i >= self.me {
            return None; // only lower ids connect to this node
        }
        info_for(&lock(self.st), i, self.psns[i])
    }

    fn connect(&mut self, peer: NodeId, theirs: &QpInfo) -> Result<(), String> {
        let i = usize::from(peer.0);
        connect_peer(self.st, i, self.psns[i], theirs, self.opts)
    }
}

#[allow(clippy::too_many_arguments)]
fn handshakes(
    st: &Mutex<State>,
    listener: &TcpListener,
    me: NodeId,
    addrs: &[Option<SocketAddr>],
    psns: &[u32],
    digest: u64,
    token: &(dyn Token + Send + Sync),
    o: &RdmaOptions,
) -> Result<(), RdmaError> {
    let m = usize::from(me.0);
    let deadline = Instant::now() + o.connect_timeout;
    let who = Me { id: me, digest, terms: connect::Terms::of(o), token };
    std::thread::scope(|s| {
        let accepting = s.spawn(|| {
            let mut acc = Accepting { st, psns, me: m, opts: o };
            let mut refused = 0;
            connect::accept_all(listener, &who, &mut acc, m, deadline, &mut refused)
        });
        let mut dialled = Ok(());
        for (i, a) in addrs.iter().enumerate().skip(m + 1) {
            let Some(addr) = a else { continue };
            let Some(mine) = info_for(&lock(st), i, psns[i]) else { continue };
            let mut conn = |theirs: &QpInfo| connect_peer(st, i, psns[i], theirs, o);
            if let Err(e) = connect::dial(&who, NodeId(i as u16), *addr, &mine, &mut conn, deadline) {
                dialled = Err(RdmaError::Connect(e));
                break;
            }
        }
        let accepted =
            accepting.join().map_err(|_| RdmaError::Connect("the accepting thread panicked".into()))?;
        dialled?;
        accepted.map(|_| ()).map_err(RdmaError::Connect)
    })
}

/// The endpoint peers connect to, from the bound address and `advertise`.
fn advertised(opts: &RdmaOptions, bound: SocketAddr) -> Result<String, RdmaError> {
    let Some(adv) = opts.advertise.as_deref() else {
        if bound.ip().is_unspecified() {
            return Err(RdmaError::Options(format!(
                "{} listens on every address: say which one peers reach this node at (advertise)",
                opts.bind
            )));
        }
        return Ok(format!("rdma://{bound}"));
    };
    let rest = adv.strip_prefix("rdma://").unwrap_or(adv);
    let e = if rest.parse::<SocketAddr>().is_ok() {
        format!("rdma://{rest}")
    } else if let Ok(ip) = rest.parse::<std::net::IpAddr>() {
        format!("rdma://{}", SocketAddr::new(ip, bound.port()))
    } else if rest.contains(':') {
        format!("rdma://{rest}")
    } else {
        format!("rdma://{rest}:{}", bound.port())
    };
    connect::parse_endpoint(&e).map_err(|w| RdmaError::Options(format!("advertise {adv:?}: {w}")))?;
    Ok(e)
}

/// `n` transports of one cluster in this process, each listening on `opts.bind` (port 0),
/// connected through the table their endpoints make: for tests, benchmarks and the
/// conformance suite.
pub fn local_cluster(
    n: u16,
    opts: &RdmaOptions,
    digest: u64,
    token: Arc<dyn Token + Send + Sync>,
) -> Result<Vec<RdmaTransport>, RdmaError> {
    local_cluster_with(&vec![opts.clone(); usize::from(n)], digest, token)
}

/// [`local_cluster`] with each node's own options, `opts[i]` for node `i` (tests of nodes
/// whose options disagree).
pub fn local_cluster_with(
    opts: &[RdmaOptions],
    digest: u64,
    token: Arc<dyn Token + Send + Sync>,
) -> Result<Vec<RdmaTransport>, RdmaError> {
    let bound = opts.iter().map(|o| Bound::bind(o.clone())).collect::<Result<Vec<_>, _>>()?;
    let table: Vec<String> = bound.iter().map(|b| b.endpoint().to_string()).collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = bound
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let (table, token) = (table.clone(), token.clone());
                s.spawn(move || b.start(NodeId(i as u16), table, digest, token))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Err(RdmaError::Connect("a start-up thread panicked".into())))
            })
            .collect()
    })
}

/// The start-up's view of a bound RDMA transport: `parma_runtime::startup::start_node`
/// starts a node over RDMA with it.
impl parma_runtime::startup::BoundTransport for Bound {
    type Transport = RdmaTransport;
    type Error = RdmaError;

    fn endpoint(&self) -> &str {
        Bound::endpoint(self)
    }

    fn start(
        self,
        me: NodeId,
        peers: Vec<String>,
        digest: u64,
        token: Arc<dyn Token + Send + Sync>,
    ) -> Result<RdmaTransport, RdmaError> {
        Bound::start(self, me, peers, digest, token)
    }
}
