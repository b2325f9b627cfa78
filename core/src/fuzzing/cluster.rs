//! The `cluster_schedule` target: a small cluster of [`Node`]s on in-memory per-pair FIFO queues,
//! driven by a schedule read from the fuzz bytes, then healed.
//!
//! # The byte language
//!
//! Two header bytes. `h0`: `2 + h0 % 3` nodes; the technique by `(h0 >> 2) & 7`: 0 relocation,
//! 1 and 6 adaptive, 2 adaptive without replication, 3 adaptive without relocation, 4 full
//! replication, 5 multi-technique, 7 static partitioning; bit 5 makes action timing act on every intent at once
//! ([`crate::config::Timing::immediate`]); under [`Technique::MultiTechnique`], key `h0 >> 6` is
//! the hot key. `h1`: `1 + (h1 & 1)` workers per node,
//! `keys_per_message_max = 1 + (h1 >> 1) % 3`, `requests_pending_max = 2 + (h1 >> 3) % 4`, and
//! if `h1 >> 5 == 7` a tight store (`store_keys_max` = the most keys homed on one node, plus one),
//! else room for every key. The placement is dense if `h0 ^ h1` has an odd number of set bits,
//! else hashed. The clock gate ([`Config::gate`]) by `(h0 ^ h1) >> 5`: 1 BSP, 2 SSP(1), 3 SSP(2),
//! 4 bounded delay 1, 5 SparseSSP(1, 2), else async (no header bit was free: this way every committed input from
//! before the gates, each with 0 or 7 there, keeps its meaning; under async a wait passes at
//! once). The layout has [`KEYS`] keys of
//! [`LEN`] floats; frames hold two keys.
//!
//! Then one step per byte `op`, by `op % 16`, until the bytes run out:
//!
//! | `op % 16` | step |
//! |---|---|
//! | 0..=5 | deliver the head frame of a non-empty queue (next byte picks which) |
//! | 6, 7 | a worker pulls |
//! | 8, 9 | a worker pushes (adds) |
//! | 10 | a worker sets |
//! | 11 | a worker localizes |
//! | 12 | a worker signals intent: keys as for a pull, then a byte `x`: the window is `[c + x % 8, c + x % 8 + 1 + (x >> 3) % 8)` for the worker's clock `c` |
//! | 13 | a node's clock advances (next byte: by `x/1024` of the request timeout, or for `x >= 0xf0` by the whole timeout) and it handles its timers |
//! | 14 | deliver up to 15 frames from one queue (a burst) |
//! | 15 | a worker's clock step, by a byte `p` (node `p % n`, worker `(p >> 2) % workers`), by `(p >> 4) % 4`: nothing (a pause), `advance_clock`, `wait_sync`, `end_intents`; with bit 6 set, a pause is a wait at the gate and an advance is followed by one |
//!
//! A worker step reads a parameter byte `p` (node `p % n`, worker `(p >> 2) % workers`, `1 +
//! ((p >> 4) & 7) % 3` keys, and if bit 7 is set the worker first tries its keys in the store, as the
//! runtime's local path does), one byte per key (`x % KEYS`; repeats are dropped) and, for
//! pushes and sets, one byte per key giving its two small integer values.
//!
//! Each worker's pulls, pushes, sets, localizes and waits go through core's [`WorkerAccess`],
//! the path the runtime's workers run, with the node's `requests_pending_max` as its in-flight
//! bound (so the node's own `Busy` stays reachable). An access it holds (it would overtake the
//! worker's own remote operation on a key, or the bound is full) is not issued: the runtime's
//! worker would be waiting then, and the step does nothing.
//!
//! A worker waits at its gate ([`Node::gate`]) at its current clock, at most once at a time:
//! while it waits it issues nothing (its steps do nothing), as the runtime's worker is blocked
//! in the call.
//!
//! # What is checked
//!
//! After every step: every node's [`Node::check_invariants`]; no frame dropped and no message
//! rejected anywhere (in a correct cluster nothing is ever refused); every frame within
//! `frame_len_max`; every key held by exactly one node or in flight in exactly one relocation
//! frame; no request outlives its deadline by more than one timer scan; every completion is of an
//! operation that was issued, at the node and worker that issued it, once, of the right kind;
//! the only failure is a `Timeout`, and only once the node's clock passed the deadline; a pull of
//! a key that only ever received adds sees nothing that was not issued before it completed, and
//! (under techniques without replicas, whose reads may be a round old) every add completed
//! before the pull was issued and every add its own worker issued before it (invariant 4;
//! values are small integers, so sums are exact). A command is
//! refused only as `Busy` at a bound or, for localize, `StoreFull`.
//!
//! Gates (see [`mod@gate`]): a wait ends only by passing; under BSP and SSP(s), a pull issued
//! after its worker passed the gate at clock c sees, for each key that never received a set or
//! a failed add, at least the sum of the adds issued by any worker at clocks below c − s (under
//! every technique, replicas included), the check the simulator makes; under bounded delay τ,
//! a worker that passes at clock c has no request of its own issued at a clock below c − τ
//! still under way. A wait is not a request: no deadline applies to it.
//!
//! Then the heal: every worker that does not wait at its gate runs
//! [`crate::access::finalize_steps`] (retiring under a gate, then ending its intents; the
//! delivery below stands in for the barriers and sync waits), and so does each waiting worker
//! once its gate lets it pass; every queue is delivered until all are empty, and, while sync
//! rounds have work left, every node's clock moves to its next timer and the
//! queues are delivered again (at most [`HEAL_DELIVERIES_MAX`] deliveries and
//! [`HEAL_TIMER_STEPS_MAX`] timer steps). A worker still waiting at its gate when everything
//! else is quiet (no frame, no request, every other worker finalized) and either no node has a
//! timer or every node ran [`GATE_QUIET_ROUNDS`] more rounds, with no wait ended and no global
//! flushed clock grown meanwhile, is stuck: a finding, as in the simulator. (No peer ever
//! fails here, so no wait may end with `PeerFailed`.) Settled means every node idle; under
//! techniques that keep replicas for the whole run, it means every node completed two rounds
//! with nothing else outstanding, and then two more. Then every node must be idle (or, with permanent replicas,
//! have nothing pending, incoming or waiting) with no forwarding pointer, every issued
//! operation must have completed, every key must be held by exactly one node, whose epoch its
//! home node records, every replica must equal its main copy and have no unsent delta, no
//! replica may remain unless the technique keeps them, and each key that only received adds,
//! none of which failed, must hold exactly the sum of them.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use super::{technique_of, Bytes};
use crate::access::{Issue, WorkerAccess};
use crate::config::{Config, Gate, Placement, Technique};
use crate::error::OpError;
use crate::ids::Clock;
use crate::ids::{Key, NodeId, Ticket, WorkerId};
use crate::layout::Layout;
use crate::node::IntentKind;
use crate::node::{Completion, Event, Node};
use crate::placement::Homes;
use crate::time::{Duration, Instant};
use crate::wire::{Message, WriteKind, HEADER_LEN};

/// Keys in the layout.
pub const KEYS: u64 = 8;
/// Floats per value.
pub const LEN: usize = 2;
/// Frames a driver queues toward one peer before it holds back its workers' commands.
const QUEUE_MAX: usize = 64;
/// Frames in flight over the whole cluster beyond which the run counts as a message storm.
const FRAMES_MAX: usize = 1 << 14;
/// Most deliveries the heal may take.
pub const HEAL_DELIVERIES_MAX: usize = 1 << 16;
/// Most timer steps (each to every node's next timer) the heal may take.
pub const HEAL_TIMER_STEPS_MAX: usize = 1 << 12;
/// Timer rounds one clock advance may take before the timers count as stuck.
const TIMER_ROUNDS_MAX: usize = 1 << 12;
/// Sync rounds every node runs, once all is quiet in the heal and no wait ends and no global
/// flushed clock grows, before a worker still waiting at its gate counts as stuck.
pub const GATE_QUIET_ROUNDS: u64 = 8;

/// The gate the top three bits of `h0 ^ h1` select (see the module docs).
pub fn gate_of(x: u8) -> Gate {
    match x >> 5 {
        1 => Gate::Bsp,
        2 => Gate::Ssp { staleness: 1 },
        3 => Gate::Ssp { staleness: 2 },
        4 => Gate::BoundedDelay { delay: 1 },
        5 => Gate::SparseSsp { staleness: 1, speculation: 2 },
        _ => Gate::Async,
    }
}

/// The configuration the header bytes `h0`, `h1` select (see the module docs).
pub fn cluster_config(h0: u8, h1: u8) -> Config {
    let nodes = 2 + u16::from(h0 % 3);
    let layout = Layout::uniform(KEYS, LEN as u32).unwrap_or_else(|_| unreachable!());
    let mut cfg = Config::new(nodes, 1 + u16::from(h1 & 1), layout);
    cfg.technique = technique_of(h0 >> 2);
    // The parity of the header: every other choice above is the same under either placement.
    if (h0 ^ h1).count_ones() % 2 == 1 {
        cfg.placement = Placement::Dense;
    }
    let homes = Homes::new(cfg.placement, nodes, KEYS);
    cfg.timing.immediate = h0 & 0x20 != 0;
    cfg.gate = gate_of(h0 ^ h1);
    if cfg.technique == Technique::MultiTechnique {
        cfg.hot_keys = alloc::sync::Arc::new([Key(u64::from(h0 >> 6))].into_iter().collect());
    }
    cfg.replicas_max = KEYS as usize;
    cfg.keys_per_message_max = 1 + usize::from((h1 >> 1) % 3);
    cfg.requests_pending_max = 2 + usize::from((h1 >> 3) % 4);
    cfg.store_keys_max = if h1 >> 5 == 7 {
        let homed = |n: u16| (0..KEYS).filter(|k| homes.home(Key(*k)) == NodeId(n)).count();
        (0..nodes).map(homed).max().unwrap_or(0) + 1
    } else {
        KEYS as usize
    };
    cfg.store_shards = 2;
    cfg.location_cache_slots = 4;
    cfg.waiting_ops_max = 4;
    cfg.outbox_frames_max = 64;
    cfg.frame_len_max = HEADER_LEN + 64 + 2 * (24 + 4 * LEN);
    cfg.request_timeout = Duration::from_secs(1);
    cfg
}

/// Runs one schedule and the heal; panics on any broken promise (see the module docs).
pub fn cluster_schedule(data: &[u8]) {
    run(data, |_| {});
}

fn run(data: &[u8], setup: impl FnOnce(&mut Cluster)) -> Cluster {
    let mut b = Bytes { data };
    let (h0, h1) = (b.u8(), b.u8());
    let mut c = Cluster::new(cluster_config(h0, h1));
    setup(&mut c);
    while !b.is_empty() {
        c.step(&mut b);
        c.check();
    }
    c.heal();
    c
}

mod gate;
mod heal;

pub use gate::GateTally;
#[cfg(test)]
pub(super) use gate::{cluster_schedule_tally, Mutation};

/// A frame in a queue, with the keys it relocates (none unless it is a `Relocate`).
struct Frame {
    bytes: Vec<u8>,
    relocated: Vec<Key>,
}

#[derive(Debug)]
enum OpKind {
    /// `lower`: per key of `keys`, the sum of the adds completed when the pull was issued, or
    /// issued before it by the same worker, whichever is larger per float; `bound`: the adds
    /// issued at clocks below it must be seen (the gate's promise).
    Pull {
        keys: Vec<Key>,
        lower: Vec<f32>,
        bound: u64,
    },
    Write {
        write: WriteKind,
        keys: Vec<Key>,
        values: Vec<f32>,
    },
    Localize {
        keys: Vec<Key>,
    },
    Sync,
    /// A wait at the gate.
    Gate,
}

#[derive(Debug)]
struct Op {
    node: usize,
    worker: WorkerId,
    issued: Instant,
    /// The worker's clock when it issued the operation.
    clock: u64,
    kind: OpKind,
}

/// What the schedule did to one key.
#[derive(Clone, Debug, Default)]
struct KeyModel {
    /// Sum of the adds that completed successfully (or hit the store directly).
    done: [f32; LEN],
    /// Sum of every add issued (completed, failed, or still under way).
    issued: [f32; LEN],
    /// Sets issued; a key with any is left out of the sum checks.
    sets: u32,
    /// An add to the key failed: it may or may not have been applied.
    uncertain: bool,
    /// Sum of the adds issued, by the node and worker that issued them.
    own: BTreeMap<(usize, WorkerId), [f32; LEN]>,
    /// Sum of the adds issued, by the clock of the worker that issued them.
    at: BTreeMap<u64, [f32; LEN]>,
}

/// One worker at its clock gate.
#[derive(Clone, Copy, Debug, Default)]
struct Seat {
    /// The wait under way: its ticket.
    waiting: Option<Ticket>,
    /// The clock at which the gate last let the worker pass.
    passed: Option<u64>,
    /// The heal ran the worker's finalize.
    finalized: bool,
}

struct Cluster {
    cfg: Config,
    n: usize,
    nodes: Vec<Node>,
    now: Vec<Instant>,
    /// FIFO queue of frames from node `i` to node `j` at `i * n + j`.
    queues: Vec<VecDeque<Frame>>,
    /// Per key: how many queued frames relocate it.
    in_flight: Vec<u32>,
    frames: usize,
    next_ticket: u64,
    /// Operations under way, by ticket: in issue order, so that a report of one that never
    /// completed names the oldest, the same in every run of an input.
    ops: BTreeMap<Ticket, Op>,
    keys: Vec<KeyModel>,
    /// Each worker's access path, by node and worker.
    paths: Vec<Vec<WorkerAccess>>,
    /// Each worker at its gate, by node and worker.
    seats: Vec<Vec<Seat>>,
    /// Gates passed in the current drain (node, worker, clock), checked when it ends.
    passed: Vec<(usize, WorkerId, u64)>,
    tally: core::cell::Cell<GateTally>,
    /// The heal has begun: nothing may time out any more (every frame is delivered).
    healing: bool,
    #[cfg(test)]
    mutation: Option<Mutation>,
}

impl Cluster {
    fn new(cfg: Config) -> Cluster {
        let n = usize::from(cfg.nodes);
        let nodes = (0..cfg.nodes)
            .map(|i| {
                Node::new(cfg.clone(), NodeId(i)).unwrap_or_else(|e| panic!("the fuzzed configuration: {e}"))
            })
            .collect();
        Cluster {
            n,
            nodes,
            now: alloc::vec![Instant(1); n],
            queues: (0..n * n).map(|_| VecDeque::new()).collect(),
            in_flight: alloc::vec![0; KEYS as usize],
            frames: 0,
            next_ticket: 0,
            ops: BTreeMap::new(),
            keys: alloc::vec![KeyModel::default(); KEYS as usize],
            paths: (0..n)
                .map(|_| {
                    (0..cfg.workers_per_node).map(|_| WorkerAccess::new(cfg.requests_pending_max)).collect()
                })
                .collect(),
            seats: alloc::vec![alloc::vec![Seat::default(); usize::from(cfg.workers_per_node)]; n],
            passed: Vec::new(),
            tally: Default::default(),
            healing: false,
            #[cfg(test)]
            mutation: None,
            cfg,
        }
    }

    fn step(&mut self, b: &mut Bytes<'_>) {
        let op = b.u8();
        match op % 16 {
            0..=5 => {
                let sel = b.u8();
                self.deliver_some(sel, 1);
            }
            6..=12 => self.command(op % 16, b),
            13 => {
                let p = b.u8();
                let x = b.u8();
                let timeout = self.cfg.request_timeout.as_micros();
                let d = if x >= 0xf0 { timeout } else { u64::from(x) * timeout / 1024 };
                self.advance(usize::from(p) % self.n, Duration(d));
            }
            14 => {
                let sel = b.u8();
                let count = usize::from(b.u8() % 16);
                self.deliver_some(sel, count);
            }
            _ => self.clock_step(b.u8()),
        }
    }

    // ----- the network -----

    /// Delivers up to `count` head frames of the `sel`-th non-empty queue.
    fn deliver_some(&mut self, sel: u8, count: usize) {
        let busy: Vec<usize> = (0..self.queues.len()).filter(|q| !self.queues[*q].is_empty()).collect();
        if busy.is_empty() {
            return;
        }
        let q = busy[usize::from(sel) % busy.len()];
        for _ in 0..count {
            if !self.deliver(q) {
                return;
            }
        }
    }

    /// Delivers the head frame of queue `q`; false if it was empty.
    fn deliver(&mut self, q: usize) -> bool {
        let Some(frame) = self.queues[q].pop_front() else { return false };
        let (from, to) = (q / self.n, q % self.n);
        self.frames -= 1;
        for k in &frame.relocated {
            self.in_flight[k.0 as usize] -= 1;
        }
        self.nodes[to].handle_frame(self.now[to], NodeId(from as u16), &frame.bytes);
        self.drain(to);
        true
    }

    /// The drain contract: every transmit into its queue, every event to its operation.
    fn drain(&mut self, i: usize) {
        while let Some(t) = self.nodes[i].poll_transmit() {
            let to = t.to().index();
            assert!(to < self.n && to != i, "node {i} sent a message to node {to}: {:?}", t.message());
            let bytes = t.to_frame();
            assert!(
                !bytes.is_empty() && bytes.len() <= self.cfg.frame_len_max,
                "node {i} sent a frame of {} bytes (frame_len_max {}): {:?}",
                bytes.len(),
                self.cfg.frame_len_max,
                t.message()
            );
            let relocated: Vec<Key> = match t.message() {
                Message::Relocate { moved, .. } => moved.iter().map(|m| m.key).collect(),
                Message::SyncReply { relocated, .. } => relocated.iter().map(|m| m.key).collect(),
                _ => Vec::new(),
            };
            for k in &relocated {
                self.in_flight[k.0 as usize] += 1;
            }
            self.queues[i * self.n + to].push_back(Frame { bytes, relocated });
            self.frames += 1;
            assert!(self.frames <= FRAMES_MAX, "more than {FRAMES_MAX} frames in flight: a message storm");
        }
        while let Some(ev) = self.nodes[i].poll_event() {
            self.complete(i, ev);
        }
        // After every event: a request that ended with the gate's pass has completed.
        for (i, worker, clock) in core::mem::take(&mut self.passed) {
            self.check_bounded_delay(i, worker, clock);
        }
    }

    // ----- workers -----

    fn command(&mut self, kind: u8, b: &mut Bytes<'_>) {
        let p = b.u8();
        let i = usize::from(p) % self.n;
        let worker = WorkerId(u16::from(p >> 2) % self.cfg.workers_per_node);
        let local_first = p & 0x80 != 0;
        let mut keys: Vec<Key> = Vec::new();
        for _ in 0..1 + ((p >> 4) & 7) % 3 {
            let k = Key(u64::from(b.u8()) % KEYS);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let write = match kind {
            8 | 9 => Some(WriteKind::Add),
            10 => Some(WriteKind::Set),
            _ => None,
        };
        let window = (kind == 12).then(|| b.u8());
        let values: Vec<f32> = match write {
            Some(_) => keys
                .iter()
                .flat_map(|_| {
                    let x = b.u8();
                    [f32::from(x & 7), f32::from((x >> 3) & 7)]
                })
                .collect(),
            None => Vec::new(),
        };
        // The driver holds its workers back while it cannot send (as the runtime does), and a
        // worker waiting at its gate issues nothing.
        let blocked = (0..self.n).any(|j| self.queues[i * self.n + j].len() >= QUEUE_MAX);
        if blocked || !self.nodes[i].wants_input() || self.waits(i, worker) {
            return;
        }
        match (kind, write, window) {
            (6 | 7, _, _) => self.pull(i, worker, keys, local_first),
            (_, Some(write), _) => self.push(i, worker, write, keys, values, local_first),
            (_, _, Some(x)) => self.intent(i, worker, &keys, x),
            _ => self.localize(i, worker, keys, local_first),
        }
        self.drain(i);
    }

    /// Worker intent for `keys` in a window that byte `x` places from the worker's clock.
    fn intent(&mut self, i: usize, worker: WorkerId, keys: &[Key], x: u8) {
        let c = self.nodes[i].clock(worker).0;
        let start = c.saturating_add(u64::from(x % 8));
        let end = start.saturating_add(1 + u64::from((x >> 3) % 8));
        let now = self.now[i];
        match self.nodes[i].intent(now, worker, keys, Clock(start), Clock(end), IntentKind::ReadWrite) {
            Ok(()) => {}
            Err(OpError::Busy) => {
                let (intents, intent_keys) = self.nodes[i].intents_kept();
                assert!(
                    intents >= self.cfg.intents_max || intent_keys + keys.len() > self.cfg.intent_keys_max,
                    "node {i} refused an intent as Busy below its bounds"
                );
            }
            Err(e) => panic!("node {i} refused an intent for {keys:?} with {e:?}"),
        }
    }

    /// A worker's clock step (see the module docs).
    fn clock_step(&mut self, p: u8) {
        let i = usize::from(p) % self.n;
        let worker = WorkerId(u16::from(p >> 2) % self.cfg.workers_per_node);
        let now = self.now[i];
        if self.waits(i, worker) {
            return;
        }
        let gate = p & 0x40 != 0;
        match (p >> 4) % 4 {
            0 if gate => self.gate(i, worker),
            1 => {
                let before = self.nodes[i].clock(worker);
                let r = self.nodes[i].advance_clock(now, worker);
                assert_eq!(r, Ok(Clock(before.0 + 1)), "node {i}: advance_clock of {worker}");
                if gate {
                    self.gate(i, worker);
                }
            }
            2 => {
                if !self.nodes[i].wants_input() {
                    return;
                }
                let ticket = self.ticket();
                let node = &mut self.nodes[i];
                let path = &mut self.paths[i][worker.index()];
                let r = match path.other_via(ticket, || node.wait_sync(now, worker, ticket)) {
                    Ok(Issue::Held(_) | Issue::Refused(_, OpError::Busy)) => return,
                    Ok(Issue::Refused(_, e)) => Err(e),
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                };
                self.issued(i, worker, ticket, r, OpKind::Sync);
            }
            3 => {
                let r = self.nodes[i].end_intents(now, worker);
                assert_eq!(r, Ok(()), "node {i}: end_intents of {worker}");
            }
            _ => return,
        }
        self.drain(i);
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    fn pull(&mut self, i: usize, worker: WorkerId, keys: Vec<Key>, local_first: bool) {
        let ticket = self.ticket();
        let now = self.now[i];
        let mut vals = alloc::vec![0.0; keys.len() * LEN];
        let path = &mut self.paths[i][worker.index()];
        let issued = path.pull_via(&mut self.nodes[i], now, worker, ticket, &keys, &mut vals, local_first);
        let (misses, r) = match issued {
            Ok(Issue::Held(_)) => return,
            Ok(Issue::Local(m) | Issue::Sent(m)) => (m, Ok(())),
            Ok(Issue::Refused(m, e)) => (m, Err(e)),
            Err(e) => panic!("node {i} refused a pull of {keys:?} with {e:?}"),
        };
        let remote: Vec<usize> = misses.positions().collect();
        let bound = self.gate_bound(i, worker);
        for (j, k) in keys.iter().enumerate().filter(|(j, _)| !remote.contains(j)) {
            let lower = self.lower(i, worker, *k);
            self.check_read(*k, &vals[j * LEN..(j + 1) * LEN], &lower, bound);
        }
        if remote.is_empty() {
            return;
        }
        let keys = misses.keys().to_vec();
        let lower = keys.iter().flat_map(|k| self.lower(i, worker, *k)).collect();
        self.issued(i, worker, ticket, r, OpKind::Pull { keys, lower, bound });
    }

    /// What a pull of `k` by `worker` of node `i` must at least read, per float (unless the
    /// key was set or is replicated): every add completed when it was issued, and every add
    /// the worker itself issued before it (invariant 4).
    fn lower(&self, i: usize, worker: WorkerId, k: Key) -> [f32; LEN] {
        let m = &self.keys[k.0 as usize];
        // An own add that failed (timed out) may never have been applied.
        let own = if m.uncertain { [0.0; LEN] } else { m.own.get(&(i, worker)).copied().unwrap_or_default() };
        core::array::from_fn(|e| m.done[e].max(own[e]))
    }

    fn push(
        &mut self,
        i: usize,
        worker: WorkerId,
        write: WriteKind,
        keys: Vec<Key>,
        values: Vec<f32>,
        local_first: bool,
    ) {
        let ticket = self.ticket();
        let now = self.now[i];
        let clock = self.nodes[i].clock(worker).0;
        let path = &mut self.paths[i][worker.index()];
        let issued =
            path.write_via(&mut self.nodes[i], now, worker, ticket, write, &keys, &values, local_first);
        let (misses, r) = match issued {
            Ok(Issue::Held(_)) => return,
            Ok(Issue::Local(m) | Issue::Sent(m)) => (m, Ok(())),
            Ok(Issue::Refused(m, e)) => (m, Err(e)),
            Err(e) => panic!("node {i} refused a write to {keys:?} with {e:?}"),
        };
        // The keys the store took, and (if the node took the rest) the keys sent.
        for (k, v) in keys.iter().zip(values.chunks(LEN)) {
            let sent = misses.keys().contains(k);
            let m = &mut self.keys[k.0 as usize];
            match write {
                WriteKind::Set if !sent || r.is_ok() => m.sets += 1,
                WriteKind::Set => {}
                WriteKind::Add => {
                    if !sent {
                        add(&mut m.done, v);
                    }
                    if !sent || r.is_ok() {
                        add(&mut m.issued, v);
                        add(m.own.entry((i, worker)).or_default(), v);
                        add(m.at.entry(clock).or_default(), v);
                    }
                }
            }
        }
        if misses.is_empty() {
            return;
        }
        let (keys, values) = misses.into_parts();
        let kind = OpKind::Write { write, keys, values };
        self.issued(i, worker, ticket, r, kind);
    }

    fn localize(&mut self, i: usize, worker: WorkerId, keys: Vec<Key>, local_first: bool) {
        let ticket = self.ticket();
        let now = self.now[i];
        let path = &mut self.paths[i][worker.index()];
        let (keys, r) = match path.localize_via(&mut self.nodes[i], now, worker, ticket, &keys, local_first) {
            Ok(Issue::Held(_)) => return,
            Ok(Issue::Local(_)) => {
                // Nothing to move: under relocation every key is held here already.
                let store = self.nodes[i].store();
                let technique = self.cfg.technique;
                assert!(
                    !technique.uses_localize() || keys.iter().all(|k| store.holds(*k)),
                    "node {i}: a localize of {keys:?} completed in the worker's call"
                );
                return;
            }
            Ok(Issue::Sent(sent)) => (sent, Ok(())),
            Ok(Issue::Refused(sent, e)) => (sent, Err(e)),
            Err(e) => panic!("node {i} refused a localize of {keys:?} with {e:?}"),
        };
        self.issued(i, worker, ticket, r, OpKind::Localize { keys });
    }

    fn issued(&mut self, i: usize, worker: WorkerId, ticket: Ticket, r: Result<(), OpError>, kind: OpKind) {
        match r {
            Ok(()) => {
                let clock = self.nodes[i].clock(worker).0;
                self.ops.insert(ticket, Op { node: i, worker, issued: self.now[i], clock, kind });
            }
            Err(OpError::Busy) => assert!(
                self.nodes[i].pending_requests() >= self.cfg.requests_pending_max,
                "node {i} refused {kind:?} as Busy below its request bound"
            ),
            Err(OpError::StoreFull) if matches!(kind, OpKind::Localize { .. }) => {}
            Err(e) => panic!("node {i} refused {kind:?} with {e:?}"),
        }
    }

    /// A value read (by a pull) of a key: within what the adds so far allow (see
    /// [`Cluster::lower`]), and with every add issued at a clock below `bound` (the gate's
    /// promise, [`Cluster::check_gate_read`]).
    fn check_read(&self, k: Key, v: &[f32], lower: &[f32], bound: u64) {
        let m = &self.keys[k.0 as usize];
        if m.sets > 0 {
            return;
        }
        self.check_gate_read(k, v, bound);
        // A replica may be a round old: only the upper bound holds for what it shows.
        let replicas = self.cfg.technique.uses_replicas();
        for e in 0..LEN {
            assert!(
                (replicas || lower[e] <= v[e]) && v[e] <= m.issued[e],
                "key {k} read as {v:?}: adds completed before the read began sum to {lower:?}, adds issued \
                 before it ended to {:?}",
                m.issued
            );
        }
    }

    fn complete(&mut self, i: usize, ev: Event) {
        let (worker, ticket, result) = ev.into_parts();
        let Some(op) = self.ops.remove(&ticket) else {
            panic!("node {i} completed ticket {ticket:?}, which is not under way: {result:?}")
        };
        assert_eq!((op.node, op.worker), (i, worker), "{op:?} completed at node {i}, worker {worker}");
        if let OpKind::Gate = op.kind {
            self.gate_ended(i, worker, ticket, op.clock, result);
            return;
        }
        assert!(
            self.paths[i][worker.index()].complete(ticket),
            "node {i} completed {ticket:?}, which worker {worker}'s access path did not send"
        );
        let timeout = self.cfg.request_timeout;
        match (&op.kind, &result) {
            (_, Err(OpError::Timeout)) => {
                assert!(self.now[i] >= op.issued + timeout, "{op:?} timed out at {:?}, early", self.now[i]);
                assert!(
                    !self.healing,
                    "{op:?} timed out during the heal, with every frame delivered: it was stuck"
                );
                if let OpKind::Write { keys, .. } = &op.kind {
                    for k in keys {
                        self.keys[k.0 as usize].uncertain = true;
                    }
                }
            }
            (_, Err(e)) => panic!("{op:?} failed with {e:?} at node {i}"),
            (OpKind::Pull { keys, lower, bound }, Ok(Completion::Pull(values))) => {
                assert_eq!(values.len(), keys.len() * LEN, "{op:?} completed with {values:?}");
                for (j, k) in keys.iter().enumerate() {
                    let (v, l) = (&values[j * LEN..(j + 1) * LEN], &lower[j * LEN..(j + 1) * LEN]);
                    self.check_read(*k, v, l, *bound);
                }
            }
            (OpKind::Write { write, keys, values }, Ok(Completion::Write)) => {
                if *write == WriteKind::Add {
                    for (k, v) in keys.iter().zip(values.chunks(LEN)) {
                        add(&mut self.keys[k.0 as usize].done, v);
                    }
                }
            }
            (OpKind::Sync, Ok(Completion::Sync)) => {}
            (OpKind::Localize { keys }, Ok(Completion::Localize)) => {
                // A key that arrived is here when the localize completes (it may leave again
                // later, so only a localize of one key says where that key is).
                if self.cfg.technique == Technique::Relocation && keys.len() == 1 {
                    assert!(
                        self.nodes[i].store().holds(keys[0]),
                        "{op:?} completed at node {i}, which does not hold the key"
                    );
                }
            }
            _ => panic!("{op:?} completed with {result:?}"),
        }
    }

    // ----- time -----

    /// Node `i`'s clock moves on by `d`, and it handles every timer due on the way, each at its
    /// time (as the drain contract asks).
    fn advance(&mut self, i: usize, d: Duration) {
        let target = self.now[i] + d;
        for _ in 0..TIMER_ROUNDS_MAX {
            match self.nodes[i].poll_timeout() {
                Some(t) if t <= target => {
                    self.now[i] = self.now[i].max(t);
                    self.nodes[i].handle_timeout(self.now[i]);
                    self.drain(i);
                }
                _ => break,
            }
        }
        self.now[i] = target;
        self.nodes[i].handle_timeout(target);
        self.drain(i);
        // A request fails within one scan interval (an eighth of the timeout) of its deadline.
        let timeout = self.cfg.request_timeout;
        let late = Duration(timeout.as_micros() + timeout.as_micros() / 8);
        // A wait at the gate has no deadline: it lasts until the other workers are far enough.
        let overdue =
            |op: &&Op| op.node == i && op.issued + late <= target && !matches!(op.kind, OpKind::Gate);
        if let Some(op) = self.ops.values().find(overdue) {
            panic!("{op:?} is still under way at node {i} at {target:?}, past its deadline");
        }
    }

    // ----- checks -----

    fn check(&self) {
        for (i, node) in self.nodes.iter().enumerate() {
            if let Err(v) = node.check_invariants() {
                panic!(
                    "node {i}: {v} stats {:?} replica_keys {:?} store replicas {}",
                    node.stats(),
                    node.replica_keys(),
                    node.store().replicas_held()
                );
            }
            let s = node.stats();
            assert_eq!(s.frames_rejected, 0, "node {i} dropped a frame");
            assert_eq!(s.messages_rejected, 0, "node {i} rejected a message: {s:?}");
        }
        for k in 0..KEYS {
            let holders: Vec<usize> = (0..self.n).filter(|i| self.nodes[*i].store().holds(Key(k))).collect();
            let flying = self.in_flight[k as usize] as usize;
            assert!(
                holders.len() + flying == 1,
                "key {k} is held by nodes {holders:?} and in flight in {flying} relocations"
            );
        }
    }
}

fn add(sum: &mut [f32; LEN], v: &[f32]) {
    for (s, x) in sum.iter_mut().zip(v) {
        *s += *x;
    }
}
