//! What the driver's thread and the I/O thread share: the sessions and the queues, behind one
//! lock that neither holds for long (no I/O, no node work under it).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use bytes::Bytes;
use futures::FutureExt;
use parma_core::session::{
    FailCause, Frame, Identity, Outbound, Refusal, Session, SessionEvent, Token, PROOF_LEN,
};
use parma_core::transport::{RecvError, SendError, TransportEvent};
use parma_core::{Instant, NodeId};
use tokio::sync::oneshot;
use zeromq::{DealerSendHalf, RouterSendHalf, SocketSend, ZmqMessage};

use crate::shapes::{BATCH_BYTES_MAX, BATCH_PACKETS_MAX, ONE_PART_MAX, PART_COST};
use crate::{ZmqOptions, ZmqStats};

mod routed;

/// Received frames up to this long are copied out of the socket's read buffer (see
/// `State::session_packet`); longer ones are handed to the driver as read.
const COPY_BELOW: usize = 8 << 10;

/// The size of the buffers packet heads are cut from.
const HEADS_CHUNK: usize = 64 << 10;

/// The cluster token, shared by every session of the node.
#[derive(Clone)]
pub(crate) struct SharedToken(pub Arc<dyn Token + Send + Sync>);

impl Token for SharedToken {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; PROOF_LEN] {
        self.0.prove(nonce, prover, verifier, digest)
    }
}

/// Frames taken for the driver, with their senders.
pub(crate) type Frames = Vec<(NodeId, Bytes)>;

/// Where a link's packets go: straight into the socket's queue, from under the lock (the
/// crate's writer task puts them on the connection), with no task of ours in between.
pub(crate) enum Out {
    /// The DEALER this node opened to the peer.
    Dealer(DealerSendHalf),
    /// The peer's connection to our ROUTER, by its routing id.
    Router(RouterSendHalf, Bytes),
}

impl Out {
    /// Queues `o`, a packet that does not go in a batch (one without a frame, or with a frame
    /// over [`ONE_PART_MAX`]), on the connection as one ZMTP message: its head, and its frame
    /// lent as a second part (not copied). False as for [`Out::queue`].
    fn send(&mut self, heads: &mut Heads, o: Outbound) -> bool {
        let mut parts = VecDeque::with_capacity(3);
        parts.push_back(heads.cut(&[o.head()]));
        if let Some(f) = o.into_body() {
            parts.push_back(Bytes::from_owner(Lent(f)));
        }
        self.queue(parts)
    }

    /// Queues `packets` (each whole, in one part) on the connection as one ZMTP message, and
    /// empties it: a lone packet as it is, several behind an empty first part (see [`packets`]).
    /// False as for [`Out::queue`].
    fn send_batch(&mut self, packets: &mut Vec<Bytes>) -> bool {
        let mut parts = VecDeque::with_capacity(packets.len() + 2);
        if packets.len() > 1 {
            parts.push_back(Bytes::new());
        }
        parts.extend(packets.drain(..));
        self.queue(parts)
    }

    /// Queues the message of `parts` (behind the peer's identity on our ROUTER). False: the
    /// connection is gone, or its queue (100,000 messages, far beyond a window) is full; the
    /// packets are lost with the link and the session sends them again on the next one.
    fn queue(&mut self, mut parts: VecDeque<Bytes>) -> bool {
        if let Out::Router(_, identity) = self {
            parts.push_front(identity.clone());
        }
        let Ok(msg) = ZmqMessage::try_from(parts) else { return false };
        let sent = match self {
            Out::Dealer(d) => d.send(msg).now_or_never(),
            Out::Router(r, _) => r.send(msg).now_or_never(),
        };
        matches!(sent, Some(Ok(())))
    }
}

/// A frame of the retransmission buffer lent to the socket: the `Bytes` the crate sends
/// refers to the session's buffer, and gives it back when written.
struct Lent(Frame);

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Packet heads (and small packets whole), cut from one buffer: one allocation per many
/// packets, not one per packet.
struct Heads(bytes::BytesMut);

impl Heads {
    /// `pieces`, one after another, as one buffer.
    fn cut(&mut self, pieces: &[&[u8]]) -> Bytes {
        let len = pieces.iter().map(|p| p.len()).sum::<usize>();
        if self.0.capacity() - self.0.len() < len {
            self.0 = bytes::BytesMut::with_capacity(HEADS_CHUNK.max(len));
        }
        for p in pieces {
            self.0.extend_from_slice(p);
        }
        self.0.split().freeze()
    }
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    /// Wakes the I/O thread: frames to put on the wire, room in a window, a close.
    pub io_wake: tokio::sync::Notify,
}

impl Shared {
    pub fn new(state: State) -> Shared {
        Shared { state: Mutex::new(state), io_wake: tokio::sync::Notify::new() }
    }
}

/// The connection a session's link runs over, as the I/O thread knows it.
pub(crate) enum Link {
    None,
    /// A DEALER connection is being opened (task `gen`).
    Connecting {
        gen: u64,
    },
    /// An open connection: packets for it go to `out`. `identity` is the peer's routing id on
    /// our ROUTER when the peer opened it; when this node opened it, dropping `_task` ends the
    /// DEALER's task (and the connection with it).
    Open {
        gen: u64,
        out: Out,
        identity: Option<Bytes>,
        _task: Option<oneshot::Sender<()>>,
    },
}

/// What the I/O thread must do outside the lock.
pub(crate) enum Action {
    /// Open a DEALER connection to `peer` as link `gen`.
    Connect { peer: NodeId, gen: u64 },
    /// Close the connection behind `identity` on our ROUTER: a link given up, or a stranger
    /// refused. The end that connected learns it at once (a peer opens its link again).
    Close { identity: Bytes },
}

pub(crate) struct State {
    pub me: NodeId,
    start: std::time::Instant,
    sessions: Vec<Option<Session<SharedToken>>>,
    /// Frames each session delivered (the bytes as they came off the socket), not yet taken;
    /// at most `recv_frames_max` frames and `recv_bytes_max` bytes per peer, the window the session grants.
    inbox: Vec<VecDeque<Bytes>>,
    heads: Heads,
    /// Small packets for one peer gathered into one message (empty between pumps).
    batch: Vec<Bytes>,
    batch_bytes_max: usize,
    links: Vec<Link>,
    /// ROUTER identities of the links peers opened, to their peer and link (the session's, or
    /// its candidate).
    routed: HashMap<Bytes, (NodeId, u64)>,
    /// Per peer, the connection to our ROUTER whose handshake runs beside the session's link
    /// until it proves the token (link `gen`, routing id): see `routed.rs`.
    candidates: Vec<Option<(u64, Bytes)>>,
    /// Strangers refused so far, by kind of refusal: each kind is logged at its first, second,
    /// fourth, ... refusal.
    refusals_of: HashMap<&'static str, u64>,
    /// ROUTER connections to close: links given up, strangers refused.
    to_close: Vec<Bytes>,
    /// ROUTER connections that passed the ZMTP handshake and have not sent a packet yet, in
    /// the order they came, with the time by which they must (or be closed); and which of
    /// them are still silent.
    silent: VecDeque<(Instant, Bytes)>,
    silent_ids: HashSet<Bytes>,
    /// How long a connection may stay silent after its ZMTP handshake.
    first_packet_within: parma_core::time::Duration,
    next_gen: u64,
    /// Our ROUTER's sending half, once the I/O loop runs: links peers opened send through it.
    pub router: Option<RouterSendHalf>,
    self_frames: VecDeque<Bytes>,
    self_frames_max: usize,
    events: VecDeque<TransportEvent>,
    /// Peers whose failure was reported to the session's user: nothing from them follows.
    gone: Vec<bool>,
    /// Peers whose failure is queued in `events`.
    failed: Vec<bool>,
    /// The first peer lost (failed, or named by a peer's Bye): every session's Bye names it.
    first_lost: Option<NodeId>,
    pub waker: Option<Waker>,
    /// A `try_send` answered `WouldBlock` since room last freed.
    blocked: bool,
    cursor: usize,
    closing: bool,
    /// Stopped at once, as by a crash: no goodbye, nothing delivered any more.
    pub killed: bool,
    /// Something the driver should look at (frames, events, room).
    wake_due: bool,
    counters: ZmqStats,
    links_opened: Vec<u64>,
}

impl State {
    pub fn new(
        id: Identity,
        n: usize,
        opts: &ZmqOptions,
        token: Arc<dyn Token + Send + Sync>,
    ) -> Result<State, Refusal> {
        let start = std::time::Instant::now();
        let token = SharedToken(token);
        let mut sessions = Vec::with_capacity(n);
        for p in 0..n {
            let peer = NodeId(p as u16);
            sessions.push(if peer == id.me {
                None
            } else {
                Some(Session::new(opts.session, id, peer, token.clone(), Instant(0))?)
            });
        }
        Ok(State {
            me: id.me,
            start,
            sessions,
            inbox: (0..n).map(|_| VecDeque::new()).collect(),
            heads: Heads(bytes::BytesMut::new()),
            batch: Vec::with_capacity(BATCH_PACKETS_MAX),
            batch_bytes_max: BATCH_BYTES_MAX.min(opts.session.frame_len_max),
            links: (0..n).map(|_| Link::None).collect(),
            routed: HashMap::new(),
            candidates: (0..n).map(|_| None).collect(),
            refusals_of: HashMap::new(),
            to_close: Vec::new(),
            silent: VecDeque::new(),
            silent_ids: HashSet::new(),
            first_packet_within: opts.session.handshake_timeout,
            next_gen: 1,
            router: None,
            self_frames: VecDeque::new(),
            self_frames_max: opts.self_frames_max,
            events: VecDeque::new(),
            gone: vec![false; n],
            failed: vec![false; n],
            first_lost: None,
            waker: None,
            blocked: false,
            cursor: 0,
            closing: false,
            killed: false,
            wake_due: false,
            counters: ZmqStats::default(),
            links_opened: vec![0; n],
        })
    }

    pub fn now(&self) -> Instant {
        Instant(self.start.elapsed().as_micros() as u64)
    }

    fn session(&mut self, peer: NodeId) -> Option<&mut Session<SharedToken>> {
        self.sessions.get_mut(usize::from(peer.0)).and_then(Option::as_mut)
    }

    // ----- the driver's side -----

    pub fn send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        if self.closing || self.killed {
            return Err(SendError::Closed);
        }
        let i = usize::from(to.0);
        if i >= self.sessions.len() {
            return Err(SendError::UnknownPeer);
        }
        if to == self.me {
            if self.self_frames.len() >= self.self_frames_max {
                self.blocked = true;
                self.counters.sends_blocked += 1;
                return Err(SendError::WouldBlock);
            }
            let mut f = vec![0; len];
            fill(&mut f);
            self.self_frames.push_back(Bytes::from(f));
            self.counters.frames_sent += 1;
            self.counters.bytes_sent += len as u64;
            self.wake_due = true;
            self.wake_if_due();
            return Ok(());
        }
        if self.failed[i] || self.gone[i] {
            return Err(SendError::PeerFailed);
        }
        let Some(s) = self.session(to) else { return Err(SendError::UnknownPeer) };
        match s.send_with(len, fill) {
            Ok(()) => {
                self.counters.frames_sent += 1;
                self.counters.bytes_sent += len as u64;
                Ok(())
            }
            Err(SendError::WouldBlock) => {
                self.blocked = true;
                self.counters.sends_blocked += 1;
                Err(SendError::WouldBlock)
            }
            // The peer said goodbye, and the I/O thread has not reported it yet: to the
            // driver that is a peer gone, not this transport closed (which would stop the
            // node). The session's `Closed` means the session, not the transport.
            Err(SendError::Closed) => Err(SendError::PeerFailed),
            Err(e) => Err(e),
        }
    }

    /// Up to `max` received frames, round robin over the peers; whether a peer's window grew
    /// (the I/O thread should tell it).
    pub fn take(&mut self, max: usize, out: &mut Frames) -> Result<bool, RecvError> {
        if self.closing || self.killed {
            return Err(RecvError::Closed);
        }
        let n = self.sessions.len();
        let start = out.len();
        let mut window_moved = false;
        let mut idle = 0;
        while out.len() - start < max && idle < n {
            let p = self.cursor % n;
            self.cursor = (self.cursor + 1) % n;
            let peer = NodeId(p as u16);
            let frame = if peer == self.me {
                let f = self.self_frames.pop_front();
                if f.is_some() && self.blocked {
                    self.wake_due = true;
                }
                f
            } else if self.gone[p] {
                None
            } else {
                let f = self.inbox[p].pop_front();
                if f.is_some() {
                    window_moved = true;
                    if let Some(s) = self.session(peer) {
                        s.frames_taken(1);
                    }
                }
                f
            };
            match frame {
                Some(f) => {
                    idle = 0;
                    self.counters.frames_received += 1;
                    self.counters.bytes_received += f.len() as u64;
                    out.push((peer, f));
                }
                None => idle += 1,
            }
        }
        self.wake_if_due();
        Ok(window_moved)
    }

    pub fn next_event(&mut self) -> Option<TransportEvent> {
        let e = self.events.pop_front()?;
        if let TransportEvent::PeerFailed(p) = e {
            if let Some(g) = self.gone.get_mut(usize::from(p.0)) {
                *g = true;
            }
        }
        Some(e)
    }

    pub fn close(&mut self) {
        if self.closing {
            return;
        }
        self.closing = true;
        let now = self.now();
        for s in self.sessions.iter_mut().flatten() {
            if let Some(lost) = self.first_lost {
                s.tell_lost(lost);
            }
            s.close(now);
        }
    }

    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Every session is closed or failed, or its peer was reported failed (a peer's Bye named
    /// it): nothing left to deliver.
    pub fn all_done(&self) -> bool {
        self.sessions
            .iter()
            .zip(&self.failed)
            .all(|(s, failed)| *failed || s.as_ref().is_none_or(|s| s.is_closed() || s.failure().is_some()))
    }

    pub fn is_up(&self, peer: NodeId) -> bool {
        self.sessions.get(usize::from(peer.0)).and_then(Option::as_ref).is_some_and(|s| s.is_up())
    }

    pub fn stats(&self) -> ZmqStats {
        let mut c = self.counters;
        for s in self.sessions.iter().flatten() {
            let st = s.stats();
            c.packets_sent += st.packets_sent;
            c.wire_bytes_sent += st.bytes_sent;
            c.frames_retransmitted += st.frames_retransmitted;
            c.duplicates_dropped += st.duplicates_dropped;
            c.handshakes_timed_out += st.handshakes_timed_out;
            c.session_refusals += st.refused;
            c.strangers_refused += st.strangers_refused;
        }
        c.reconnects = self.links_opened.iter().map(|&n| n.saturating_sub(1)).sum();
        c
    }

    fn wake_if_due(&mut self) {
        if self.wake_due {
            self.wake_due = false;
            if let Some(w) = &self.waker {
                w.wake_by_ref();
            }
        }
    }

    // ----- the I/O thread's side -----

    /// A DEALER connection `gen` to `peer` is open, with `out` its sending half; dropping
    /// `task` ends the DEALER's task.
    pub fn dealer_up(&mut self, peer: NodeId, gen: u64, out: DealerSendHalf, task: oneshot::Sender<()>) {
        let i = usize::from(peer.0);
        if !matches!(self.links.get(i), Some(Link::Connecting { gen: g }) if *g == gen) {
            return; // the session gave up on this attempt; dropping `task` ends the connection
        }
        let now = self.now();
        let nonce = rand::random();
        if let Some(s) = self.session(peer) {
            s.link_up(now, nonce);
        }
        self.links[i] = Link::Open { gen, out: Out::Dealer(out), identity: None, _task: Some(task) };
    }

    /// The connection of link `gen` to `peer` failed to open, or closed.
    pub fn link_lost(&mut self, peer: NodeId, gen: u64, opened: bool) {
        let i = usize::from(peer.0);
        let current = match self.links.get(i) {
            Some(Link::Connecting { gen: g }) | Some(Link::Open { gen: g, .. }) => *g == gen,
            _ => false,
        };
        if !current {
            return;
        }
        if !opened {
            self.counters.connects_failed += 1;
        }
        self.drop_link(peer);
        let now = self.now();
        if let Some(s) = self.session(peer) {
            s.link_down(now);
        }
    }

    /// A packet (`head` and `body`, see [`split`]) from the DEALER connection `gen` to `peer`.
    pub fn dealer_packet(&mut self, peer: NodeId, gen: u64, head: &[u8], body: Bytes) {
        let i = usize::from(peer.0);
        if !matches!(self.links.get(i), Some(Link::Open { gen: g, .. }) if *g == gen) {
            return; // a packet of an old connection
        }
        self.session_packet(peer, head, body);
    }

    fn session_packet(&mut self, peer: NodeId, head: &[u8], body: Bytes) {
        let now = self.now();
        let me = self.me.0;
        let p = usize::from(peer.0);
        let Some(s) = self.sessions.get_mut(p).and_then(Option::as_mut) else { return };
        match s.handle_parts(now, head, &body) {
            Ok(true) => {
                // A small frame is copied out of the socket's read buffer, which is then
                // free to be reused for the next read: kept, it would make every read
                // allocate a fresh buffer while frames wait for the driver. A
                // larger frame is not copied: the vendored crate reads a body of 16 KiB or
                // more that a read did not take whole into an allocation of its own.
                let body = if body.len() <= COPY_BELOW { Bytes::copy_from_slice(&body) } else { body };
                // Within the window the session grants: at most `recv_frames_max` wait here.
                self.inbox[p].push_back(body);
                self.wake_due = true;
            }
            Ok(false) => {}
            Err(r) => {
                tracing::warn!(node = me, peer = peer.0, "refused a packet, dropping the connection: {r}");
                // The session dropped its link; the connection goes with it.
                if !s.is_up() {
                    self.drop_link(peer);
                }
            }
        }
    }

    fn gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    fn drop_link(&mut self, peer: NodeId) {
        self.unlink(usize::from(peer.0));
    }

    /// Forgets peer `p`'s connection; one on our ROUTER is closed.
    fn unlink(&mut self, p: usize) {
        if let Link::Open { identity: Some(id), .. } = &self.links[p] {
            self.routed.remove(id);
            self.to_close.push(id.clone());
        }
        self.links[p] = Link::None;
    }

    /// The I/O loop ended: every connection's sending half is let go.
    pub fn release_links(&mut self) {
        for l in &mut self.links {
            *l = Link::None;
        }
        for c in &mut self.candidates {
            *c = None;
        }
        self.router = None;
    }

    /// Timers, session events and packets to send, for every peer: what must happen outside
    /// the lock, and when to come back. Then [`State::due_waker`].
    pub fn pump(&mut self, actions: &mut Vec<Action>) -> Option<Instant> {
        let now = self.now();
        let mut next: Option<Instant> = self.close_silent(now);
        for p in 0..self.sessions.len() {
            let peer = NodeId(p as u16);
            let Some(s) = self.sessions[p].as_mut() else { continue };
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
            let mut evs = Vec::new();
            while let Some(ev) = s.poll_event() {
                evs.push(ev);
            }
            for ev in evs {
                match ev {
                    SessionEvent::Connect => {
                        self.next_gen += 1;
                        let gen = self.next_gen;
                        self.unlink(p);
                        self.links[p] = Link::Connecting { gen };
                        actions.push(Action::Connect { peer, gen });
                    }
                    SessionEvent::Up => {
                        self.links_opened[p] += 1;
                        if self.links_opened[p] == 1 {
                            tracing::info!(node = self.me.0, peer = peer.0, "peer up");
                        } else {
                            tracing::info!(node = self.me.0, peer = peer.0, "peer reconnected");
                        }
                    }
                    SessionEvent::Down => {
                        tracing::debug!(node = self.me.0, peer = peer.0, "handshake timed out");
                        self.unlink(p);
                    }
                    SessionEvent::CandidateDown => {
                        tracing::debug!(
                            node = self.me.0,
                            peer = peer.0,
                            "a handshake beside the link timed out"
                        );
                        self.drop_candidate(p);
                    }
                    SessionEvent::Writable if self.blocked => {
                        self.blocked = false;
                        self.wake_due = true;
                    }
                    SessionEvent::PeerFailed(cause) => {
                        let why = match cause {
                            FailCause::Silent => "silent for longer than peer_timeout",
                            FailCause::Restarted => "restarted and lost its state",
                            _ => "failed",
                        };
                        if !self.closing {
                            tracing::warn!(node = self.me.0, peer = peer.0, "peer failed: {why}");
                        }
                        self.report_lost(p);
                    }
                    SessionEvent::Closed => {
                        // A peer that stops because it lost another says which (its Bye): that
                        // loss is reported first, so that what waits here fails naming the
                        // node that failed, not the one that left because of it.
                        let named = self.sessions[p].as_ref().and_then(Session::peer_lost);
                        let named = named.map(|x| usize::from(x.0)).filter(|&x| {
                            x < self.failed.len() && x != usize::from(self.me.0) && x != p && !self.failed[x]
                        });
                        if let Some(x) = named {
                            if !self.closing {
                                tracing::warn!(
                                    node = self.me.0,
                                    peer = x,
                                    reported_by = peer.0,
                                    "peer failed: named by a peer that stopped after losing it"
                                );
                            }
                            self.report_lost(x);
                        }
                        tracing::debug!(node = self.me.0, peer = peer.0, "session closed");
                        self.report_failed(p);
                    }
                    _ => {}
                }
            }
            let s = self.sessions[p].as_mut().expect("checked above");
            let mut lost = false;
            if let Link::Open { out, .. } = &mut self.links[p] {
                // Small data packets in a row go out as one message (see `packets`); anything
                // else (a large frame, a packet of the handshake or an ack) on its own, after
                // the batch before it, so that the order holds.
                let (batch, mut bytes) = (&mut self.batch, 0);
                while let Some(packet) = s.poll_transmit_parts() {
                    let small = match packet.body() {
                        Some(f) if f.len() <= ONE_PART_MAX => Some(f.as_slice()),
                        _ => None,
                    };
                    if let Some(frame) = small {
                        let cost = packet.len() + PART_COST;
                        let full = batch.len() == BATCH_PACKETS_MAX || bytes + cost > self.batch_bytes_max;
                        if full && !batch.is_empty() {
                            if !out.send_batch(batch) {
                                lost = true;
                                break;
                            }
                            bytes = 0;
                        }
                        batch.push(self.heads.cut(&[packet.head(), frame]));
                        bytes += cost;
                        continue;
                    }
                    if (!batch.is_empty() && !out.send_batch(batch)) || !out.send(&mut self.heads, packet) {
                        lost = true; // the connection is gone
                        break;
                    }
                    bytes = 0;
                }
                if !lost && !batch.is_empty() && !out.send_batch(batch) {
                    lost = true;
                }
                batch.clear();
            }
            if lost {
                s.link_down(now);
                self.unlink(p);
            }
            let s = self.sessions[p].as_mut().expect("checked above");
            if let Some(t) = s.poll_timeout() {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        }
        actions.extend(self.to_close.drain(..).map(|identity| Action::Close { identity }));
        next
    }

    /// The driver's waker, if something became due for it since it was last woken: the I/O
    /// thread wakes it after releasing the lock, so that the driver does not wake only to
    /// wait for the lock.
    pub fn due_waker(&mut self) -> Option<Waker> {
        if !self.wake_due {
            return None;
        }
        self.wake_due = false;
        self.waker.clone()
    }

    /// Peer `p` failed (or a peer's Bye named it): reported, and named in every session's Bye
    /// at the close, unless an earlier loss is.
    fn report_lost(&mut self, p: usize) {
        self.first_lost.get_or_insert(NodeId(p as u16));
        self.report_failed(p);
    }

    fn report_failed(&mut self, p: usize) {
        if !self.failed[p] {
            self.failed[p] = true;
            self.counters.peers_failed += 1;
            self.events.push_back(TransportEvent::PeerFailed(NodeId(p as u16)));
            self.wake_due = true;
        }
        if let Link::Open { identity: Some(id), .. } = &self.links[p] {
            self.routed.remove(id);
        }
        // Keep an open connection until the Bye went out; a failed session has nothing to say.
        if self.sessions[p].as_ref().is_some_and(|s| s.failure().is_some()) {
            self.unlink(p);
        }
        self.drop_candidate(p);
    }

    /// Closes peer `p`'s candidate connection, if any (see `routed.rs`).
    fn drop_candidate(&mut self, p: usize) {
        if let Some((_, id)) = self.candidates[p].take() {
            self.routed.remove(&id);
            self.to_close.push(id);
        }
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
