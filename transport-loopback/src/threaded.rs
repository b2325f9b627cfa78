//! `n` nodes in one process, each driven by its own thread: the embedded default for real runs.
//!
//! Every ordered pair (sender, receiver) has a bounded FIFO queue of frames, capped both in
//! frames ([`ThreadedOptions::pair_frames_max`]) and in bytes
//! ([`ThreadedOptions::pair_bytes_max`]). A full queue makes [`Transport::try_send`] return
//! [`SendError::WouldBlock`]; when the receiver takes a frame out of that queue, the sender's
//! waker is woken. A frame arriving wakes the receiver's waker. [`Transport::poll_recv`] takes
//! frames from all inbound queues round robin, one per sender in turn, so one busy sender cannot
//! starve the others; frames from one sender keep their order.
//!
//! [`Transport::close`] (or dropping the transport) is a graceful stop: frames the node sent
//! before are still delivered, then its peers see [`TransportEvent::PeerFailed`]. Frames queued
//! *to* it are dropped. [`ThreadedController::kill`] simulates a crash: frames queued from and to
//! the node are dropped and its peers see `PeerFailed` at once.
//!
//! ```
//! use parma_core::{ids::NodeId, transport::Transport};
//! use parma_transport_loopback::threaded::{cluster, ThreadedOptions};
//!
//! let mut nodes = cluster(2, ThreadedOptions::default());
//! nodes[0].try_send(NodeId(1), 3, &mut |buf| buf.copy_from_slice(b"abc")).unwrap();
//! let mut got = Vec::new();
//! nodes[1].poll_recv(16, &mut |from, frame| got.push((from, frame.to_vec()))).unwrap();
//! assert_eq!(got, vec![(NodeId(0), b"abc".to_vec())]);
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use parma_core::ids::NodeId;
use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};

use crate::BufPool;

/// Limits of a threaded cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadedOptions {
    /// Frames queued per ordered pair before sends to that peer would block. At least 1.
    pub pair_frames_max: usize,
    /// Bytes queued per ordered pair before sends to that peer would block. A frame into an empty
    /// queue is always accepted, so a frame larger than this cap still goes through alone.
    pub pair_bytes_max: usize,
    /// The largest frame accepted, in bytes.
    pub frame_len_max: usize,
}

impl Default for ThreadedOptions {
    fn default() -> Self {
        ThreadedOptions { pair_frames_max: 4096, pair_bytes_max: 64 << 20, frame_len_max: 64 << 20 }
    }
}

impl ThreadedOptions {
    /// Sets the frames queued per ordered pair before sends block (at least 1): [`ThreadedOptions::pair_frames_max`].
    #[must_use]
    pub fn with_pair_frames_max(mut self, pair_frames_max: usize) -> ThreadedOptions {
        self.pair_frames_max = pair_frames_max;
        self
    }

    /// Sets the bytes queued per ordered pair before sends block: [`ThreadedOptions::pair_bytes_max`].
    #[must_use]
    pub fn with_pair_bytes_max(mut self, pair_bytes_max: usize) -> ThreadedOptions {
        self.pair_bytes_max = pair_bytes_max;
        self
    }

    /// Sets the largest frame accepted, in bytes: [`ThreadedOptions::frame_len_max`].
    #[must_use]
    pub fn with_frame_len_max(mut self, frame_len_max: usize) -> ThreadedOptions {
        self.frame_len_max = frame_len_max;
        self
    }
}

/// Frames taken out of an inbox per lock acquisition, so that senders are not held up long.
const LOCK_BATCH_MAX: usize = 1024;

/// Life states of a node, in the order they can only advance.
const ALIVE: u8 = 0;
const CLOSED: u8 = 1;
const KILLED: u8 = 2;

/// Creates the `n` nodes of one in-process cluster, `NodeId(0..n)`, in order.
pub fn cluster(n: u16, opts: ThreadedOptions) -> Vec<ThreadedTransport> {
    assert!(opts.pair_frames_max >= 1, "pair_frames_max must be at least 1");
    let nodes = (0..n).map(|_| NodeShared::new(n)).collect();
    let shared = Arc::new(Shared { opts, nodes, failures: AtomicU64::new(0) });
    (0..n)
        .map(|i| ThreadedTransport {
            shared: Arc::clone(&shared),
            id: NodeId(i),
            pool: BufPool::default(),
            batch: Vec::new(),
            to_wake: Vec::new(),
            reported: vec![false; usize::from(n)],
            reported_count: 0,
        })
        .collect()
}

/// The state all nodes of one cluster share.
#[derive(Debug)]
struct Shared {
    opts: ThreadedOptions,
    nodes: Box<[NodeShared]>,
    /// Nodes that have left `ALIVE`; lets `poll_event` skip its scan when nothing changed.
    failures: AtomicU64,
}

/// One node as its peers see it: its life, its waker and its inbound queues.
#[derive(Debug)]
struct NodeShared {
    state: AtomicU8,
    /// Set when the receiver has been woken for arrivals since it last polled.
    notified: AtomicBool,
    waker: Mutex<Option<Waker>>,
    inbox: Mutex<Inbox>,
    /// Occupancy of the queue from each sender, readable by the sender without the inbox lock.
    from: Box<[PairCounters]>,
}

/// Occupancy of one pair's queue. Only the sender adds, only the receiver (or a failure)
/// subtracts, so a sender that saw room still has it when it pushes.
#[derive(Debug, Default)]
struct PairCounters {
    frames: AtomicUsize,
    bytes: AtomicUsize,
    /// The sender got `WouldBlock` and waits for a wake.
    sender_blocked: AtomicBool,
}

impl PairCounters {
    fn is_full(&self, len: usize, opts: &ThreadedOptions) -> bool {
        let frames = self.frames.load(SeqCst);
        frames >= opts.pair_frames_max
            || (frames > 0 && self.bytes.load(SeqCst).saturating_add(len) > opts.pair_bytes_max)
    }

    fn sub(&self, frames: usize, bytes: usize) {
        self.frames.fetch_sub(frames, SeqCst);
        self.bytes.fetch_sub(bytes, SeqCst);
    }
}

/// The inbound queues of one node, one per sender.
#[derive(Debug)]
struct Inbox {
    queues: Vec<VecDeque<Vec<u8>>>,
    /// Senders with a non-empty queue, in round-robin order.
    ready: VecDeque<u16>,
    /// Senders that were killed: their frames are dropped.
    purged: Vec<bool>,
    /// This node is closed or killed: all frames to it are dropped.
    closed: bool,
}

impl NodeShared {
    fn new(n: u16) -> NodeShared {
        let n = usize::from(n);
        NodeShared {
            state: AtomicU8::new(ALIVE),
            notified: AtomicBool::new(false),
            waker: Mutex::new(None),
            inbox: Mutex::new(Inbox {
                queues: (0..n).map(|_| VecDeque::new()).collect(),
                ready: VecDeque::with_capacity(n),
                purged: vec![false; n],
                closed: false,
            }),
            from: (0..n).map(|_| PairCounters::default()).collect(),
        }
    }

    fn wake(&self) {
        if let Some(waker) = lock(&self.waker).as_ref() {
            waker.wake_by_ref();
        }
    }

    /// Wakes the receiver for an arrival unless it was already woken since it last polled.
    fn notify(&self) {
        if !self.notified.swap(true, SeqCst) {
            self.wake();
        }
    }

    /// Drops every frame queued from `sender`; returns whether the sender was waiting for room.
    fn purge(&self, inbox: &mut Inbox, sender: u16) -> bool {
        let queue = &mut inbox.queues[usize::from(sender)];
        let bytes = queue.iter().map(Vec::len).sum();
        let pair = &self.from[usize::from(sender)];
        pair.sub(queue.len(), bytes);
        queue.clear();
        inbox.ready.retain(|&s| s != sender);
        pair.sender_blocked.swap(false, SeqCst)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn node(&self, id: NodeId) -> &NodeShared {
        &self.nodes[id.index()]
    }

    /// Moves `id` to `state` (`CLOSED` or `KILLED`) and tells everyone.
    fn fail(&self, id: NodeId, state: u8) {
        let node = self.node(id);
        let before = node.state.fetch_max(state, SeqCst);
        if before >= state {
            return;
        }
        if before == ALIVE {
            self.failures.fetch_add(1, SeqCst);
        }
        let senders = self.nodes.len() as u16;
        {
            let mut inbox = lock(&node.inbox);
            inbox.closed = true;
            for sender in 0..senders {
                node.purge(&mut inbox, sender);
            }
        }
        if state == KILLED {
            for other in self.nodes.iter() {
                let mut inbox = lock(&other.inbox);
                inbox.purged[id.index()] = true;
                other.purge(&mut inbox, id.0);
            }
        }
        // Receivers must look at their events, blocked senders must retry and see the failure.
        for (i, other) in self.nodes.iter().enumerate() {
            if i != id.index() {
                other.wake();
            }
        }
    }
}

/// A handle on a whole threaded cluster, for tests and supervisors: it can kill nodes.
#[derive(Clone, Debug)]
pub struct ThreadedController {
    shared: Arc<Shared>,
}

impl ThreadedController {
    /// Number of nodes in the cluster.
    pub fn nodes(&self) -> u16 {
        self.shared.nodes.len() as u16
    }

    /// Simulates `node` crashing: frames queued from and to it are dropped, its own transport
    /// returns `Closed`, and every other node gets `PeerFailed(node)` once. Panics if `node` is
    /// not in the cluster.
    pub fn kill(&self, node: NodeId) {
        assert!(node.index() < self.shared.nodes.len(), "kill: {node:?} is not in the cluster");
        self.shared.fail(node, KILLED);
    }

    /// True once `node` has closed or been killed.
    pub fn is_failed(&self, node: NodeId) -> bool {
        self.shared.node(node).state.load(SeqCst) != ALIVE
    }

    /// Frames queued from `from` to `to`, not yet received.
    pub fn queued(&self, from: NodeId, to: NodeId) -> usize {
        self.shared.node(to).from[from.index()].frames.load(SeqCst)
    }
}

/// One node's end of a threaded cluster. `Send`: move it onto the node's driver thread.
/// Dropping it closes it.
#[derive(Debug)]
pub struct ThreadedTransport {
    shared: Arc<Shared>,
    id: NodeId,
    pool: BufPool,
    /// Frames taken out of the inbox under the lock, handed to the sink after it.
    batch: Vec<(NodeId, Vec<u8>)>,
    /// Senders to wake after the inbox lock is released.
    to_wake: Vec<u16>,
    /// Peers whose failure this node has reported. Only ever alive peers of an alive node.
    reported: Vec<bool>,
    reported_count: u64,
}

impl ThreadedTransport {
    /// A controller for the whole cluster this node belongs to.
    pub fn controller(&self) -> ThreadedController {
        ThreadedController { shared: Arc::clone(&self.shared) }
    }

    fn me(&self) -> &NodeShared {
        self.shared.node(self.id)
    }

    /// Takes up to `limit` frames, round robin across senders, into `self.batch`. Returns whether
    /// frames remain.
    fn take_batch(&mut self, limit: usize) -> bool {
        let node = self.shared.node(self.id);
        let mut guard = lock(&node.inbox);
        let inbox = &mut *guard;
        while self.batch.len() < limit {
            let Some(sender) = inbox.ready.pop_front() else { break };
            let queue = &mut inbox.queues[usize::from(sender)];
            let frame = queue.pop_front().expect("a ready sender has a frame queued");
            if !queue.is_empty() {
                inbox.ready.push_back(sender);
            }
            let pair = &node.from[usize::from(sender)];
            pair.sub(1, frame.len());
            if pair.sender_blocked.load(SeqCst) && pair.sender_blocked.swap(false, SeqCst) {
                self.to_wake.push(sender);
            }
            self.batch.push((NodeId(sender), frame));
        }
        let more = !inbox.ready.is_empty();
        drop(guard);
        for sender in self.to_wake.drain(..) {
            self.shared.nodes[usize::from(sender)].wake();
        }
        more
    }

    /// Whether a failed `peer` can be reported to this node now; drops the frames of a killed one.
    fn failure_reportable(&self, peer: usize) -> bool {
        let node = self.me();
        let mut inbox = lock(&node.inbox);
        if self.shared.nodes[peer].state.load(SeqCst) == KILLED {
            inbox.purged[peer] = true;
            node.purge(&mut inbox, peer as u16);
            return true;
        }
        inbox.queues[peer].is_empty()
    }
}

impl Transport for ThreadedTransport {
    fn local_id(&self) -> NodeId {
        self.id
    }

    fn frame_len_max(&self) -> usize {
        self.shared.opts.frame_len_max
    }

    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let shared = &*self.shared;
        if shared.node(self.id).state.load(SeqCst) != ALIVE {
            return Err(SendError::Closed);
        }
        let Some(peer) = shared.nodes.get(to.index()) else { return Err(SendError::UnknownPeer) };
        if len > shared.opts.frame_len_max {
            return Err(SendError::TooLarge);
        }
        if peer.state.load(SeqCst) != ALIVE {
            return Err(SendError::PeerFailed);
        }
        let pair = &peer.from[self.id.index()];
        if pair.is_full(len, &shared.opts) {
            // Announce the wait, then look again: either we see the room the receiver made, or
            // the receiver sees the flag and wakes us.
            pair.sender_blocked.store(true, SeqCst);
            if pair.is_full(len, &shared.opts) {
                return Err(SendError::WouldBlock);
            }
        }
        pair.frames.fetch_add(1, SeqCst);
        pair.bytes.fetch_add(len, SeqCst);
        let mut frame = self.pool.take(len);
        fill(&mut frame);
        let rejected = {
            let mut inbox = lock(&peer.inbox);
            if inbox.closed || inbox.purged[self.id.index()] {
                Some(frame)
            } else {
                let queue = &mut inbox.queues[self.id.index()];
                let was_empty = queue.is_empty();
                queue.push_back(frame);
                if was_empty {
                    inbox.ready.push_back(self.id.0);
                }
                None
            }
        };
        match rejected {
            // The peer failed while we filled: the frame is lost, as a failure allows.
            Some(frame) => {
                pair.sub(1, len);
                self.pool.give(frame);
            }
            None => peer.notify(),
        }
        Ok(())
    }

    fn poll_recv(
        &mut self,
        max_frames: usize,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> Result<usize, RecvError> {
        let me = self.me();
        if me.state.load(SeqCst) != ALIVE {
            return Err(RecvError::Closed);
        }
        me.notified.store(false, SeqCst);
        let mut handed = 0;
        let mut more = false;
        while handed < max_frames {
            more = self.take_batch((max_frames - handed).min(LOCK_BATCH_MAX));
            if self.batch.is_empty() {
                break;
            }
            for (from, frame) in self.batch.drain(..) {
                sink(from, &frame);
                self.pool.give(frame);
                handed += 1;
            }
            if !more {
                break;
            }
        }
        if more {
            // Frames are left because of `max_frames`: make sure a sleeping driver comes back.
            self.me().notify();
        }
        Ok(handed)
    }

    fn poll_event(&mut self) -> Option<TransportEvent> {
        if self.shared.failures.load(SeqCst) == self.reported_count || self.me().state.load(SeqCst) != ALIVE {
            return None;
        }
        for peer in 0..self.reported.len() {
            if self.reported[peer] || self.shared.nodes[peer].state.load(SeqCst) == ALIVE {
                continue;
            }
            if self.failure_reportable(peer) {
                self.reported[peer] = true;
                self.reported_count += 1;
                return Some(TransportEvent::PeerFailed(NodeId(peer as u16)));
            }
        }
        None
    }

    fn register_waker(&mut self, waker: &Waker) {
        let mut slot = lock(&self.me().waker);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    fn close(&mut self) {
        self.shared.fail(self.id, CLOSED);
    }
}

impl Drop for ThreadedTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
#[path = "threaded_tests.rs"]
mod tests;
