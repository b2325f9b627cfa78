//! A deterministic simulated network on virtual time, with faults derived from a seed.
//!
//! One [`SimNet`] holds the whole network; a simulator drives it from one thread. Each node talks
//! through a [`SimTransport`] from [`SimNet::endpoint`]. Nothing here reads a clock or the OS's
//! randomness: the network's time moves only through [`SimNet::advance_to`], and every random
//! choice comes from the seed. The same seed, faults and sequence of calls give the same
//! deliveries at the same virtual times, which [`SimNet::trace_hash`] summarizes.
//!
//! # The model
//!
//! - A frame sent at virtual time `now` on pair (from, to) gets the delivery time
//!   `max(now + pair delay + jitter, delivery time of the previous frame on that pair)`. The pair
//!   delay is drawn once per pair from `[delay_min_us, delay_max_us]`, the jitter per frame from
//!   `[0, jitter_us]`. So each pair is reliable and FIFO, and different pairs reorder freely.
//! - A node can be paused: while it is, frames to it are held and delivered when the pause ends.
//!   Pauses come from the seed (see [`Faults`]) or from [`SimNet::pause`].
//! - [`Transport::poll_recv`] hands over frames whose delivery time has come, earliest first
//!   (ties broken by send order).
//! - Each pair holds at most [`Faults::pair_frames_max`] frames not yet received; beyond that a
//!   send returns [`SendError::WouldBlock`] and the sender's waker is woken when the receiver
//!   takes one of them.
//! - [`SimNet::kill`] crashes a node: frames from and to it are dropped and the others see
//!   [`TransportEvent::PeerFailed`] at once. [`Transport::close`] stops a node gracefully: frames
//!   it sent are still delivered, and each peer sees `PeerFailed` after it received them.
//! - [`SimNet::heal`] removes delays, jitter and pauses: every frame in flight is due at once.
//!
//! # Driving it
//!
//! ```
//! use parma_core::{ids::NodeId, transport::Transport};
//! use parma_transport_loopback::sim::{Faults, SimNet};
//!
//! let seed = 7;
//! let net = SimNet::new(2, Faults::from_seed(seed), seed);
//! let mut nodes = net.endpoints();
//! nodes[0].try_send(NodeId(1), 5, &mut |buf| buf.copy_from_slice(b"hello")).unwrap();
//! let mut got = Vec::new();
//! while let Some(t) = net.next_delivery_time() {
//!     net.advance_to(t);
//!     for node in &mut nodes {
//!         let me = node.local_id();
//!         node.poll_recv(64, &mut |from, frame| got.push((from, me, frame.to_vec()))).unwrap();
//!     }
//! }
//! assert_eq!(got, vec![(NodeId(0), NodeId(1), b"hello".to_vec())]);
//! ```

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::rc::Rc;
use std::task::Waker;

use parma_core::ids::NodeId;
use parma_core::time::{Duration, Instant};
use parma_core::transport::{RecvError, SendError, Transport, TransportEvent};

use crate::BufPool;

mod faults;
mod pauses;
mod rng;

pub use faults::Faults;
use pauses::Pauses;
pub(crate) use rng::SplitMix64;

/// Stream tags, so that the random streams derived from one seed are independent.
const TAG_PAIR: u64 = 1;
const TAG_PAUSE: u64 = 2;

/// A simulated network of `n` nodes. Cloning gives another handle on the same network.
#[derive(Clone, Debug)]
pub struct SimNet {
    state: Rc<RefCell<State>>,
}

/// One node's end of a [`SimNet`]. Not `Send`: the whole simulation runs on one thread.
#[derive(Debug)]
pub struct SimTransport {
    state: Rc<RefCell<State>>,
    id: NodeId,
    /// Frames taken out of the network, handed to the sink after the state is released.
    batch: Vec<(NodeId, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Life {
    Alive,
    Closed,
    Killed,
}

#[derive(Debug)]
struct State {
    faults: Faults,
    now: Instant,
    next_seq: u64,
    /// Indexed `from * n + to`.
    pairs: Box<[Pair]>,
    nodes: Box<[SimNode]>,
    in_flight: usize,
    /// Nodes that have left `Alive`.
    failures: u64,
    trace_hash: u64,
    delivered: u64,
    pool: BufPool,
}

#[derive(Debug)]
struct Pair {
    delay_us: u64,
    rng: SplitMix64,
    /// Delivery time of the last frame sent on this pair: the next one is not earlier.
    last_at: Instant,
    /// Frames sent and not yet received.
    queued: usize,
    sender_blocked: bool,
}

#[derive(Debug)]
struct SimNode {
    life: Life,
    inbox: BinaryHeap<Reverse<InFlight>>,
    waker: Option<Waker>,
    pauses: Pauses,
    /// Peers whose failure this node has reported.
    reported: Box<[bool]>,
    reported_count: u64,
}

/// A frame on its way; ordered by delivery time, then send order.
#[derive(Debug)]
struct InFlight {
    at: Instant,
    seq: u64,
    from: u16,
    frame: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

fn wake_all(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

impl SimNet {
    /// A network of `n` nodes, `NodeId(0..n)`, at virtual time zero. Pair delays and pause
    /// schedules are drawn from `seed`. Panics if `faults` is inconsistent.
    pub fn new(n: u16, faults: Faults, seed: u64) -> SimNet {
        faults.check();
        let pairs = (0..n)
            .flat_map(|from| (0..n).map(move |to| (from, to)))
            .map(|(from, to)| {
                let mut rng = SplitMix64::derive(seed, &[TAG_PAIR, u64::from(from), u64::from(to)]);
                let spread = faults.delay_max_us - faults.delay_min_us;
                let delay_us = faults.delay_min_us + rng.below(spread.saturating_add(1));
                Pair { delay_us, rng, last_at: Instant(0), queued: 0, sender_blocked: false }
            })
            .collect();
        let nodes = (0..n)
            .map(|i| SimNode {
                life: Life::Alive,
                inbox: BinaryHeap::new(),
                waker: None,
                pauses: Pauses::new(SplitMix64::derive(seed, &[TAG_PAUSE, u64::from(i)]), &faults),
                reported: vec![false; usize::from(n)].into(),
                reported_count: 0,
            })
            .collect();
        let state = State {
            faults,
            now: Instant(0),
            next_seq: 0,
            pairs,
            nodes,
            in_flight: 0,
            failures: 0,
            trace_hash: FNV_OFFSET,
            delivered: 0,
            pool: BufPool::default(),
        };
        SimNet { state: Rc::new(RefCell::new(state)) }
    }

    /// The transport of `node`. Panics if `node` is not in the network. Two endpoints of the same
    /// node share its inbox, events and waker.
    pub fn endpoint(&self, node: NodeId) -> SimTransport {
        assert!(node.index() < self.state.borrow().nodes.len(), "endpoint: {node:?} is not in the network");
        SimTransport { state: Rc::clone(&self.state), id: node, batch: Vec::new() }
    }

    /// The transports of all nodes, in id order.
    pub fn endpoints(&self) -> Vec<SimTransport> {
        (0..self.nodes()).map(|i| self.endpoint(NodeId(i))).collect()
    }

    /// Number of nodes.
    pub fn nodes(&self) -> u16 {
        self.state.borrow().nodes.len() as u16
    }

    /// The faults in force (after [`SimNet::heal`], the healed ones).
    pub fn faults(&self) -> Faults {
        self.state.borrow().faults
    }

    /// The network's virtual time.
    pub fn now(&self) -> Instant {
        self.state.borrow().now
    }

    /// Moves virtual time to `t` and wakes the nodes that have frames to receive. Panics if `t`
    /// is before [`SimNet::now`].
    pub fn advance_to(&self, t: Instant) {
        let wakers = {
            let mut st = self.state.borrow_mut();
            assert!(t >= st.now, "advance_to({t:?}) goes back in time from {:?}", st.now);
            st.now = t;
            for node in st.nodes.iter_mut() {
                node.pauses.forget_before(t.0);
            }
            st.ready_wakers()
        };
        wake_all(wakers);
    }

    /// Moves virtual time forward by `d`.
    pub fn advance_by(&self, d: Duration) {
        self.advance_to(self.now() + d);
    }

    /// The earliest time, not before [`SimNet::now`], at which some frame can be received,
    /// pauses included; `None` when nothing is in flight. Equal to `now()` when a frame can be
    /// received already.
    pub fn next_delivery_time(&self) -> Option<Instant> {
        let mut st = self.state.borrow_mut();
        let now = st.now;
        st.nodes.iter_mut().filter_map(|node| node.ready_at(now)).min()
    }

    /// True if `node` has a frame it can receive now.
    pub fn ready(&self, node: NodeId) -> bool {
        let mut st = self.state.borrow_mut();
        let now = st.now;
        st.nodes[node.index()].ready_at(now) == Some(now)
    }

    /// Frames sent and not yet received, over the whole network.
    pub fn in_flight(&self) -> usize {
        self.state.borrow().in_flight
    }

    /// Frames received so far, over the whole network.
    pub fn delivered(&self) -> u64 {
        self.state.borrow().delivered
    }

    /// A hash of every reception so far: virtual time, sender, receiver and frame bytes, in
    /// order. Two runs with equal hashes delivered the same frames at the same times.
    pub fn trace_hash(&self) -> u64 {
        self.state.borrow().trace_hash
    }

    /// True once `node` has closed or been killed.
    pub fn is_failed(&self, node: NodeId) -> bool {
        self.state.borrow().nodes[node.index()].life != Life::Alive
    }

    /// Removes every delay, the jitter and all pauses: frames in flight are due now, new frames
    /// are due when sent. Order per pair is kept. Pair capacities stay.
    pub fn heal(&self) {
        let wakers = {
            let mut st = self.state.borrow_mut();
            let now = st.now;
            st.faults = st.faults.healed();
            for pair in st.pairs.iter_mut() {
                pair.delay_us = 0;
                pair.last_at = pair.last_at.min(now);
            }
            for node in st.nodes.iter_mut() {
                node.pauses.heal();
                let mut frames = std::mem::take(&mut node.inbox).into_vec();
                for Reverse(f) in &mut frames {
                    f.at = f.at.min(now);
                }
                node.inbox = frames.into();
            }
            st.ready_wakers()
        };
        wake_all(wakers);
    }

    /// Crashes `node` for good: frames from and to it are dropped, its transport returns
    /// `Closed`, and every other node gets `PeerFailed(node)` once.
    pub fn kill(&self, node: NodeId) {
        let wakers = self.state.borrow_mut().fail(node, Life::Killed);
        wake_all(wakers);
    }

    /// Holds frames to `node` until `until` (on top of any seeded pause).
    pub fn pause(&self, node: NodeId, until: Instant) {
        self.state.borrow_mut().nodes[node.index()].pauses.pause_until(until.0);
    }

    /// Sets the base delay of pair (`from`, `to`) for frames sent from now on; FIFO still holds.
    pub fn set_delay(&self, from: NodeId, to: NodeId, delay: Duration) {
        let mut st = self.state.borrow_mut();
        let i = st.pair_index(from, to);
        st.pairs[i].delay_us = delay.as_micros();
    }
}

impl SimNode {
    /// When this node's first frame can be received, not before `now`.
    fn ready_at(&mut self, now: Instant) -> Option<Instant> {
        if self.life != Life::Alive {
            return None;
        }
        let Reverse(head) = self.inbox.peek()?;
        Some(Instant(self.pauses.release(head.at.max(now).0)))
    }
}

impl State {
    fn n(&self) -> usize {
        self.nodes.len()
    }

    fn pair_index(&self, from: NodeId, to: NodeId) -> usize {
        from.index() * self.n() + to.index()
    }

    /// Wakers of the nodes that can receive a frame now.
    fn ready_wakers(&mut self) -> Vec<Waker> {
        let now = self.now;
        let mut wakers = Vec::new();
        for node in self.nodes.iter_mut() {
            if node.waker.is_some() && node.ready_at(now) == Some(now) {
                wakers.extend(node.waker.clone());
            }
        }
        wakers
    }

    /// Moves `id` to `life` (closed or killed); returns the wakers to wake.
    fn fail(&mut self, id: NodeId, life: Life) -> Vec<Waker> {
        let node = &mut self.nodes[id.index()];
        if node.life >= life {
            return Vec::new();
        }
        if node.life == Life::Alive {
            self.failures += 1;
        }
        node.life = life;
        // Frames to it are lost.
        for Reverse(f) in std::mem::take(&mut node.inbox).into_vec() {
            let i = self.pair_index(NodeId(f.from), id);
            self.pairs[i].queued -= 1;
            self.in_flight -= 1;
            self.pool.give(f.frame);
        }
        if life == Life::Killed {
            for to in 0..self.n() {
                let i = self.pair_index(id, NodeId(to as u16));
                let inbox = &mut self.nodes[to].inbox;
                inbox.retain(|Reverse(f)| f.from != id.0);
                self.in_flight -= self.pairs[i].queued;
                self.pairs[i].queued = 0;
            }
        }
        let others = self.nodes.iter().enumerate().filter(|&(i, _)| i != id.index());
        others.filter_map(|(_, n)| n.waker.clone()).collect()
    }

    fn record_delivery(&mut self, from: u16, to: NodeId, frame: &[u8]) {
        let mut h = self.trace_hash;
        h = fnv(h, &self.now.0.to_le_bytes());
        h = fnv(h, &from.to_le_bytes());
        h = fnv(h, &to.0.to_le_bytes());
        h = fnv(h, &(frame.len() as u64).to_le_bytes());
        self.trace_hash = fnv(h, frame);
        self.delivered += 1;
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

impl SimTransport {
    /// Reserves a place on pair (self, to): checks, delivery time, sequence number.
    fn reserve(&self, to: NodeId, len: usize) -> Result<(Instant, u64, Vec<u8>), SendError> {
        let mut st = self.state.borrow_mut();
        if st.nodes[self.id.index()].life != Life::Alive {
            return Err(SendError::Closed);
        }
        if to.index() >= st.n() {
            return Err(SendError::UnknownPeer);
        }
        if len > st.faults.frame_len_max {
            return Err(SendError::TooLarge);
        }
        if st.nodes[to.index()].life != Life::Alive {
            return Err(SendError::PeerFailed);
        }
        let (now, jitter_us, frames_max) = (st.now, st.faults.jitter_us, st.faults.pair_frames_max);
        let i = st.pair_index(self.id, to);
        let pair = &mut st.pairs[i];
        if pair.queued >= frames_max {
            pair.sender_blocked = true;
            return Err(SendError::WouldBlock);
        }
        let delay_us = pair.delay_us.saturating_add(pair.rng.below(jitter_us.saturating_add(1)));
        let at = (now + Duration(delay_us)).max(pair.last_at);
        pair.last_at = at;
        let seq = st.next_seq;
        st.next_seq += 1;
        Ok((at, seq, st.pool.take(len)))
    }

    /// Puts a filled frame on its way; returns the receiver's waker if it can receive it now.
    fn push(&self, to: NodeId, frame: InFlight) -> Option<Waker> {
        let mut st = self.state.borrow_mut();
        let now = st.now;
        if st.nodes[self.id.index()].life == Life::Killed || st.nodes[to.index()].life != Life::Alive {
            // A failure happened while the frame was filled: it is lost, as a failure allows.
            st.pool.give(frame.frame);
            return None;
        }
        let i = st.pair_index(self.id, to);
        st.pairs[i].queued += 1;
        st.in_flight += 1;
        let receiver = &mut st.nodes[to.index()];
        receiver.inbox.push(Reverse(frame));
        receiver.waker.clone().filter(|_| receiver.ready_at(now) == Some(now))
    }
}

impl Transport for SimTransport {
    fn local_id(&self) -> NodeId {
        self.id
    }

    fn frame_len_max(&self) -> usize {
        self.state.borrow().faults.frame_len_max
    }

    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError> {
        let (at, seq, mut frame) = self.reserve(to, len)?;
        // The state is not borrowed while `fill` runs, so it may look at the network.
        fill(&mut frame);
        if let Some(waker) = self.push(to, InFlight { at, seq, from: self.id.0, frame }) {
            waker.wake();
        }
        Ok(())
    }

    fn poll_recv(
        &mut self,
        max_frames: usize,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> Result<usize, RecvError> {
        let mut senders = Vec::new();
        {
            let mut st = self.state.borrow_mut();
            let now = st.now;
            let me = &mut st.nodes[self.id.index()];
            if me.life != Life::Alive {
                return Err(RecvError::Closed);
            }
            if me.pauses.release(now.0) == now.0 {
                while self.batch.len() < max_frames {
                    let me = &mut st.nodes[self.id.index()];
                    if !matches!(me.inbox.peek(), Some(Reverse(f)) if f.at <= now) {
                        break;
                    }
                    let Reverse(f) = me.inbox.pop().expect("peeked");
                    let i = st.pair_index(NodeId(f.from), self.id);
                    let pair = &mut st.pairs[i];
                    pair.queued -= 1;
                    if std::mem::take(&mut pair.sender_blocked) {
                        senders.extend(st.nodes[usize::from(f.from)].waker.clone());
                    }
                    st.in_flight -= 1;
                    st.record_delivery(f.from, self.id, &f.frame);
                    self.batch.push((NodeId(f.from), f.frame));
                }
            }
        }
        wake_all(senders);
        let handed = self.batch.len();
        for (from, frame) in &self.batch {
            sink(*from, frame);
        }
        let mut st = self.state.borrow_mut();
        for (_, frame) in self.batch.drain(..) {
            st.pool.give(frame);
        }
        Ok(handed)
    }

    fn poll_event(&mut self) -> Option<TransportEvent> {
        let mut st = self.state.borrow_mut();
        let me = self.id.index();
        if st.nodes[me].life != Life::Alive || st.failures == st.nodes[me].reported_count {
            return None;
        }
        let peer = (0..st.n()).find(|&p| {
            let i = st.pair_index(NodeId(p as u16), self.id);
            // A closed peer is reported after its last frame was received.
            !st.nodes[me].reported[p] && st.nodes[p].life != Life::Alive && st.pairs[i].queued == 0
        })?;
        let node = &mut st.nodes[me];
        node.reported[peer] = true;
        node.reported_count += 1;
        Some(TransportEvent::PeerFailed(NodeId(peer as u16)))
    }

    fn register_waker(&mut self, waker: &Waker) {
        let mut st = self.state.borrow_mut();
        let slot = &mut st.nodes[self.id.index()].waker;
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    fn close(&mut self) {
        let wakers = self.state.borrow_mut().fail(self.id, Life::Closed);
        wake_all(wakers);
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
