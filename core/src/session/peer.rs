//! The session with one peer: handshake, sequence numbers, acknowledgements, retransmission,
//! credits and heartbeats, as a state machine (bytes and time in, packets, events and timers
//! out).

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::outbound::{Frame, Outbound};
use super::packet::{decode_head, head_len, Greeting, Packet, DATA_OVERHEAD};
use super::{FailCause, Identity, Refusal, SessionEvent, SessionOptions, SessionStats, Token};
use crate::ids::NodeId;
use crate::time::Instant;
use crate::transport::SendError;

mod handshake;

/// The state of the link the session runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// No link; this end asks for one at `retry` (if it is the end that connects).
    Down { retry: Option<Instant> },
    /// [`SessionEvent::Connect`] was given at `since`; waiting for [`Session::link_up`].
    Connecting { since: Instant },
    /// This end sent a Hello with `nonce` at `since`.
    AwaitWelcome { nonce: u64, since: Instant },
    /// Authenticated: data flows.
    Up,
}

/// A handshake on a link the peer opened (its Hello was taken by [`Session::accept`] at
/// `since`, answered by a Welcome with `nonce`), beside the session's link: nothing of the
/// session follows `hello` until the link proves the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Candidate {
    nonce: u64,
    since: Instant,
    hello: Greeting,
}

/// Whether the session can still carry frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Open,
    /// [`Session::close`] was called: no new frames; a Bye once everything is acknowledged.
    Closing,
    Closed,
    Failed(FailCause),
}

/// One node's session with one peer. See the module docs of [`crate::session`].
pub struct Session<T: Token> {
    opts: SessionOptions,
    id: Identity,
    peer: NodeId,
    token: T,
    link: Link,
    /// The handshake in progress on a link the peer opened, if any.
    candidate: Option<Candidate>,
    phase: Phase,
    now: Instant,
    /// The peer's incarnation, once a handshake told it.
    peer_incarnation: Option<u64>,
    backoff: crate::time::Duration,

    // ----- sending -----
    /// The sequence number the next frame gets.
    next_seq: u64,
    /// Frames sent and not acknowledged, oldest first: the payloads alone, shared with the
    /// driver while it puts them on the medium (the head is written when a frame goes out).
    /// The first has sequence number `acked`.
    unacked: VecDeque<Frame>,
    /// Bytes of their data packets (heads included).
    unacked_bytes: usize,
    /// Buffers of acknowledged frames nobody else holds, for the next frames: no allocation
    /// and no freeing per frame. With `unacked`, within `window_bytes_max` (capacities) and
    /// `window_frames_max`; emptied when the sending side falls idle.
    pool: Vec<Frame>,
    pool_bytes: usize,
    /// Every frame below this was acknowledged.
    acked: u64,
    /// The next frame to put on the current link.
    sent_upto: u64,
    /// The peer takes frames with sequence numbers below this.
    peer_window: u64,
    /// `send` answered `WouldBlock` since room last freed.
    blocked: bool,
    last_progress: Instant,
    last_sent: Instant,

    // ----- receiving -----
    /// The sequence number of the next frame expected from the peer.
    next_expected: u64,
    /// Frames received through [`Session::handle_packet`], not yet taken.
    received: VecDeque<Vec<u8>>,
    /// The lengths of the frames received and not yet taken, oldest first (at most
    /// `recv_frames_max`: the window grants no more), and their sum.
    received_lens: VecDeque<usize>,
    received_bytes: usize,
    /// Frames handed over by `poll_recv`, or reported taken by `frames_taken`.
    taken: u64,
    /// The window last told to the peer.
    advertised: u64,
    /// Frames received since the last acknowledgement sent.
    acks_owed: u64,
    /// Bytes of the data packets received since the last acknowledgement.
    ack_bytes_owed: usize,
    ack_due: Option<Instant>,
    last_heard: Instant,
    /// The peer this end's Bye names ([`Session::tell_lost`]), and the one the peer's named.
    lost: Option<NodeId>,
    peer_lost: Option<NodeId>,

    /// Packets other than data, in order (never a data packet).
    control: VecDeque<Packet>,
    events: VecDeque<SessionEvent>,
    stats: SessionStats,
}

impl<T: Token> Session<T> {
    /// The session of node `id.me` with `peer`, created at `now`. The end with the lower node
    /// id connects; the other accepts. Checks the options.
    pub fn new(
        opts: SessionOptions,
        id: Identity,
        peer: NodeId,
        token: T,
        now: Instant,
    ) -> Result<Self, Refusal> {
        opts.validate()?;
        if peer == id.me {
            return Err(Refusal::WrongPeer { claimed: peer, expected: peer });
        }
        let connects = id.me < peer;
        // What the handshake carries and compares: the configuration digest with the options
        // both ends must agree on.
        let id = Identity { digest: crate::digest::session_digest(id.digest, &opts), ..id };
        Ok(Session {
            opts,
            id,
            peer,
            token,
            link: Link::Down { retry: connects.then_some(now) },
            candidate: None,
            phase: Phase::Open,
            now,
            peer_incarnation: None,
            backoff: opts.reconnect_min,
            next_seq: 1,
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            pool: Vec::new(),
            pool_bytes: 0,
            acked: 1,
            sent_upto: 1,
            peer_window: 1,
            blocked: false,
            last_progress: now,
            last_sent: now,
            next_expected: 1,
            received: VecDeque::new(),
            received_lens: VecDeque::new(),
            received_bytes: 0,
            taken: 0,
            advertised: 1 + opts.recv_frames_max,
            acks_owed: 0,
            ack_bytes_owed: 0,
            ack_due: None,
            last_heard: now,
            lost: None,
            peer_lost: None,
            control: VecDeque::new(),
            events: VecDeque::new(),
            stats: SessionStats::default(),
        })
    }

    // ----- getters -----

    /// The peer.
    pub fn peer(&self) -> NodeId {
        self.peer
    }
    /// Whether the link is authenticated and carries data.
    pub fn is_up(&self) -> bool {
        self.link == Link::Up
    }
    /// Why the session failed, if it did.
    pub fn failure(&self) -> Option<FailCause> {
        match self.phase {
            Phase::Failed(c) => Some(c),
            _ => None,
        }
    }
    /// Whether the session was closed cleanly (by either end).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }
    /// Frames accepted by `send` and not yet acknowledged by the peer.
    pub fn unacked_frames(&self) -> usize {
        self.unacked.len()
    }
    /// Bytes of those frames.
    pub fn unacked_bytes(&self) -> usize {
        self.unacked_bytes
    }
    /// Frames received and not yet taken (with `poll_recv`, or reported by `frames_taken`).
    pub fn received_frames(&self) -> usize {
        (self.next_expected - 1 - self.taken) as usize
    }
    /// Bytes of those frames.
    pub fn received_bytes(&self) -> usize {
        self.received_bytes
    }
    /// Counters.
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    // ----- inputs from the medium -----

    /// The medium opened the link this end asked for with [`SessionEvent::Connect`]; `nonce` is
    /// fresh randomness from the driver. Sends the Hello.
    pub fn link_up(&mut self, now: Instant, nonce: u64) {
        self.now = now;
        if !self.is_open() {
            return;
        }
        let hello = Packet::Hello(self.greeting(nonce));
        self.push_control(hello);
        self.link = Link::AwaitWelcome { nonce, since: now };
    }

    /// The medium lost the link. Frames not acknowledged go out again on the next link.
    pub fn link_down(&mut self, now: Instant) {
        self.now = now;
        self.drop_link();
    }

    /// A packet from the peer on the session's link. On `Err` the packet was refused and the
    /// link dropped (close it); the session goes on over the next link unless it failed. A
    /// frame it carries waits for [`Session::poll_recv`] (a copy of it: a driver that can keep
    /// the bytes it received uses [`Session::handle_parts`] instead).
    pub fn handle_packet(&mut self, now: Instant, bytes: &[u8]) -> Result<(), Refusal> {
        let k = head_len(bytes);
        let (head, body) = bytes.split_at(k);
        if self.handle_parts(now, head, body)? {
            self.received.push_back(body.to_vec());
        }
        Ok(())
    }

    /// [`Session::handle_packet`] of a packet the medium carried as its head and its body (a
    /// data packet's payload; empty for any other kind), or that the driver split with
    /// [`head_len`]. `Ok(true)`: `body` is the next frame from the peer, in order; the driver
    /// keeps it (the session does not) and calls [`Session::frames_taken`] once its user took
    /// it, which opens the window again. A driver uses either this or `handle_packet`.
    pub fn handle_parts(&mut self, now: Instant, head: &[u8], body: &[u8]) -> Result<bool, Refusal> {
        self.now = now;
        let packet = match decode_head(head, body.len(), self.opts.frame_len_max + DATA_OVERHEAD) {
            Ok(p) => p,
            Err(e) => return Err(self.refuse_link(Refusal::Malformed(e))),
        };
        self.stats.packets_received += 1;
        let mut frame = false;
        match (packet, self.link) {
            (Packet::Welcome(g, proof), Link::AwaitWelcome { nonce, .. }) => {
                self.check_greeting(&g).map_err(|r| self.refuse_link(r))?;
                if !self.proof_ok(nonce, &proof) {
                    return Err(self.refuse_link(Refusal::Token));
                }
                if let Err(r) = self.resume(&g) {
                    self.drop_link();
                    return Err(r);
                }
                let proof = self.token.prove(g.nonce, self.id.me, self.peer, self.id.digest);
                self.push_control(Packet::Proof(proof));
                self.link_ready();
            }
            (Packet::Data { seq, ack, window, .. }, Link::Up) => {
                self.on_ack(ack, window).map_err(|r| self.refuse_link(r))?;
                frame = self.on_data(seq, head.len() + body.len(), body.len());
            }
            (Packet::Ack { ack, window }, Link::Up) => {
                self.on_ack(ack, window).map_err(|r| self.refuse_link(r))?;
            }
            (Packet::Bye { lost }, Link::Up) => {
                self.peer_lost = lost;
                self.last_heard = now;
                self.phase = Phase::Closed;
                self.link = Link::Down { retry: None };
                self.events.push_back(SessionEvent::Closed);
            }
            (p, _) => return Err(self.refuse_link(Refusal::Unexpected { kind: packet_name(&p) })),
        }
        self.last_heard = now;
        Ok(frame)
    }

    /// The driver's user took `n` more frames that [`Session::handle_parts`] delivered: the
    /// peer may send as many more.
    pub fn frames_taken(&mut self, n: u64) {
        let before = self.taken;
        self.taken = self.taken.saturating_add(n).min(self.next_expected - 1);
        for _ in before..self.taken {
            self.took_one();
        }
    }

    /// One frame left the received ones, the oldest.
    fn took_one(&mut self) {
        if let Some(len) = self.received_lens.pop_front() {
            self.received_bytes -= len;
        }
    }

    /// Timers: peer silence, reconnection, handshakes that take too long, retransmission,
    /// delayed acknowledgements and heartbeats.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if !matches!(self.phase, Phase::Open | Phase::Closing) {
            return;
        }
        if now - self.last_heard >= self.opts.peer_timeout {
            self.fail(FailCause::Silent);
            return;
        }
        self.candidate_timeout(now);
        match self.link {
            Link::Down { retry: Some(at) } if at <= now => {
                self.link = Link::Connecting { since: now };
                self.events.push_back(SessionEvent::Connect);
            }
            Link::Connecting { since } | Link::AwaitWelcome { since, .. }
                if now - since >= self.opts.handshake_timeout =>
            {
                self.stats.handshakes_timed_out += 1;
                self.drop_link();
                self.events.push_back(SessionEvent::Down);
            }
            Link::Up => {
                if self.sent_upto > self.acked && now - self.last_progress >= self.opts.retransmit_timeout {
                    // Go back: everything not acknowledged goes out again, in order.
                    self.stats.frames_retransmitted += self.sent_upto - self.acked;
                    self.sent_upto = self.acked;
                    self.last_progress = now;
                }
                let ack_due = self.ack_due.is_some_and(|t| t <= now);
                let idle = now - self.last_sent >= self.opts.heartbeat_interval;
                if idle && self.unacked.is_empty() {
                    // Nothing sent for a heartbeat interval: the buffers go back to the heap.
                    self.pool.clear();
                    self.pool_bytes = 0;
                }
                if ack_due || idle {
                    self.send_ack();
                }
            }
            _ => {}
        }
    }

    // ----- commands -----

    /// Queues `frame` (a node frame) for the peer. `WouldBlock` while the frames not yet
    /// acknowledged fill the window: [`SessionEvent::Writable`] follows when room frees.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), SendError> {
        self.send_with(frame.len(), &mut |buf| buf.copy_from_slice(frame))
    }

    /// [`Session::send`] of a frame of `len` bytes that `fill` writes in place (the shape of
    /// [`crate::Transport::try_send`]: one copy, into the retransmission buffer, a buffer of
    /// an acknowledged frame when there is one). On `Err`, `fill` was not called.
    pub fn send_with(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        match self.phase {
            Phase::Open => {}
            Phase::Failed(_) => return Err(SendError::PeerFailed),
            Phase::Closing | Phase::Closed => return Err(SendError::Closed),
        }
        if len > self.opts.frame_len_max {
            return Err(SendError::TooLarge);
        }
        let packet_len = len + DATA_OVERHEAD;
        if self.unacked.len() >= self.opts.window_frames_max
            || (self.unacked_bytes + packet_len > self.opts.window_bytes_max && !self.unacked.is_empty())
        {
            self.blocked = true;
            return Err(SendError::WouldBlock);
        }
        let mut frame = match self.pool.pop() {
            Some(f) => {
                self.pool_bytes -= f.capacity();
                f
            }
            None => Frame::default(),
        };
        // A pooled buffer is held by nobody else; `make_mut` copies nothing then.
        let buf = Arc::make_mut(&mut frame.0);
        if buf.capacity() < len {
            // Too small: a fresh one rather than growing (which would copy the old bytes).
            *buf = alloc::vec![0; len];
        } else if buf.len() >= len {
            buf.truncate(len); // the bytes are overwritten by `fill`: no zeroing
        } else {
            buf.resize(len, 0);
        }
        fill(buf);
        self.next_seq += 1;
        self.unacked_bytes += packet_len;
        self.unacked.push_back(frame);
        Ok(())
    }

    /// Stops taking frames; once the peer acknowledged every frame, says goodbye and closes.
    pub fn close(&mut self, now: Instant) {
        self.now = now;
        if self.phase == Phase::Open {
            self.phase = Phase::Closing;
        }
    }

    /// This end's transport lost `peer` (it failed, or another peer's Bye named it): the Bye
    /// this session sends names it, unless an earlier loss was named already. The first loss
    /// is the likeliest cause of everything after it.
    pub fn tell_lost(&mut self, peer: NodeId) {
        if self.lost.is_none() && peer != self.peer {
            self.lost = Some(peer);
        }
    }

    /// The first peer the peer had lost when it closed, as its Bye named it (see
    /// [`Packet::Bye`]); `None` before a Bye, or when it named nobody.
    pub fn peer_lost(&self) -> Option<NodeId> {
        self.peer_lost
    }

    // ----- outputs -----

    /// The next packet to put on the link, as one buffer (a copy of the payload: a driver
    /// that can send a head and a shared payload uses [`Session::poll_transmit_parts`]).
    /// Drain until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.poll_transmit_parts().map(|o| o.to_vec())
    }

    /// The next packet to put on the link: its head and, for a data packet, the frame it
    /// carries, shared with the retransmission buffer (put the two on the medium one after
    /// the other, or as two parts of one message). Drain until `None` after every input.
    #[must_use]
    pub fn poll_transmit_parts(&mut self) -> Option<Outbound> {
        if let Some(p) = self.control.pop_front() {
            return Some(self.sent(Outbound::of(&p, None)));
        }
        if self.link != Link::Up {
            return None;
        }
        if self.sent_upto < self.next_seq && self.sent_upto < self.peer_window {
            let i = (self.sent_upto - self.acked) as usize;
            let frame = self.unacked.get(i).cloned()?;
            let seq = self.sent_upto;
            let (ack, window) = self.ack_fields();
            self.sent_upto += 1;
            self.stats.frames_sent += 1;
            let head = Packet::Data { seq, ack, window, payload: Vec::new() };
            return Some(self.sent(Outbound::of(&head, Some(frame))));
        }
        if self.phase == Phase::Closing && self.unacked.is_empty() {
            self.phase = Phase::Closed;
            self.events.push_back(SessionEvent::Closed);
            return Some(self.sent(Outbound::of(&Packet::Bye { lost: self.lost }, None)));
        }
        let window_grew = self.window() >= self.advertised + self.opts.recv_frames_max / 2;
        let owed = self.acks_owed >= self.ack_batch() || self.ack_bytes_owed >= self.ack_bytes();
        if window_grew || owed {
            let (ack, window) = self.ack_fields();
            return Some(self.sent(Outbound::of(&Packet::Ack { ack, window }, None)));
        }
        if self.acks_owed > 0 && self.ack_due.is_none() {
            self.ack_due = Some(self.now + self.opts.ack_delay);
        }
        None
    }

    /// The next frame from the peer, in the order it was sent. Taking frames gives the peer
    /// room to send more.
    #[must_use]
    pub fn poll_recv(&mut self) -> Option<Vec<u8>> {
        let f = self.received.pop_front()?;
        self.taken += 1;
        self.took_one();
        Some(f)
    }

    /// The next event. Drain until `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// When [`Session::handle_timeout`] is next due, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !matches!(self.phase, Phase::Open | Phase::Closing) {
            return None;
        }
        let mut t = self.last_heard + self.opts.peer_timeout;
        let mut at = |x: Instant| t = t.min(x);
        if let Some(c) = &self.candidate {
            at(c.since + self.opts.handshake_timeout);
        }
        match self.link {
            Link::Down { retry: Some(r) } => at(r),
            Link::Down { retry: None } => {}
            Link::Connecting { since } | Link::AwaitWelcome { since, .. } => {
                at(since + self.opts.handshake_timeout)
            }
            Link::Up => {
                at(self.last_sent + self.opts.heartbeat_interval);
                if let Some(d) = self.ack_due {
                    at(d);
                }
                if self.sent_upto > self.acked {
                    at(self.last_progress + self.opts.retransmit_timeout);
                }
            }
        }
        Some(t)
    }

    // ----- internals -----

    fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Closing)
    }

    fn greeting(&self, nonce: u64) -> Greeting {
        Greeting {
            from: self.id.me,
            to: self.peer,
            digest: self.id.digest,
            incarnation: self.id.incarnation,
            nonce,
            next: self.next_expected,
            window: self.window(),
        }
    }

    /// The window to tell the peer: frames below it fit in what is not yet taken. While the
    /// frames not taken fill `recv_bytes_max`, it grants nothing beyond what arrived.
    fn window(&self) -> u64 {
        if self.received_bytes >= self.opts.recv_bytes_max {
            return self.next_expected;
        }
        self.taken + 1 + self.opts.recv_frames_max
    }

    fn ack_batch(&self) -> u64 {
        (self.opts.recv_frames_max / 8).max(1)
    }

    /// Bytes received that call for an acknowledgement at once: an eighth of the window, so
    /// that a sender streaming large frames gets its buffers back long before its window
    /// closes, without waiting for `ack_delay`.
    fn ack_bytes(&self) -> usize {
        (self.opts.window_bytes_max / 8).max(1)
    }

    fn link_ready(&mut self) {
        self.link = Link::Up;
        self.backoff = self.opts.reconnect_min;
        self.last_progress = self.now;
        self.stats.links_up += 1;
        self.acks_owed = 0;
        self.ack_bytes_owed = 0;
        self.advertised = self.window();
        self.events.push_back(SessionEvent::Up);
    }

    /// Frames below `ack` reached the peer; the peer takes frames below `window`.
    fn on_ack(&mut self, ack: u64, window: u64) -> Result<(), Refusal> {
        if ack > self.next_seq {
            return Err(Refusal::Resume { next: ack, sent: self.next_seq });
        }
        if ack > self.acked {
            self.release(ack);
            self.last_progress = self.now;
        }
        self.peer_window = self.peer_window.max(window);
        Ok(())
    }

    /// Drops the frames below `ack` from the retransmission buffer.
    fn release(&mut self, ack: u64) {
        while self.acked < ack {
            let Some(mut f) = self.unacked.pop_front() else { break };
            self.unacked_bytes -= f.len() + DATA_OVERHEAD;
            self.acked += 1;
            // Kept for the next frames if nobody else holds it and the bounds allow.
            let cap = f.capacity();
            let room = self.pool_bytes + cap + self.unacked_bytes <= self.opts.window_bytes_max
                && self.pool.len() + self.unacked.len() < self.opts.window_frames_max;
            if room && Arc::get_mut(&mut f.0).is_some() {
                self.pool_bytes += cap;
                self.pool.push(f);
            }
        }
        self.sent_upto = self.sent_upto.max(self.acked);
        if self.blocked {
            self.blocked = false;
            self.events.push_back(SessionEvent::Writable);
        }
    }

    /// Whether the frame `seq`, in a packet of `len` bytes carrying `frame_len` bytes of
    /// frame, is the next one in order (and within the window, in frames and in bytes). Every
    /// data packet counts towards the next acknowledgement.
    fn on_data(&mut self, seq: u64, len: usize, frame_len: usize) -> bool {
        let mut taken = false;
        let over_bytes =
            self.received_bytes > 0 && self.received_bytes + frame_len > self.opts.recv_bytes_max;
        if seq < self.next_expected {
            self.stats.duplicates_dropped += 1;
        } else if seq > self.next_expected || seq >= self.window() || over_bytes {
            // A gap (a frame lost with a link) or beyond the window: the sender goes back.
            self.stats.out_of_order_dropped += 1;
        } else {
            self.received_lens.push_back(frame_len);
            self.received_bytes += frame_len;
            self.next_expected += 1;
            self.stats.frames_received += 1;
            taken = true;
        }
        self.acks_owed += 1;
        self.ack_bytes_owed = self.ack_bytes_owed.saturating_add(len);
        taken
    }

    /// The acknowledgement and window to send now, counted as told.
    fn ack_fields(&mut self) -> (u64, u64) {
        let (ack, window) = (self.next_expected, self.window());
        self.acks_owed = 0;
        self.ack_bytes_owed = 0;
        self.ack_due = None;
        self.advertised = window;
        (ack, window)
    }

    /// Queues an acknowledgement: a delayed one, or a heartbeat on an idle link.
    fn send_ack(&mut self) {
        self.stats.heartbeats_sent += 1;
        let (ack, window) = self.ack_fields();
        self.control.push_back(Packet::Ack { ack, window });
    }

    fn push_control(&mut self, p: Packet) {
        self.control.push_back(p);
    }

    /// Counts `p` as sent now.
    fn sent(&mut self, p: Outbound) -> Outbound {
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += p.len() as u64;
        self.last_sent = self.now;
        p
    }

    fn drop_link(&mut self) {
        if matches!(self.link, Link::Down { .. }) {
            return;
        }
        if self.link == Link::Up {
            self.stats.links_lost += 1;
        }
        self.control.clear();
        self.sent_upto = self.acked;
        let connects = self.id.me < self.peer;
        let retry = (connects && self.is_open()).then(|| self.now + self.backoff);
        self.backoff = crate::time::Duration((self.backoff.0 * 2).min(self.opts.reconnect_max.0));
        self.link = Link::Down { retry };
    }

    /// Counts a refusal of the peer's that leaves the session's link as it is.
    fn refuse(&mut self, r: Refusal) -> Refusal {
        self.stats.refused += 1;
        r
    }

    /// Counts a refused packet and drops the session's link.
    fn refuse_link(&mut self, r: Refusal) -> Refusal {
        self.stats.refused += 1;
        self.drop_link();
        r
    }

    fn fail(&mut self, cause: FailCause) {
        if matches!(self.phase, Phase::Failed(_) | Phase::Closed) {
            return;
        }
        self.phase = Phase::Failed(cause);
        self.link = Link::Down { retry: None };
        self.candidate = None;
        self.unacked.clear();
        self.unacked_bytes = 0;
        self.control.clear();
        self.events.push_back(SessionEvent::PeerFailed(cause));
    }
}

fn packet_name(p: &Packet) -> &'static str {
    match p {
        Packet::Hello(_) => "Hello",
        Packet::Welcome(..) => "Welcome",
        Packet::Proof(_) => "Proof",
        Packet::Data { .. } => "Data",
        Packet::Ack { .. } => "Ack",
        Packet::Bye { .. } => "Bye",
    }
}
