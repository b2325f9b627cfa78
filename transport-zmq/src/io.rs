//! The I/O thread: one tokio current-thread runtime per node, its ROUTER socket, one DEALER
//! per connection this node opens, and the loop that drives the sessions (see `shared`).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use futures::StreamExt;
use parma_core::session::DATA_OVERHEAD;
use parma_core::NodeId;
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use zeromq::{DealerSocket, RouterSocket, Socket, SocketEvent, SocketOptions, SocketRecv, ZmqMessage};

use crate::shapes::{packets, Packets};
use crate::shared::{Action, Shared};
use crate::{lock, ZmqError, ZmqOptions};

/// Connection events from our ROUTER's monitor to the loop. Packets do not come this way:
/// the task that reads a socket hands them to the sessions itself (see [`deliver`]).
enum IoEvent {
    RoutedLost {
        identity: Bytes,
    },
    /// A connection to our ROUTER failed the ZMTP handshake (not ZMTP, another socket type,
    /// too slow), or sent what the decoder refuses (a frame over the bound): the crate
    /// dropped it.
    ZmtpRefused,
    /// A connection to our ROUTER passed the ZMTP handshake.
    Accepted {
        identity: Bytes,
    },
}

/// Most socket events the loop takes in one turn before it looks at the sessions again.
const EVENTS_PER_TURN: usize = 256;

/// Checks that `endpoint` is `tcp://host:port`.
pub(crate) fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let rest = endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| format!("{endpoint:?} is not a tcp://host:port endpoint"))?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| format!("{endpoint:?} has no port"))?;
    if host.is_empty() || host == "[]" {
        return Err(format!("{endpoint:?} has no host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("{endpoint:?}: bad port {port:?}")),
    }
}

/// Most bytes a connection may send before its first message is complete, that message
/// included: the ZMTP handshake's READY and a Hello (or a Welcome), with room to spare.
const FIRST_MESSAGE_MAX: usize = 1024;

fn socket_options(opts: &ZmqOptions) -> SocketOptions {
    let mut so = SocketOptions::default();
    // The largest session packet, its ZMTP header, and room for a handshake's commands.
    so.max_message_size(opts.session.frame_len_max + DATA_OVERHEAD + 1024);
    // Until a connection said who it is, it holds at most this much of our memory.
    so.max_first_message_size(FIRST_MESSAGE_MAX);
    // However many strangers connect, they hold at most this many file descriptors.
    so.max_connections(opts.connections_max);
    // A connection's ZMTP handshake, both ways, takes at most as long as ours.
    so.connect_timeout(Duration::from_micros(opts.session.handshake_timeout.as_micros()));
    so
}

/// The runtime and the listening ROUTER, before the peers are known.
pub(crate) struct Prepared {
    rt: tokio::runtime::Runtime,
    router: RouterSocket,
}

impl Prepared {
    pub fn bind(opts: &ZmqOptions) -> Result<(Prepared, SocketAddr), ZmqError> {
        let bind_err = |reason: String| ZmqError::Bind { endpoint: opts.bind.clone(), reason };
        let rest = opts
            .bind
            .strip_prefix("tcp://")
            .ok_or_else(|| bind_err("not a tcp://host:port endpoint".into()))?;
        let host_port = rest.replace(['[', ']'], "");
        let addr = if let Ok(a) = rest.parse::<SocketAddr>() {
            a
        } else {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| bind_err("no port".into()))?;
            let port: u16 = port.parse().map_err(|_| bind_err(format!("bad port {port:?}")))?;
            (host.trim_matches(['[', ']']), port)
                .to_socket_addrs()
                .map_err(|e| bind_err(e.to_string()))?
                .next()
                .ok_or_else(|| bind_err(format!("{host_port} resolves to no address")))?
        };
        let listener = TcpListener::bind(addr).map_err(|e| bind_err(e.to_string()))?;
        let bound = listener.local_addr().map_err(|e| bind_err(e.to_string()))?;
        listener.set_nonblocking(true).map_err(|e| bind_err(e.to_string()))?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ZmqError::Io)?;
        let mut router = RouterSocket::with_options(socket_options(opts));
        rt.block_on(async { router.bind_listener(listener).await }).map_err(|e| bind_err(e.to_string()))?;
        Ok((Prepared { rt, router }, bound))
    }

    pub fn start(
        self,
        me: NodeId,
        peers: Vec<String>,
        shared: Arc<Shared>,
        opts: &ZmqOptions,
    ) -> Result<(JoinHandle<()>, tokio::runtime::Handle), ZmqError> {
        let Prepared { rt, router } = self;
        let handle = rt.handle().clone();
        let opts = opts.clone();
        let thread = std::thread::Builder::new()
            .name(format!("parma-zmq-{}", me.0))
            .spawn(move || {
                // The loop runs as a task, not as `block_on`'s own future: the socket tasks
                // wake it on every packet, and waking `block_on`'s future writes to the
                // runtime's eventfd even from its own thread (one more system call and one
                // more turn of epoll per packet); waking a task is a push to the local queue.
                let _ = rt.block_on(rt.spawn(run(router, peers, shared, opts)));
                // Dropping the runtime ends every socket task.
                drop(rt);
            })
            .map_err(ZmqError::Io)?;
        Ok((thread, handle))
    }
}

/// Most packets a socket's task hands to the sessions under one lock.
const PACKETS_PER_TURN: usize = 64;

/// Most bytes of messages a socket's task takes in one turn (with the first message, which
/// may be larger alone).
const BYTES_PER_TURN: usize = 256 << 10;

/// Bytes of the frames of `msg`.
fn message_len(msg: &ZmqMessage) -> usize {
    msg.iter().map(Bytes::len).sum()
}

/// What [`more`] took.
struct Turn {
    /// The socket ended.
    ended: bool,
    /// The batch reached [`BYTES_PER_TURN`]: call [`Turn::pass`] after delivering it.
    full: bool,
}

impl Turn {
    /// After a full batch, lets the node's driver (a task of this thread, when hosted here)
    /// take those frames before the socket's task reads more, so that their buffers are freed
    /// and reused while still in the cache instead of megabytes of frames piling up in the
    /// inbox. Both readers (the ROUTER's and each DEALER's) end their turns here.
    async fn pass(&self) {
        if self.full {
            tokio::task::yield_now().await;
        }
    }
}

/// Adds to `batch` the messages `socket` has ready now, up to [`PACKETS_PER_TURN`] messages
/// and [`BYTES_PER_TURN`] bytes, without waiting.
fn more(socket: &mut impl SocketRecv, batch: &mut Vec<ZmqMessage>) -> Turn {
    let mut bytes: usize = batch.iter().map(message_len).sum();
    while batch.len() < PACKETS_PER_TURN && bytes < BYTES_PER_TURN {
        // A receive that is not ready is dropped: the crate's receive only polls its queue of
        // decoded messages, so nothing is lost (the sockets' `select!` relies on the same).
        match socket.recv().now_or_never() {
            Some(Ok(msg)) => {
                bytes += message_len(&msg);
                batch.push(msg);
            }
            Some(Err(_)) => return Turn { ended: true, full: bytes >= BYTES_PER_TURN },
            None => return Turn { ended: false, full: bytes >= BYTES_PER_TURN },
        }
    }
    Turn { ended: false, full: bytes >= BYTES_PER_TURN }
}

/// Runs `f` on the shared state for a socket's task, then wakes the driver if `f` gave it
/// something (a frame, an event) and the loop, which sends what the sessions have to say
/// (acknowledgements, handshakes). The driver is woken from here, by the task that read the
/// packet, and not a turn of the loop later.
fn deliver<R>(shared: &Shared, f: impl FnOnce(&mut crate::shared::State) -> R) -> R {
    let (r, wake) = {
        let mut st = lock(&shared.state);
        let r = f(&mut st);
        (r, st.due_waker())
    };
    if let Some(w) = wake {
        w.wake();
    }
    shared.io_wake.notify_one();
    r
}

async fn run(mut router: RouterSocket, peers: Vec<String>, shared: Arc<Shared>, opts: ZmqOptions) {
    let (events_tx, mut events) = mpsc::channel::<IoEvent>(1024);
    let mut monitor = router.monitor();
    let (router_send, mut router_recv) = router.split();
    lock(&shared.state).router = Some(router_send.clone());

    // The ROUTER's reader: every message is [identity, packet], [identity, head, frame] or
    // [identity, empty, packet, packet, ...] (see `packets`).
    let rshared = shared.clone();
    let rsend = router_send.clone();
    let reader = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(PACKETS_PER_TURN);
        let mut closes = Vec::new();
        while let Ok(first) = router_recv.recv().await {
            batch.push(first);
            let turn = more(&mut router_recv, &mut batch);
            deliver(&rshared, |st| {
                for msg in batch.drain(..) {
                    let mut frames = msg.into_vecdeque();
                    let Some(identity) = frames.pop_front() else { continue };
                    // A message of another shape is a stranger's. As an empty packet it is
                    // refused (no Hello, no session packet) and its connection closed.
                    let ps = packets(frames).unwrap_or(Packets::One(Some(Default::default())));
                    for (head, body) in ps {
                        if let Some(Action::Close { identity }) =
                            st.routed_packet(identity.clone(), &head, body)
                        {
                            closes.push(identity);
                            break;
                        }
                    }
                }
            });
            for identity in closes.drain(..) {
                rsend.disconnect(&identity);
            }
            if turn.ended {
                break;
            }
            turn.pass().await;
        }
    });
    let tx = events_tx.clone();
    let watcher = tokio::spawn(async move {
        while let Some(ev) = monitor.next().await {
            let ev = match ev {
                SocketEvent::Disconnected(id) => {
                    IoEvent::RoutedLost { identity: Bytes::copy_from_slice(id.as_ref()) }
                }
                SocketEvent::AcceptFailed(_) | SocketEvent::Refused(_) => IoEvent::ZmtpRefused,
                SocketEvent::Accepted(_, id) => {
                    IoEvent::Accepted { identity: Bytes::copy_from_slice(id.as_ref()) }
                }
                _ => continue,
            };
            if tx.send(ev).await.is_err() {
                break;
            }
        }
    });
    // `events_tx` lives as long as the loop: the channel never reports closed while it runs.

    let mut actions = Vec::new();
    let mut linger_until: Option<tokio::time::Instant> = None;
    loop {
        let wake;
        let next = {
            let mut st = lock(&shared.state);
            if st.killed {
                break;
            }
            let next = st.pump(&mut actions);
            wake = st.due_waker();
            if st.is_closing() {
                let deadline = *linger_until.get_or_insert_with(|| tokio::time::Instant::now() + opts.linger);
                if st.all_done() || tokio::time::Instant::now() >= deadline {
                    break;
                }
            }
            next.map(|t| {
                let now = st.now();
                Duration::from_micros(t.0.saturating_sub(now.0))
            })
        };
        if let Some(w) = wake {
            w.wake();
        }
        for a in actions.drain(..) {
            match a {
                Action::Connect { peer, gen } => {
                    let endpoint = peers[usize::from(peer.0)].clone();
                    tokio::spawn(dealer(peer, gen, endpoint, opts.clone(), shared.clone()));
                }
                Action::Close { identity } => {
                    router_send.disconnect(&identity);
                }
            }
        }
        let mut wait = next.unwrap_or(Duration::from_secs(1));
        if let Some(d) = linger_until {
            wait = wait.min(d.saturating_duration_since(tokio::time::Instant::now()));
        }
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { continue };
                let mut st = lock(&shared.state);
                handle(&mut st, ev);
                for _ in 1..EVENTS_PER_TURN {
                    match events.try_recv() {
                        Ok(ev) => handle(&mut st, ev),
                        Err(_) => break,
                    }
                }
            }
            _ = shared.io_wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
    // The links' sending halves go with the state's links; the tasks end with the runtime.
    lock(&shared.state).release_links();
    reader.abort();
    watcher.abort();
}

fn handle(st: &mut crate::shared::State, ev: IoEvent) {
    match ev {
        IoEvent::RoutedLost { identity } => st.routed_lost(&identity),
        IoEvent::ZmtpRefused => st.refused_connection(),
        IoEvent::Accepted { identity } => st.routed_accepted(identity),
    }
}

/// Opens a DEALER connection to `endpoint` for link `gen` to `peer`, hands its sending half
/// to the link, then reads its packets until the connection or the link ends.
async fn dealer(peer: NodeId, gen: u64, endpoint: String, opts: ZmqOptions, shared: Arc<Shared>) {
    let mut so = socket_options(&opts);
    let id: [u8; 16] = rand::random();
    // The type is not exported by the crate; `TryFrom<Vec<u8>>` is.
    if let Ok(identity) = id.to_vec().try_into() {
        so.peer_identity(identity);
    }
    let mut socket = DealerSocket::with_options(so);
    let mut monitor = socket.monitor();
    if let Err(e) = socket.connect(&endpoint).await {
        tracing::debug!(peer = peer.0, %endpoint, "connect failed: {e}");
        deliver(&shared, |st| st.link_lost(peer, gen, false));
        return;
    }
    let (send, mut recv) = socket.split();
    // The link holds `task`; when it lets go of the link, `dropped` ends this task.
    let (task, mut dropped) = oneshot::channel::<()>();
    deliver(&shared, |st| st.dealer_up(peer, gen, send, task));
    let mut batch = Vec::with_capacity(PACKETS_PER_TURN);
    loop {
        tokio::select! {
            _ = &mut dropped => return, // the link was dropped: the socket closes with this task
            msg = recv.recv() => match msg {
                Ok(msg) => {
                    batch.push(msg);
                    let turn = more(&mut recv, &mut batch);
                    let whole = deliver(&shared, |st| {
                        for msg in batch.drain(..) {
                            let Some(ps) = packets(msg.into_vecdeque()) else { return false };
                            for (head, body) in ps {
                                st.dealer_packet(peer, gen, &head, body);
                            }
                        }
                        true
                    });
                    if turn.ended || !whole {
                        break;
                    }
                    turn.pass().await;
                }
                Err(_) => break,
            },
            ev = monitor.next() => match ev {
                Some(SocketEvent::Disconnected(_)) | None => break,
                Some(_) => {}
            },
        }
    }
    deliver(&shared, |st| st.link_lost(peer, gen, true));
}
