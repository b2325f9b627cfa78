//! The `node_ops` target: one [`Node`] (node 1 of 3) fed an arbitrary sequence of inputs (frames
//! from peers, worker commands, timers, peer failures) and of partial or full drains of its
//! outputs.
//!
//! # The byte language
//!
//! The first byte is a header: if its low nibble is `0xf` the node runs static partitioning,
//! else the technique `header >> 5` selects: 0 relocation, 1 and 6 adaptive, 2 adaptive without
//! replication, 3 adaptive without relocation, 4 full replication, 5 multi-technique, 7 static
//! partitioning (under multi-technique, keys 0 and 1 are hot); unless the low nibble is `0xf`,
//! bit 0 set selects the dense placement (else hashed), and bits 1 and 2 the clock gate: 0
//! async, 1 BSP, 2 SSP with staleness 1 (SparseSSP(1, 2) if bit 3 is set too), 3 bounded
//! delay 1;
//! if bit 4 is set the harness drains every output after every input (the drain contract), else
//! only when an op says so.
//! Then, until the bytes run out, one op per byte `op`, by `op % 16`, each reading its fields
//! from the bytes that follow (reads past the end give zeros):
//!
//! | `op % 16` | input |
//! |---|---|
//! | 0 | a raw frame: sender byte, length byte, that many bytes |
//! | 1 | a message of any kind with arbitrary fields (as the `wire_round_trip` target builds them), encoded as a frame |
//! | 2, 3 | a plausible message: small keys (mostly inside the layout), request ids the node issued, small epochs, value lengths that mostly fit |
//! | 4, 5 | a peer's plausible answer to one of the last 16 messages the node sent (a reply, a relocation, a pointer release, a forward back...) |
//! | 6, 7, 8 | a worker's pull, push (add), push (set): key count and keys (a few outside the layout), values |
//! | 9 | a worker's localize |
//! | 10 | a worker's clock or sampling command, by `(op >> 5) % 8` (for `op >= 0xe0`, by the next byte `% 8`): barrier; intent (keys as for a pull, then a byte `x`: the window `[clock + x % 8, clock + x % 8 + 1 + (x >> 3) % 8)`, or an empty one for `x >= 0xf8`); `advance_clock`; `wait_sync`; by the next byte `% 4`, `end_intents` (0, 1), `gate` (2) or `retire` (3); `register_distribution` (a conformity level, then a uniform range or a few weighted keys, possibly outside the layout); `prepare_sample` (one of distributions 0 to 3, up to 15 samples, a window as an intent's); `pull_sample_keys` of an open sample (or of a handle never given out), up to 4 keys, sometimes with the wrong value length, then maybe `finish` |
//! | 11 | time advances (a little, or past the request timeout), then `handle_timeout` |
//! | 12 | the transport reports a peer (or a stranger, or the node itself) failed |
//! | 13 | drain up to `n` transmits |
//! | 14 | drain up to `n` events |
//! | 15 | drain everything |
//!
//! For commands, bit 4 of `op` picks worker 0 or 1, and `op >= 0xe0` names worker 2, which does
//! not exist.
//!
//! # What is checked
//!
//! After every input: [`Node::check_invariants`]; every table within its configured bound
//! (pending requests, waiting operations, keys held; keys incoming and forwarding pointers at
//! most `store_keys_max`); the outbox grows by at most what one input can add (two frames per key
//! or entry the input names, plus one per node; peer failures add none, and timers none but
//! where they start a sync round: two frames per key of the layout plus one per node; under
//! BSP and SSP, peer failures, timers, clock advances and retirements may add one flushed clock
//! per node), and a worker
//! command is accepted only while the outbox is under `outbox_frames_max`, so the outbox exceeds
//! that bound only through peer frames the driver did not drain after; each command's result is
//! one its arguments and the node's state allow; every transmitted message is addressed to a
//! peer, fits `frame_len_max` and `keys_per_message_max` (or relays no more keys than a peer sent
//! in one message), and names only keys of the layout; every event answers a command accepted
//! earlier, exactly once, with a completion of the right kind and length; intents, clock
//! advances and `end_intents` are accepted or refused as their arguments say, and a clock moves
//! by exactly one; a distribution gets the next id unless it does not fit the layout or the
//! bound is reached; a prepared sample has exactly the samples asked for, and a refused one
//! leaves no handle open; pulled samples lie in the layout and in their distribution's support,
//! and use up exactly the samples pulled (none on a refused pull).
//! At the end, time passes the request timeout: every accepted pull, push,
//! localize and `wait_sync` has completed, and nothing is pending.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use hashbrown::{HashMap, HashSet};

mod commands;
mod peers;

use super::{message, technique_of, Bytes};
use crate::config::Placement;
use crate::config::{Config, Gate, Technique};
use crate::error::OpError;
use crate::ids::Clock;
use crate::ids::{
    DistId, Epoch, Key, MembershipEpoch, NodeId, RequestId, SampleHandle, Ticket, Version, WorkerId,
};
use crate::layout::Layout;
use crate::node::{Completion, IntentKind, Node, HOPS_MAX};
use crate::placement::Homes;
use crate::sampling::{Conformity, Distribution, SampleError, Sampler, SamplingOptions};
use crate::time::{Duration, Instant};
use crate::wire::{self, FailReason, Message, Moved, OwnerChange, Release, WriteKind, HEADER_LEN};
use peers::{peer, small_key};

/// Nodes in the cluster the fuzzed node belongs to.
const NODES: u16 = 3;
/// The fuzzed node.
const ME: NodeId = NodeId(1);
/// Keys in the layout; each value is [`LEN`] floats.
const KEYS: u64 = 64;
const LEN: usize = 2;
/// Workers of the node.
const WORKERS: u16 = 2;
/// Most transmits remembered for plausible answers.
const RECENT_MAX: usize = 16;

/// The configuration of the fuzzed node: small bounds, so that every limit is reached.
pub fn node_ops_config(technique: Technique, placement: Placement) -> Config {
    let layout = Layout::uniform(KEYS, LEN as u32).unwrap_or_else(|_| unreachable!());
    let mut cfg = Config::new(NODES, WORKERS, layout);
    let homes = Homes::new(placement, NODES, KEYS);
    let homed = (0..KEYS).filter(|k| homes.home(Key(*k)) == ME).count();
    cfg.technique = technique;
    cfg.placement = placement;
    if technique == Technique::MultiTechnique {
        cfg.hot_keys = alloc::sync::Arc::new([Key(0), Key(1)].into_iter().collect());
    }
    cfg.replicas_max = KEYS as usize;
    cfg.outbox_frames_max = 16;
    cfg.requests_pending_max = 8;
    cfg.waiting_ops_max = 8;
    // Room for the keys homed here (as the field's docs require) and a few more.
    cfg.store_keys_max = homed + 6;
    cfg.store_shards = 4;
    cfg.location_cache_slots = 8;
    cfg.keys_per_message_max = 4;
    // Room for two keys per frame, so that long batches are split by length as well.
    cfg.frame_len_max = HEADER_LEN + 64 + 2 * (24 + 4 * LEN);
    cfg.request_timeout = Duration::from_millis(100);
    cfg.sampling = SamplingOptions {
        pool_size: 6,
        reuse: 2,
        with_replacement: true,
        distributions_max: 3,
        handles_max: 3,
        sample_size_max: 12,
    };
    cfg
}

/// Runs one fuzz input through a node; panics on any broken promise (see the module docs).
pub fn node_ops(data: &[u8]) {
    let mut b = Bytes { data };
    let header = b.u8();
    let technique =
        if header & 0x0f == 0x0f { Technique::StaticPartitioning } else { technique_of(header >> 5) };
    let placement =
        if header & 0x0f != 0x0f && header & 1 == 1 { Placement::Dense } else { Placement::Hashed };
    let mut cfg = node_ops_config(technique, placement);
    if header & 0x0f != 0x0f {
        cfg.gate = [Gate::Async, Gate::Bsp, Gate::Ssp { staleness: 1 }, Gate::BoundedDelay { delay: 1 }]
            [usize::from((header >> 1) & 3)];
        // Bit 3 turns SSP(1) into SparseSSP(1, 2).
        if header & 0x0c == 0x0c {
            cfg.gate = Gate::SparseSsp { staleness: 1, speculation: 2 };
        }
    }
    let mut h = Harness::new(cfg, header & 0x10 != 0);
    while !b.is_empty() {
        h.op(&mut b);
        h.check();
    }
    h.finish();
}

/// What a worker command was, for checking its completion.
#[derive(Debug)]
enum Cmd {
    Pull { values_len: usize },
    Write,
    Localize,
    Barrier { worker: WorkerId },
    Sync,
    Gate,
}

struct Harness {
    node: Node,
    cfg: Config,
    homed: Vec<Key>,
    auto_drain: bool,
    now: Instant,
    next_ticket: u64,
    /// Requests the node created so far (its request ids are `1..=reqs`).
    reqs: u64,
    /// Accepted commands not yet completed, in issue order (a report lists them so, the same
    /// in every run of an input).
    open: BTreeMap<Ticket, Cmd>,
    /// Barrier entries of each worker not yet completed (drained).
    in_barrier: HashMap<WorkerId, u32>,
    any_peer_failed: bool,
    /// An upper bound on the frames in the outbox; exact (zero) after a drain that found it empty.
    outbox_max: usize,
    /// The last messages the node sent, with their destination.
    recent: VecDeque<(NodeId, Message)>,
    /// The most keys (or entries) in one message a peer sent.
    peer_entries_max: usize,
    /// Each worker's sampler, and the handles of samples prepared and not finished.
    samplers: Vec<Sampler>,
    handles: Vec<(usize, SampleHandle, DistId)>,
}

impl Harness {
    fn home(&self, key: Key) -> NodeId {
        self.node.store().homes().home(key)
    }

    fn new(cfg: Config, auto_drain: bool) -> Harness {
        let node = Node::new(cfg.clone(), ME).unwrap_or_else(|e| panic!("the fuzzed configuration: {e}"));
        let homes = Homes::new(cfg.placement, NODES, KEYS);
        let homed = (0..KEYS).map(Key).filter(|k| homes.home(*k) == ME).collect();
        Harness {
            cfg,
            homed,
            auto_drain,
            now: Instant(1),
            next_ticket: 0,
            reqs: 0,
            open: BTreeMap::new(),
            in_barrier: HashMap::new(),
            any_peer_failed: false,
            outbox_max: 0,
            recent: VecDeque::new(),
            peer_entries_max: 0,
            samplers: (0..WORKERS)
                .map(|w| node.sampler(WorkerId(w)).unwrap_or_else(|e| panic!("sampler of worker {w}: {e}")))
                .collect(),
            handles: Vec::new(),
            node,
        }
    }

    fn op(&mut self, b: &mut Bytes<'_>) {
        let op = b.u8();
        match op % 16 {
            0 => {
                let from = peer(b.u8());
                let n = b.count(1);
                let frame = b.take(n);
                self.frame(from, frame, false);
            }
            1 => {
                let from = peer(b.u8());
                let msg = message(b.u8(), b);
                self.deliver(from, msg, b.u8());
            }
            2 | 3 => {
                let from = peer(b.u8());
                let msg = self.plausible(b);
                self.deliver(from, msg, b.u8());
            }
            4 | 5 => {
                let idx = usize::from(b.u8());
                let twist = b.u8();
                if let Some((from, msg)) = self.answer(idx, twist, b) {
                    self.deliver(from, msg, twist);
                }
            }
            6..=9 => self.command(op, b),
            10 => self.clock_command(op, b),
            11 => {
                let step = b.u8();
                let d = if step >= 0xf0 {
                    self.cfg.request_timeout.as_micros() * u64::from(step & 0x0f)
                } else {
                    u64::from(step) * self.cfg.request_timeout.as_micros() / 64
                };
                self.now = self.now + Duration(d);
                self.node.handle_timeout(self.now);
                self.after_input(self.round_growth());
            }
            12 => {
                let p = NodeId(u16::from(b.u8() % 4));
                self.node.handle_peer_failed(self.now, p);
                if p != ME && p.0 < NODES {
                    self.any_peer_failed = true;
                }
                self.after_input(self.flush_growth());
            }
            13 => {
                let n = b.u8();
                self.drain_transmits(usize::from(n));
            }
            14 => {
                let n = b.u8();
                self.drain_events(usize::from(n));
            }
            _ => self.drain_all(),
        }
    }

    // ----- inputs -----

    /// Encodes `msg` as a frame from `from` (or, by `how`, hands it over decoded, or spoils it).
    fn deliver(&mut self, from: NodeId, msg: Message, how: u8) {
        match how % 8 {
            0 => {
                self.peer_entries_max = self.peer_entries_max.max(entries(&msg));
                let growth = growth(entries(&msg));
                self.node.handle_message(self.now, from, msg);
                self.after_input(growth);
            }
            1 => {
                // Another cluster, a header naming another sender, or another membership
                // epoch (no change ever commits here): dropped.
                let (mut cluster, mut sender, mut epoch) =
                    (self.cfg.wire_cluster(), from, MembershipEpoch::START);
                match how & 24 {
                    0 => cluster = crate::ids::ClusterId(cluster.0 ^ 1),
                    8 => sender = NodeId(from.0 ^ 2),
                    _ => epoch = MembershipEpoch(u16::from(how >> 3)),
                }
                let frame = msg.to_frame(cluster, sender, epoch);
                // Counted as foreign unless something read before the cluster (the length) is
                // wrong already; as of another epoch if it decodes, from its sender.
                let decoded = wire::decode(&frame, self.cfg.wire_cluster(), self.cfg.frame_len_max);
                let foreign = matches!(decoded, Err(crate::error::WireError::ForeignCluster { .. }));
                let other_epoch = decoded.is_ok()
                    && sender == from
                    && from.0 < NODES
                    && epoch != MembershipEpoch::START
                    && !self.node.failed_peers().contains(&from);
                let before = (self.node.stats().frames_foreign, self.node.stats().frames_other_epoch);
                self.frame(from, &frame, true);
                let after = (self.node.stats().frames_foreign, self.node.stats().frames_other_epoch);
                assert_eq!(after.0 - before.0, u64::from(foreign));
                assert_eq!(after.1 - before.1, u64::from(other_epoch));
            }
            2 => {
                let mut frame = msg.to_frame(self.cfg.wire_cluster(), from, MembershipEpoch::START);
                if let Some(last) = frame.last_mut() {
                    *last ^= how;
                }
                self.frame(from, &frame, false);
            }
            _ => {
                let frame = msg.to_frame(self.cfg.wire_cluster(), from, MembershipEpoch::START);
                self.frame(from, &frame, false);
            }
        }
    }

    fn frame(&mut self, from: NodeId, frame: &[u8], must_drop: bool) {
        let decoded = wire::decode(frame, self.cfg.wire_cluster(), self.cfg.frame_len_max);
        let entries = decoded.as_ref().map(|(_, m)| entries(m)).unwrap_or(0);
        self.peer_entries_max = self.peer_entries_max.max(entries);
        let growth = growth(entries);
        let dropped = self.node.stats().frames_rejected;
        self.node.handle_frame(self.now, from, frame);
        // A peer reported failed is outside the membership: its frames are dropped too, and
        // counted apart (`from_non_members`), unless something else was wrong with them.
        let non_member =
            decoded.as_ref().is_ok_and(|(h, _)| h.sender == from) && self.node.failed_peers().contains(&from);
        let should_drop = !non_member
            && (must_drop || !decoded.as_ref().is_ok_and(|(h, _)| h.sender == from && from.0 < NODES));
        assert_eq!(
            self.node.stats().frames_rejected - dropped,
            u64::from(should_drop),
            "a frame from {from} was {} dropped: {:02x?}",
            if should_drop { "not" } else { "wrongly" },
            frame
        );
        self.after_input(if should_drop || non_member { 0 } else { growth });
    }

    /// The most frames a timer may add: a sync round sends at most an entry per key of the
    /// layout (two frames each, at the worst split) and a message per node.
    fn round_growth(&self) -> usize {
        let round = if self.cfg.technique.uses_rounds() { growth(KEYS as usize) } else { 0 };
        round + self.flush_growth()
    }

    /// Under a gate that waits for peers, any input that ends a request, a round or a worker's
    /// clock may send this node's flushed clock to every peer; under SparseSSP also, for every
    /// worker, a speculation query to every peer for its clock and one for the next, and an
    /// answer to a peer's query.
    pub(super) fn flush_growth(&self) -> usize {
        if self.cfg.gate.staleness().is_none() {
            return 0;
        }
        let queries = if self.cfg.gate.speculation() > 0 {
            2 * usize::from(NODES) * usize::from(self.cfg.workers_per_node) + 1
        } else {
            0
        };
        usize::from(NODES) + queries
    }

    /// Keys of a command: a count, then one byte per key; a few land outside the layout.
    fn command_keys(&self, b: &mut Bytes<'_>) -> Vec<Key> {
        let n = b.u8() % 7;
        (0..n).map(|_| small_key(b.u8())).collect()
    }

    /// Values for `keys`: small integers, usually as many as the keys need.
    fn command_values(&self, keys: &[Key], b: &mut Bytes<'_>) -> Vec<f32> {
        let shape = b.u8();
        let mut n = keys.len() * LEN;
        if shape >= 0xf8 {
            n = if shape & 1 == 0 { n + 1 } else { n.saturating_sub(1) };
        }
        (0..n).map(|_| f32::from(b.u8() % 16)).collect()
    }

    // ----- outputs -----

    fn drain_transmits(&mut self, n: usize) {
        for _ in 0..n {
            let Some(t) = self.node.poll_transmit() else {
                self.outbox_max = 0;
                return;
            };
            assert!(
                self.outbox_max > 0,
                "the outbox held more frames than the inputs since it was last empty can add"
            );
            self.outbox_max -= 1;
            self.check_transmit(t.to(), t.message(), t.encoded_len());
            if self.recent.len() == RECENT_MAX {
                self.recent.pop_front();
            }
            self.recent.push_back((t.to(), t.message().clone()));
        }
    }

    fn check_transmit(&self, to: NodeId, msg: &Message, len: usize) {
        assert!(to != ME && to.0 < NODES, "a message to {to}: {msg:?}");
        assert!(len <= self.cfg.frame_len_max, "a frame of {len} bytes, over frame_len_max: {msg:?}");
        // A node splits what it sends by keys_per_message_max, but relays a peer's keys in one
        // message when it answers for all of them (a request over the hop limit).
        assert!(
            entries(msg) <= self.cfg.keys_per_message_max.max(self.peer_entries_max),
            "a message with more than keys_per_message_max keys: {msg:?}"
        );
        let layout = &self.cfg.layout;
        let keys_ok = |keys: &[Key]| keys.iter().all(|k| layout.contains(*k));
        let node_ok = |n: &NodeId| n.0 < NODES;
        let ok = match msg {
            Message::Pull { origin, keys, .. } | Message::Localize { origin, keys, .. } => {
                node_ok(origin) && keys_ok(keys)
            }
            Message::Push { origin, keys, values, .. } => {
                node_ok(origin) && layout.total_len(keys) == Ok(values.len())
            }
            Message::PullReply { keys, values, .. } => layout.total_len(keys) == Ok(values.len()),
            Message::PushReply { keys, .. } | Message::RequestFailed { keys, .. } => keys_ok(keys),
            Message::Relocate { moved, values } => {
                let keys: Vec<Key> = moved.iter().map(|m| m.key).collect();
                self.cfg.technique.moves_keys() && layout.total_len(&keys) == Ok(values.len())
            }
            Message::OwnerUpdate { changes } => {
                changes.iter().all(|c| layout.contains(c.key) && self.home(c.key) == to && c.prev != ME)
            }
            Message::PointerRelease { released } => released.iter().all(|r| layout.contains(r.key)),
            Message::BarrierEnter { .. } => to == NodeId(0),
            Message::Sync { origin, starts, ends, replicas, owners, .. } => {
                self.cfg.technique.uses_rounds()
                    && node_ok(origin)
                    && keys_ok(starts)
                    && keys_ok(ends)
                    && replicas.iter().all(|r| layout.contains(r.key))
                    && owners.iter().all(|c| layout.contains(c.key))
            }
            Message::SyncReply { relocated, refreshed, acks, failed, .. } => {
                relocated.iter().all(|m| layout.contains(m.key))
                    && refreshed.iter().all(|r| layout.contains(r.key))
                    && keys_ok(acks)
                    && keys_ok(failed)
            }
            _ => true,
        };
        assert!(ok, "node {ME} sent a message its peer must reject, to {to}: {msg:?}");
    }

    fn drain_events(&mut self, n: usize) {
        for _ in 0..n {
            let Some(ev) = self.node.poll_event() else { return };
            let (worker, ticket, result) = ev.into_parts();
            let Some(cmd) = self.open.remove(&ticket) else {
                panic!("an event for ticket {ticket:?}, which is not open: {result:?}")
            };
            match (&cmd, &result) {
                (Cmd::Pull { values_len }, Ok(Completion::Pull(v))) => {
                    assert_eq!(v.len(), *values_len, "a pull completed with the wrong number of values")
                }
                (Cmd::Write, Ok(Completion::Write))
                | (Cmd::Localize, Ok(Completion::Localize))
                | (Cmd::Sync, Ok(Completion::Sync)) => {}
                (Cmd::Sync, Err(e)) => assert_eq!(*e, OpError::Timeout, "a wait_sync failed with {e:?}"),
                (Cmd::Gate, Ok(Completion::Gate)) => {}
                // A second wait of the same worker ends the first; a failed peer ends the waits
                // of the gates that wait for peers.
                (Cmd::Gate, Err(OpError::Timeout)) => {}
                (Cmd::Gate, Err(OpError::PeerFailed { .. })) => {
                    assert!(self.cfg.gate.staleness().is_some(), "a bounded-delay gate failed with a peer")
                }
                (Cmd::Gate, r) => panic!("a gate ended with {r:?}"),
                (Cmd::Barrier { worker: w }, Ok(Completion::Barrier) | Err(OpError::PeerFailed { .. })) => {
                    assert_eq!(worker, *w, "a barrier completed for another worker");
                    if let Some(n) = self.in_barrier.get_mut(&worker) {
                        *n -= 1;
                    }
                }
                (Cmd::Barrier { .. }, Err(e)) => panic!("a barrier failed with {e:?}"),
                // (`FrameRefused`: a peer answered that the transport refused a frame of it.)
                (_, Err(e)) => assert!(
                    matches!(
                        e,
                        OpError::Timeout
                            | OpError::PeerFailed { .. }
                            | OpError::RoutingLoop
                            | OpError::Unreachable { .. }
                            | OpError::Busy
                            | OpError::StoreFull
                            | OpError::FrameRefused { .. }
                    ),
                    "a command failed with {e:?}"
                ),
                _ => panic!("{cmd:?} (ticket {ticket:?}) completed with {result:?}"),
            }
        }
    }

    fn drain_all(&mut self) {
        self.drain_transmits(usize::MAX);
        self.drain_events(usize::MAX);
    }

    /// After every input: the outbox may have grown by `growth` frames.
    fn after_input(&mut self, growth: usize) {
        self.outbox_max += growth;
        if self.auto_drain {
            self.drain_all();
        }
    }

    fn check(&self) {
        if let Err(v) = self.node.check_invariants() {
            panic!("node {ME}: {v}");
        }
        let n = &self.node;
        let c = &self.cfg;
        assert!(n.pending_requests() <= c.requests_pending_max, "pending requests over their bound");
        assert!(n.waiting_ops() <= c.waiting_ops_max, "waiting operations over their bound");
        assert!(n.store().keys_held() <= c.store_keys_max, "keys held over store_keys_max");
        assert!(n.keys_incoming() <= c.store_keys_max, "keys incoming over store_keys_max");
        assert!(
            n.forwarding_pointers() <= c.store_keys_max,
            "{} forwarding pointers, more than store_keys_max = {}: the table has no configured bound",
            n.forwarding_pointers(),
            c.store_keys_max
        );
        if self.outbox_max < c.outbox_frames_max {
            assert!(n.wants_input(), "the outbox refuses commands below its bound");
        }
    }

    /// Time passes the request timeout: every request ends.
    fn finish(&mut self) {
        self.drain_all();
        self.now = self.now + Duration(2 * self.cfg.request_timeout.as_micros() + 1);
        self.node.handle_timeout(self.now);
        self.after_input(self.round_growth());
        self.drain_all();
        self.check();
        assert_eq!(self.node.pending_requests(), 0, "requests still pending after their deadline");
        // Barriers and gates wait for peers, which say nothing unless the input makes them.
        let open: Vec<_> =
            self.open.iter().filter(|(_, c)| !matches!(c, Cmd::Barrier { .. } | Cmd::Gate)).collect();
        assert!(open.is_empty(), "commands that never completed: {open:?}");
    }
}

/// The most frames one input naming `entries` keys (or entries) may add to the outbox: a
/// message or reply per key, an owner update and a pointer release per relocated key, and a
/// barrier message to every node.
fn growth(entries: usize) -> usize {
    2 * entries + usize::from(NODES)
}

fn has_duplicate(keys: &[Key]) -> bool {
    let mut seen = HashSet::new();
    !keys.iter().all(|k| seen.insert(*k))
}

/// Keys or entries a message names: what its processing scales with.
fn entries(msg: &Message) -> usize {
    match msg {
        Message::Pull { keys, .. }
        | Message::PullReply { keys, .. }
        | Message::Push { keys, .. }
        | Message::PushReply { keys, .. }
        | Message::Localize { keys, .. }
        | Message::RequestFailed { keys, .. }
        | Message::Speculate { keys, .. } => keys.len(),
        Message::Relocate { moved, .. } => moved.len(),
        Message::OwnerUpdate { changes } => changes.len(),
        Message::PointerRelease { released } => released.len(),
        Message::BarrierEnter { .. }
        | Message::BarrierRelease { .. }
        | Message::DistCheck { .. }
        | Message::Flushed { .. }
        | Message::SpeculateReply { .. } => 0,
        Message::Sync { starts, ends, replicas, owners, .. } => {
            starts.len() + ends.len() + replicas.len() + owners.len()
        }
        Message::SyncReply { relocated, refreshed, acks, failed, .. } => {
            relocated.len() + refreshed.len() + acks.len() + failed.len()
        }
    }
}
