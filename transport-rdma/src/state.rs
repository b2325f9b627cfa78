//! One node's transport state: its peers' queue pairs, rings and credits, behind the
//! transport's one lock. The driver's calls (`try_send`, `poll_recv`) and the progress
//! thread (`progress.rs`) both work on it; sending is in `state/send.rs`, receiving in
//! `state/recv.rs`.
//!
//! Per peer p, with R = `recv_slots`, S = `send_slots`, L = `slot_len` ([`Wire::Send`]):
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
//!
//! With [`Wire::Ring`], B = `ring_len`, M = `ring_msgs`:
//!
//! - This node keeps a registered ring of B bytes for p's frames (its own memory region, so
//!   p's key opens no other peer's ring), and a send ring of B bytes for its frames to p. A
//!   frame of at most B/2 bytes is encoded into the send ring and RDMA-WRITTEN with immediate
//!   data (its length, `LAST`, and whether it skipped the ring's end: `ring.rs`) to the same
//!   kind of place in p's ring; a longer one goes in B/4-byte chunks from the large buffer.
//! - M empty receives are posted for p (a WRITE with immediate consumes one for its
//!   completion) and each is posted again as its completion is taken.
//! - Credits: p may have at most M records and B bytes written and not yet freed; this node
//!   frees a record's bytes in ring order once the sink returned it (chunks once copied) and
//!   writes both counts into p's mailbox. A record that breaks them fails p.

mod recv;
mod send;

use std::collections::VecDeque;
use std::time::Instant;

use ibverbs_sys as ffi;
use parma_core::transport::{TransportCounters, TransportEvent};
use parma_core::NodeId;

use crate::ring::{RecvRing, SendRing};
use crate::verbs::{Device, Qp, Region};
use crate::{RdmaOptions, Wire};

/// Bytes of one mailbox: freed messages (u64), heartbeat (u64), goodbye (u64: 0 none, 1 a
/// goodbye, 2 + n a goodbye naming node n, the first peer its sender lost), freed ring bytes
/// (u64, [`Wire::Ring`]).
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
    Slot {
        slot: u32,
        len: u32,
    },
    Chunk {
        off: u32,
        len: u32,
        last: bool,
    },
    /// `frames` whole frames, each after its head, in the send ring from position `start`
    /// on: `len` bytes in all, one WRITE.
    Ring {
        start: u64,
        len: u32,
        frames: u32,
    },
}

/// A send work request posted and not yet known complete, in posting order.
#[derive(Clone, Copy, Debug)]
enum Sent {
    Slot(u32),
    Chunk,
    Write,
    /// A frame of the send ring, whose bytes end at this position.
    Ring(u64),
}

/// A message that arrived and was not yet taken apart: `len` bytes at `off` in the peer's
/// receive bytes; `id` is its slot ([`Wire::Send`]) or its record number ([`Wire::Ring`]).
#[derive(Clone, Copy, Debug)]
struct Msg {
    id: u64,
    off: usize,
    len: u32,
    last: bool,
}

/// A complete frame, in arrival order across peers.
#[derive(Clone, Copy, Debug)]
enum Ready {
    /// A frame in one message, where it landed.
    Slot {
        peer: usize,
        id: u64,
        off: usize,
        len: u32,
    },
    Asm {
        peer: usize,
    },
    Own,
    /// The peer said goodbye: after its frames before it, it counts as failed; first the
    /// peer its goodbye named as lost, if any.
    Gone {
        peer: usize,
        named: Option<usize>,
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
    /// The peer's receive ring for this node's frames: address and key ([`Wire::Ring`]).
    pub remote_ring: (u64, u32),
    pub link: Link,
    pub failure: Option<String>,
    // Sending.
    send_free: Vec<u32>,
    /// This node's send ring for the peer: `tail` moves as sends complete.
    tx: SendRing,
    /// This node's account of the peer's ring: `head` is where the next record goes.
    remote: SendRing,
    large: Option<Region>,
    large_chunks_left: u32,
    queue: VecDeque<Post>,
    pub sent_msgs: u64,
    log: SendLog,
    // Receiving.
    rx: RecvRing,
    backlog: VecDeque<Msg>,
    asm: Vec<u8>,
    asm_open: bool,
    asm_done: bool,
    pub freed: u64,
    pub freed_reported: u64,
    pub bytes_reported: u64,
    pub write_busy: bool,
    pub write_wanted: bool,
    pub beat: u64,
    pub seen_beat: u64,
    pub last_heard: Instant,
    /// A completion of the peer's came in since the progress thread last looked: it sets
    /// `last_heard` to its own clock reading then (a message costs no clock read of its own).
    pub heard: bool,
}

impl Peer {
    pub fn new(qp: Option<Qp>, o: &RdmaOptions, now: Instant) -> Peer {
        let slots = if o.wire == Wire::Send { o.send_slots as u32 } else { 0 };
        Peer {
            qp,
            remote_mailbox: (0, 0),
            remote_ring: (0, 0),
            link: Link::Up,
            failure: None,
            send_free: (0..slots).rev().collect(),
            tx: SendRing::new(o.ring_len),
            remote: SendRing::new(o.ring_len),
            large: None,
            large_chunks_left: 0,
            queue: VecDeque::new(),
            sent_msgs: 0,
            log: SendLog::default(),
            rx: RecvRing::new(o.ring_len, o.ring_msgs),
            backlog: VecDeque::new(),
            asm: Vec::new(),
            asm_open: false,
            asm_done: false,
            freed: 0,
            freed_reported: 0,
            bytes_reported: 0,
            write_busy: false,
            write_wanted: false,
            beat: 0,
            seen_beat: 0,
            last_heard: now,
            heard: false,
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
    Slot { peer: usize, id: u64, ptr: *const u8, len: usize },
    Asm { peer: usize, buf: Vec<u8> },
    Own(Vec<u8>),
}

// SAFETY: the pointers of `Lent::Slot` point into a receive region, which lives as long as
// the state (and the transport that lends them); the bytes are neither posted again
// ([`Wire::Send`]) nor freed to the peer ([`Wire::Ring`]) before the frame is returned, so
// nothing writes them while another thread reads them.
unsafe impl Send for Lent {}

pub(crate) struct State {
    pub me: usize,
    pub opts: RdmaOptions,
    pub peers: Vec<Peer>,
    /// [`Wire::Send`]: every peer's receive slots.
    pub recv: Region,
    /// Every peer's send slots ([`Wire::Send`]) or send ring ([`Wire::Ring`]).
    pub send: Region,
    /// [`Wire::Ring`]: each peer's receive ring, a region of its own (an empty one for this
    /// node).
    pub rings: Vec<Region>,
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
    /// The first peer this node lost (failed, or named by a peer's goodbye), which its own
    /// goodbye names: a node that stops because of it says so.
    pub first_lost: Option<usize>,
}

impl State {
    pub fn new(me: usize, opts: RdmaOptions, dev: Device, peers: Vec<Peer>) -> std::io::Result<State> {
        let n = peers.len();
        let (recv, send, mut rings) = match opts.wire {
            Wire::Send => (
                dev.region(n * opts.recv_slots * opts.slot_len)?,
                dev.region(n * opts.send_slots * opts.slot_len)?,
                Vec::new(),
            ),
            Wire::Ring => (dev.region(0)?, dev.region(n * opts.ring_len)?, Vec::with_capacity(n)),
        };
        if opts.wire == Wire::Ring {
            for p in 0..n {
                rings.push(dev.region(if p == me { 0 } else { opts.ring_len })?);
            }
        }
        Ok(State {
            me,
            recv,
            send,
            rings,
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
            first_lost: None,
        })
    }

    /// Where the peer's messages land: the slots region, or the peer's ring.
    fn recv_bytes(&self, peer: usize) -> &[u8] {
        match self.opts.wire {
            Wire::Send => self.recv.bytes(),
            Wire::Ring => self.rings[peer].bytes(),
        }
    }

    /// Ends `peer`, which failed (or a peer's goodbye named it): no frame from it is handed
    /// out any more, the event is queued once, and this node's goodbye will name it unless
    /// an earlier loss is.
    pub fn fail(&mut self, peer: usize, why: String) {
        if self.peers[peer].link == Link::Up {
            self.first_lost.get_or_insert(peer);
        }
        self.end(peer, why);
    }

    /// Ends `peer` (failed, or gone after its goodbye).
    fn end(&mut self, peer: usize, why: String) {
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
                Ready::Slot { peer, id, off, len } => {
                    if self.peers[peer].link != Link::Failed {
                        let ptr = self.recv_bytes(peer)[off..].as_ptr();
                        out.push(Lent::Slot { peer, id, ptr, len: len as usize });
                    }
                }
                Ready::Asm { peer } => {
                    if self.peers[peer].link != Link::Failed {
                        let buf = std::mem::take(&mut self.peers[peer].asm);
                        out.push(Lent::Asm { peer, buf });
                    }
                }
                Ready::Gone { peer, named } => {
                    // The peer it lost is reported first, so that what waits here names the
                    // node that failed rather than the one that left because of it.
                    if let Some(x) = named.filter(|&x| x < self.peers.len() && x != self.me && x != peer) {
                        if self.peers[x].link != Link::Failed {
                            self.fail(x, format!("named by node {peer}, which stopped after losing it"));
                        }
                    }
                    // Frames taken in this batch come first; the failure follows them.
                    self.end(peer, "it closed".into());
                }
            }
        }
    }

    /// The frames lent are back: free their slots or ring bytes, reuse the reassembly
    /// buffers.
    pub fn returned(&mut self, lent: &mut Vec<Lent>) {
        for l in lent.drain(..) {
            match l {
                Lent::Own(f) => self.count_received(f.len()),
                Lent::Slot { peer, id, len, .. } => {
                    self.count_received(len);
                    self.free_msg(peer, id);
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
