//! One node's transport state: its peers' queue pairs, rings and credits, behind the
//! transport's one lock. The driver's calls (`try_send`, `poll_recv`) and the progress
//! thread (`progress.rs`) both work on it.
//!
//! Per peer p, with R = `recv_slots`, S = `send_slots`, L = `slot_len`:
//!
//! - R receives of L bytes are posted for p at start. Every message p sends lands in one of
//!   them: a frame of at most L bytes is one SEND with immediate data `LAST`; a longer one is
//!   a run of L-byte chunks from the sender's registered large buffer, the last flagged `LAST`.
//! - Credits: p may have at most R messages sent and not yet freed. This node counts the
//!   receives it posted again (`freed`) and RDMA-WRITEs that count into p's mailbox for it;
//!   p reads its mailbox before posting. A credit return costs p no receive, so credits
//!   never wait for credits, and a receive is posted before its credit is granted: the
//!   receiver never runs out of posted receives.
//! - A frame in one slot is lent to the sink from the slot itself and the slot posted again
//!   after; chunks are copied into one reassembly buffer per peer as they arrive (bounded by
//!   `frame_len_max`) and their slots posted again at once, so a frame of any allowed length
//!   passes through R slots.
//! - The same mailbox WRITE carries a heartbeat counter and, on close, a goodbye.

use std::collections::VecDeque;
use std::time::Instant;

use ibverbs_sys as ffi;
use parma_core::transport::{SendError, TransportCounters, TransportEvent};
use parma_core::NodeId;

use crate::verbs::{Device, Qp, Region, SendOp, SendReq, POST_BATCH};
use crate::RdmaOptions;

/// Immediate data of the last (or only) message of a frame; no other bit may be set.
pub(crate) const IMM_LAST: u32 = 1 << 31;
/// Bytes of one mailbox: freed (u64), heartbeat (u64), goodbye (u64), padding.
pub(crate) const MAILBOX_LEN: usize = 32;

pub(crate) const KIND_RECV: u64 = 1;
pub(crate) const KIND_SEND: u64 = 2;
pub(crate) const KIND_CHUNK: u64 = 3;
pub(crate) const KIND_WRITE: u64 = 4;

pub(crate) fn wr_id(peer: usize, kind: u64, index: u32) -> u64 {
    ((peer as u64) << 40) | (kind << 32) | u64::from(index)
}

pub(crate) fn split_wr_id(id: u64) -> (usize, u64, u32) {
    ((id >> 40) as usize, (id >> 32) & 0xff, id as u32)
}

/// A send waiting for a credit.
#[derive(Clone, Copy, Debug)]
enum Post {
    Slot { slot: u32, len: u32 },
    Chunk { off: u32, len: u32, last: bool },
}

/// A send work request posted and not yet known complete, in posting order.
#[derive(Clone, Copy, Debug)]
enum Sent {
    Slot(u32),
    Chunk,
    Write,
}

/// A message that arrived and was not yet taken apart.
#[derive(Clone, Copy, Debug)]
struct Msg {
    slot: u32,
    len: u32,
    last: bool,
}

/// A complete frame, in arrival order across peers.
#[derive(Clone, Copy, Debug)]
enum Ready {
    Slot {
        peer: usize,
        slot: u32,
        len: u32,
    },
    Asm {
        peer: usize,
    },
    Own,
    /// The peer said goodbye: after its frames before it, it counts as failed.
    Gone {
        peer: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    Up,
    /// Said goodbye; its frames before the goodbye are still handed out.
    Leaving,
    Failed,
}

pub(crate) struct Peer {
    pub qp: Option<Qp>,
    pub remote_mailbox: (u64, u32),
    pub link: Link,
    pub failure: Option<String>,
    // Sending.
    send_free: Vec<u32>,
    large: Option<Region>,
    large_chunks_left: u32,
    queue: VecDeque<Post>,
    pub sent_msgs: u64,
    log: SendLog,
    // Receiving.
    backlog: VecDeque<Msg>,
    asm: Vec<u8>,
    asm_open: bool,
    asm_done: bool,
    pub freed: u64,
    pub freed_reported: u64,
    pub write_busy: bool,
    pub write_wanted: bool,
    pub beat: u64,
    pub seen_beat: u64,
    pub last_heard: Instant,
}

impl Peer {
    pub fn new(qp: Option<Qp>, send_slots: usize, now: Instant) -> Peer {
        Peer {
            qp,
            remote_mailbox: (0, 0),
            link: Link::Up,
            failure: None,
            send_free: (0..send_slots as u32).rev().collect(),
            large: None,
            large_chunks_left: 0,
            queue: VecDeque::new(),
            sent_msgs: 0,
            log: SendLog::default(),
            backlog: VecDeque::new(),
            asm: Vec::new(),
            asm_open: false,
            asm_done: false,
            freed: 0,
            freed_reported: 0,
            write_busy: false,
            write_wanted: false,
            beat: 0,
            seen_beat: 0,
            last_heard: now,
        }
    }

    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// A peer's posted send work requests not yet known complete, oldest first, each with the
/// sequence number its work-request id carries (in the index field).
#[derive(Default)]
struct SendLog {
    inflight: VecDeque<(u32, Sent)>,
    next_seq: u32,
    /// Unsignalled work requests posted since the last signalled one.
    unsignalled: u32,
}

impl SendLog {
    /// Records a send work request about to be posted; returns its sequence number.
    fn record(&mut self, what: Sent, signalled: bool) -> u32 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        self.inflight.push_back((seq, what));
        self.unsignalled = if signalled { 0 } else { self.unsignalled + 1 };
        seq
    }
}

/// Frames lent to the sink outside the lock: where their bytes are.
pub(crate) enum Lent {
    Slot { peer: usize, slot: u32, ptr: *const u8, len: usize },
    Asm { peer: usize, buf: Vec<u8> },
    Own(Vec<u8>),
}

// The pointers of `Lent::Slot` point into the receive region, which lives as long as the
// state; a lent slot is not posted again before it is returned.
unsafe impl Send for Lent {}

pub(crate) struct State {
    pub me: usize,
    pub opts: RdmaOptions,
    pub peers: Vec<Peer>,
    pub recv: Region,
    pub send: Region,
    /// Written by the peers: their freed counts, heartbeats and goodbyes for this node.
    pub mailbox: Region,
    /// The source of this node's mailbox writes, one per peer.
    pub outbox: Region,
    /// Declared after every queue pair and region: dropped last.
    pub dev: Device,
    ready: VecDeque<Ready>,
    own: VecDeque<Vec<u8>>,
    pub events: VecDeque<TransportEvent>,
    pub waker: Option<std::task::Waker>,
    pub wake: bool,
    pub blocked: bool,
    pub closed: bool,
    pub killed: bool,
    pub stats: TransportCounters,
    pub wcs: Vec<ffi::ibv_wc>,
    /// When the next heartbeat is due (whichever thread holds the lock then sends it).
    pub next_beat: Instant,
}

impl State {
    pub fn new(me: usize, opts: RdmaOptions, dev: Device, peers: Vec<Peer>) -> std::io::Result<State> {
        let n = peers.len();
        let ring = |k: usize| dev.region(n * k * opts.slot_len);
        Ok(State {
            me,
            recv: ring(opts.recv_slots)?,
            send: ring(opts.send_slots)?,
            mailbox: dev.region(n * MAILBOX_LEN)?,
            outbox: dev.region(n * MAILBOX_LEN)?,
            opts,
            peers,
            dev,
            ready: VecDeque::new(),
            own: VecDeque::new(),
            events: VecDeque::new(),
            waker: None,
            wake: false,
            blocked: false,
            closed: false,
            killed: false,
            stats: TransportCounters::default(),
            wcs: vec![ffi::ibv_wc::default(); 64],
            next_beat: Instant::now(),
        })
    }

    fn recv_off(&self, peer: usize, slot: u32) -> usize {
        (peer * self.opts.recv_slots + slot as usize) * self.opts.slot_len
    }

    fn send_off(&self, peer: usize, slot: u32) -> usize {
        (peer * self.opts.send_slots + slot as usize) * self.opts.slot_len
    }

    /// Posts receive `slot` of `peer` (again).
    pub fn post_recv(&mut self, peer: usize, slot: u32) -> Result<(), String> {
        let off = self.recv_off(peer, slot);
        let Some(qp) = &self.peers[peer].qp else { return Ok(()) };
        qp.post_recv(&self.recv, off, self.opts.slot_len, wr_id(peer, KIND_RECV, slot))
            .map_err(|e| e.to_string())
    }

    /// A receive slot consumed: post it again and count it for the peer's credits.
    fn repost(&mut self, peer: usize, slot: u32) {
        if self.peers[peer].link == Link::Failed {
            return;
        }
        match self.post_recv(peer, slot) {
            Ok(()) => {
                let p = &mut self.peers[peer];
                p.freed += 1;
                if p.freed - p.freed_reported >= (self.opts.recv_slots as u64 / 4).max(1) {
                    p.write_wanted = true;
                }
            }
            Err(e) => self.fail(peer, format!("posting a receive failed: {e}")),
        }
    }

    /// Ends `peer`: no frame from it is handed out any more, the event is queued once.
    pub fn fail(&mut self, peer: usize, why: String) {
        let p = &mut self.peers[peer];
        if p.link == Link::Failed {
            return;
        }
        p.link = Link::Failed;
        p.failure = Some(why);
        p.queue.clear();
        p.backlog.clear();
        p.asm = Vec::new();
        if let Some(qp) = &p.qp {
            qp.fail();
        }
        self.stats.peers_failed += 1;
        self.events.push_back(TransportEvent::PeerFailed(NodeId(peer as u16)));
        self.wake = true;
    }

    // ---- sending ----

    pub fn try_send(
        &mut self,
        to: NodeId,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), SendError> {
        if self.closed || self.killed {
            return Err(SendError::Closed);
        }
        let to = usize::from(to.0);
        if to >= self.peers.len() {
            return Err(SendError::UnknownPeer);
        }
        if len > self.opts.frame_len_max {
            return Err(SendError::TooLarge);
        }
        let mut r = self.send_once(to, len, fill);
        if r == Err(SendError::WouldBlock) && to != self.me && self.peers[to].link == Link::Up {
            // The sender drives itself rather than wait for the progress thread: take
            // completions (they free slots), post what returned credits allow, try again.
            // Only then is it blocked: a completion after this point wakes it.
            crate::progress::poll_cq(self);
            self.pump(to);
            if self.peers[to].link == Link::Up {
                r = self.send_once(to, len, fill);
            }
        }
        match r {
            Ok(()) => {
                self.stats.frames_sent += 1;
                self.stats.bytes_sent += len as u64;
                if to != self.me {
                    self.pump(to);
                }
            }
            Err(SendError::WouldBlock) => {
                self.stats.sends_blocked += 1;
                self.blocked = true;
            }
            Err(_) => {}
        }
        r
    }

    fn send_once(&mut self, to: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        if to == self.me {
            self.send_own(len, fill)
        } else if self.peers[to].link != Link::Up {
            Err(SendError::PeerFailed)
        } else if len <= self.opts.slot_len {
            self.send_slot(to, len, fill)
        } else {
            self.send_large(to, len, fill)
        }
    }

    fn send_own(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        if self.own.len() >= self.opts.self_frames_max {
            return Err(SendError::WouldBlock);
        }
        let mut f = vec![0u8; len];
        fill(&mut f);
        self.own.push_back(f);
        self.ready.push_back(Ready::Own);
        self.wake = true;
        Ok(())
    }

    fn send_slot(&mut self, to: usize, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let Some(slot) = self.peers[to].send_free.pop() else { return Err(SendError::WouldBlock) };
        let off = self.send_off(to, slot);
        fill(&mut self.send.bytes_mut()[off..off + len]);
        self.peers[to].queue.push_back(Post::Slot { slot, len: len as u32 });
        Ok(())
    }

    fn send_large(
        &mut self,
        to: usize,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), SendError> {
        let p = &mut self.peers[to];
        if p.large_chunks_left > 0 {
            return Err(SendError::WouldBlock);
        }
        if p.large.as_ref().is_none_or(|r| r.bytes().len() < len) {
            // Grown in powers of two up to `frame_len_max`, registered once per size.
            let want = len.next_power_of_two().min(self.opts.frame_len_max).max(len);
            p.large = None;
            match self.dev.region(want) {
                Ok(r) => p.large = Some(r),
                Err(_) => return Err(SendError::WouldBlock),
            }
        }
        let Some(large) = p.large.as_mut() else { return Err(SendError::WouldBlock) };
        fill(&mut large.bytes_mut()[..len]);
        let l = self.opts.slot_len;
        let chunks = len.div_ceil(l);
        for c in 0..chunks {
            let off = c * l;
            let n = l.min(len - off);
            p.queue.push_back(Post::Chunk { off: off as u32, len: n as u32, last: c + 1 == chunks });
        }
        p.large_chunks_left = chunks as u32;
        Ok(())
    }

    /// Credits the peer granted and this node has not used.
    fn credits(&self, peer: usize) -> Result<u64, String> {
        let freed = self.mailbox.read_u64(peer * MAILBOX_LEN);
        let p = &self.peers[peer];
        if freed > p.sent_msgs {
            return Err(format!("it freed {freed} receives of {} messages sent", p.sent_msgs));
        }
        Ok((self.opts.recv_slots as u64).saturating_sub(p.sent_msgs - freed))
    }

    /// One send work request in this many is signalled (and any that must be, see
    /// [`State::pump`]); a signalled completion frees every send before it.
    fn signal_every(&self) -> u32 {
        (self.opts.send_slots as u32 / 4).clamp(1, 16)
    }

    /// Posts the peer's queued sends as far as credits and the send queue allow, as linked
    /// lists of up to [`POST_BATCH`] work requests (one doorbell each).
    ///
    /// Only some are signalled: one in [`State::signal_every`], the last chunk of a long
    /// frame, the one that fills the send queue, and a slot's send while fewer than
    /// `signal_every` send slots are free (so always when none is). So whenever `try_send`
    /// answers `WouldBlock` a signalled send is posted (or queued) after every unsignalled
    /// one, and its completion frees them all. A failed work request completes whether signalled or
    /// not, and fails the peer as before.
    pub fn pump(&mut self, peer: usize) {
        let mut credits = match self.credits(peer) {
            Ok(c) => c,
            Err(e) => return self.fail(peer, format!("bad credit return: {e}")),
        };
        let sq_max = self.opts.send_wr_max() as usize - 1; // one kept for the mailbox write
        let every = self.signal_every();
        let (slot_len, send_slots) = (self.opts.slot_len, self.opts.send_slots);
        loop {
            let p = &mut self.peers[peer];
            let Some(qp) = &p.qp else { return };
            let mut reqs = Vec::new();
            let mut bytes = 0u64;
            while credits > 0
                && reqs.len() < POST_BATCH
                && p.link == Link::Up
                && p.log.inflight.len() < sq_max
            {
                let Some(&post) = p.queue.front() else { break };
                let must = p.log.unsignalled + 1 >= every || p.log.inflight.len() + 1 >= sq_max;
                let (region, off, len, imm, what, signalled) = match post {
                    Post::Slot { slot, len } => {
                        let off = (peer * send_slots + slot as usize) * slot_len;
                        // Few slots left: each send is signalled, so that slots come back
                        // as soon as they can (with none left, the one that must).
                        let scarce = p.send_free.len() < every as usize;
                        (&self.send, off, len, IMM_LAST, Sent::Slot(slot), must || scarce)
                    }
                    Post::Chunk { off, len, last } => {
                        let Some(large) = &p.large else { break }; // queued with the buffer
                        let imm = if last { IMM_LAST } else { 0 };
                        (large, off as usize, len, imm, Sent::Chunk, must || last)
                    }
                };
                p.queue.pop_front();
                let kind = if matches!(what, Sent::Slot(_)) { KIND_SEND } else { KIND_CHUNK };
                let seq = p.log.record(what, signalled);
                let op = SendOp::SendImm(imm);
                let wr_id = wr_id(peer, kind, seq);
                reqs.push(SendReq { region, off, len: len as usize, op, wr_id, signalled });
                p.sent_msgs += 1;
                credits -= 1;
                bytes += u64::from(len);
            }
            let n = reqs.len();
            if n == 0 {
                return;
            }
            if let Err(e) = qp.post_sends(&reqs) {
                return self.fail(peer, format!("posting a send failed: {e}"));
            }
            self.stats.packets_sent += n as u64;
            self.stats.wire_bytes_sent += bytes;
            if n < POST_BATCH {
                return;
            }
        }
    }

    /// The signalled send work request `seq` of `peer` completed (or was flushed): it and
    /// every send before it are done. Frees their slots, the long frame's buffer, the
    /// mailbox write.
    pub fn send_done(&mut self, peer: usize, seq: u32) {
        let p = &mut self.peers[peer];
        let Some(&(first, _)) = p.log.inflight.front() else { return };
        let count = (seq.wrapping_sub(first) as usize + 1).min(p.log.inflight.len());
        let mut frees = false;
        for (_, what) in p.log.inflight.drain(..count) {
            match what {
                Sent::Slot(slot) => {
                    p.send_free.push(slot);
                    frees = true;
                }
                Sent::Chunk => {
                    p.large_chunks_left = p.large_chunks_left.saturating_sub(1);
                    frees = true;
                }
                Sent::Write => p.write_busy = false,
            }
        }
        if self.blocked && frees {
            self.blocked = false;
            self.wake = true;
        }
    }

    /// Writes this node's freed count, heartbeat and goodbye into the peer's mailbox, unless
    /// a write is already in flight (then it goes when that one completes). Always
    /// signalled: its completion ends `write_busy`.
    pub fn write_mailbox(&mut self, peer: usize, goodbye: bool) {
        let p = &mut self.peers[peer];
        if p.write_busy || p.link == Link::Failed {
            p.write_wanted |= p.write_busy;
            return;
        }
        let Some(qp) = &p.qp else { return };
        let off = peer * MAILBOX_LEN;
        let b = &mut self.outbox.bytes_mut()[off..off + 24];
        b[..8].copy_from_slice(&p.freed.to_le_bytes());
        b[8..16].copy_from_slice(&p.beat.to_le_bytes());
        b[16..24].copy_from_slice(&u64::from(goodbye).to_le_bytes());
        let (remote_addr, rkey) = p.remote_mailbox;
        let seq = p.log.next_seq;
        let req = SendReq {
            region: &self.outbox,
            off,
            len: 24,
            op: SendOp::Write { remote_addr, rkey },
            wr_id: wr_id(peer, KIND_WRITE, seq),
            signalled: true,
        };
        match qp.post_sends(&[req]) {
            Ok(()) => {
                p.log.record(Sent::Write, true);
                p.write_busy = true;
                p.write_wanted = false;
                p.freed_reported = p.freed;
                self.stats.packets_sent += 1;
                self.stats.wire_bytes_sent += 24;
            }
            Err(e) => self.fail(peer, format!("posting a mailbox write failed: {e}")),
        }
    }

    // ---- receiving ----

    /// A receive of `peer` completed into `slot` with `len` bytes and immediate data `imm`.
    pub fn arrived(&mut self, peer: usize, slot: u32, len: usize, imm: Option<u32>) {
        let p = &mut self.peers[peer];
        if p.link == Link::Failed {
            return;
        }
        p.last_heard = Instant::now();
        let last = match imm {
            Some(IMM_LAST) => true,
            Some(0) => false,
            other => return self.fail(peer, format!("a message with immediate data {other:?}")),
        };
        p.backlog.push_back(Msg { slot, len: len as u32, last });
        self.advance(peer);
    }

    /// Takes the peer's arrived messages apart, in order, as far as its reassembly buffer
    /// allows.
    fn advance(&mut self, peer: usize) {
        while let Some(&m) = self.peers[peer].backlog.front() {
            let p = &self.peers[peer];
            if m.last && !p.asm_open {
                self.ready.push_back(Ready::Slot { peer, slot: m.slot, len: m.len });
                self.peers[peer].backlog.pop_front();
                self.wake = true;
                continue;
            }
            if p.asm_done {
                break; // the previous long frame is not taken yet
            }
            if p.asm.len() + m.len as usize > self.opts.frame_len_max {
                return self.fail(peer, "a frame longer than frame_len_max".into());
            }
            let off = self.recv_off(peer, m.slot);
            let p = &mut self.peers[peer];
            p.asm.extend_from_slice(&self.recv.bytes()[off..off + m.len as usize]);
            p.asm_open = !m.last;
            p.backlog.pop_front();
            if m.last {
                p.asm_done = true;
                self.ready.push_back(Ready::Asm { peer });
                self.wake = true;
            }
            self.repost(peer, m.slot);
        }
    }

    /// The peer said goodbye: its frames so far are handed out, then it counts as failed.
    pub fn leaving(&mut self, peer: usize) {
        if self.peers[peer].link == Link::Up {
            self.peers[peer].link = Link::Leaving;
            self.ready.push_back(Ready::Gone { peer });
            self.wake = true;
        }
    }

    /// Takes up to `max` complete frames out, to be lent outside the lock.
    pub fn take(&mut self, max: usize, out: &mut Vec<Lent>) {
        while out.len() < max {
            let Some(r) = self.ready.pop_front() else { break };
            match r {
                Ready::Own => {
                    if let Some(f) = self.own.pop_front() {
                        out.push(Lent::Own(f));
                    }
                }
                Ready::Slot { peer, slot, len } => {
                    if self.peers[peer].link != Link::Failed {
                        let ptr = self.recv.bytes()[self.recv_off(peer, slot)..].as_ptr();
                        out.push(Lent::Slot { peer, slot, ptr, len: len as usize });
                    }
                }
                Ready::Asm { peer } => {
                    if self.peers[peer].link != Link::Failed {
                        let buf = std::mem::take(&mut self.peers[peer].asm);
                        out.push(Lent::Asm { peer, buf });
                    }
                }
                Ready::Gone { peer } => {
                    // Frames taken in this batch come first; the failure follows them.
                    self.fail(peer, "it closed".into());
                }
            }
        }
    }

    /// The frames lent are back: post their slots again, reuse the reassembly buffers.
    pub fn returned(&mut self, lent: &mut Vec<Lent>) {
        for l in lent.drain(..) {
            match l {
                Lent::Own(f) => self.count_received(f.len()),
                Lent::Slot { peer, slot, len, .. } => {
                    self.count_received(len);
                    self.repost(peer, slot);
                }
                Lent::Asm { peer, mut buf } => {
                    self.count_received(buf.len());
                    let p = &mut self.peers[peer];
                    if p.link != Link::Failed {
                        buf.clear();
                        p.asm = buf;
                        p.asm_done = false;
                        self.advance(peer);
                    }
                }
            }
            self.stats.frames_received += 1;
        }
    }

    fn count_received(&mut self, len: usize) {
        self.stats.bytes_received += len as u64;
    }

    /// Whether a heartbeat is due now; if so, the next one is scheduled.
    pub fn beat_due(&mut self, now: Instant) -> bool {
        if now < self.next_beat {
            return false;
        }
        self.next_beat = now + self.opts.heartbeat_interval;
        true
    }

    /// Sends the heartbeats if they are due: called by the progress thread and by the
    /// driver's calls, so that a starved progress thread does not silence the node.
    pub fn heartbeat(&mut self, now: Instant) {
        if self.closed || !self.beat_due(now) {
            return;
        }
        for p in 0..self.peers.len() {
            if p != self.me && self.peers[p].link == Link::Up {
                self.peers[p].beat += 1;
                self.write_mailbox(p, false);
            }
        }
    }

    /// Whether every accepted frame went out (or can no longer go).
    pub fn drained(&self) -> bool {
        self.peers.iter().all(|p| p.link != Link::Up || !p.has_queued())
    }
}
