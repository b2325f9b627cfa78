//! Intent signaling, sync rounds, replicas and the owner's decisions (AdaPM, adapm-cikm23.txt
//! §4 and Appendix B), and the techniques that share this machinery.
//!
//! **Intents.** Each worker's intents wait in a heap ordered by start clock. At the start of
//! every sync round, action timing ([`crate::timing::ActionTimer`], Algorithm 1) says which of
//! them to act on; acted intents move to a heap ordered by end clock and raise a per-key count;
//! when a worker's clock reaches an intent's end, the count drops. Only the transitions of the
//! count (0 to positive: "this node has intent"; back to 0: "no more") reach the key's owner.
//!
//! **Rounds.** A round sends one grouped [`Message::Sync`] per peer: intent starts and ends,
//! every replica's version and delta, and ownership changes for the peer as home node. Owners
//! answer with one grouped [`Message::SyncReply`]: moved keys, new or refreshed replicas,
//! acknowledgements. Entries for keys the receiver does not own are forwarded like requests
//! (the same routing, hop limit and pointers), and answered by the owner directly. A round ends
//! when every entry is answered; the next starts at once (or after the configured minimum
//! period; after an idle interval if a round had nothing to send). At most one entry per key is
//! outstanding, so a replica's delta is never in flight twice.
//!
//! **Decisions** (at the owner, which holds the key's main copy and decides for it):
//! - adaptive: a node whose intent starts gets the key moved to it if no other node has intent
//!   (the owner itself included) and no other node holds a replica; else a replica. A replica
//!   holder that is the only node left with intent gets the key moved to it in the answer to
//!   its next sync (its replica becomes the main copy). Keys never move while other replicas
//!   exist, so a replica's owner is fixed for the replica's life.
//! - without replication: every start moves the key (a node that loses a key it still has
//!   intent for asks again next round);
//! - without relocation, full replication, NuPS's hot keys: every start gets a replica.
//!
//! **Replicas.** A holder adds local updates to its copy and to an unsent delta. Each round it
//! sends the delta with the version of its last refresh; the owner merges it (one more version)
//! and answers with its value if the versions differ. The holder sets its copy to that value
//! plus what was added locally since the delta was taken, so every update is counted once.
//! When the holder's intent ends it drops the replica and sends the delta as its last.
//!
//! **Per-key state** is in hash tables (`super::keymap`), hashed without a random seed so that
//! a replayed run is the same run. A key's intent count and the state of its entries (slot
//! reserved, entry outstanding, final delta on its way) share one 8-byte record, so that a
//! round and its answer look a key up once. Every order that reaches a message is key order: the keys of
//! a round are sorted (only those that need a message), and so are the replicas synced in it.

use alloc::collections::{BTreeMap, BTreeSet, BinaryHeap};
use alloc::vec::Vec;
use core::cmp::Ordering;

use hashbrown::hash_map::Entry;

use super::forward::Budget;
use super::keymap::{self, KeyMap};
use super::{Node, HOPS_MAX};
use crate::config::Technique;
use crate::error::OpError;
use crate::ids::{Clock, Key, NodeId, Ticket, WorkerId};
use crate::store::Whereabouts;
use crate::time::{Duration, Instant};
use crate::timing::ActionTimer;
use crate::wire::{Message, Moved, OwnerChange, Refresh, ReplicaSync};

/// Bytes a sync entry may take besides its value, generously.
const ENTRY_BYTES: usize = 32;

/// Largest buffer (in entries) a round keeps for the next one; a larger one is freed, so that
/// one round that touched a million keys does not pin its buffer for the rest of the run.
const BUFFER_KEEP_MAX: usize = 1 << 16;

/// How a worker says it will access the keys of an intent. Recorded in the statistics; the
/// decisions treat every kind alike (as AdaPM does: a single remote read is already worth a
/// local copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IntentKind {
    /// Reads and writes (the usual case in training).
    #[default]
    ReadWrite,
    /// Reads only.
    Read,
    /// Writes only.
    Write,
}

/// An intent a worker signaled and the node has not acted on yet.
#[derive(Debug)]
struct Future {
    start: Clock,
    end: Clock,
    seq: u64,
    keys: Vec<Key>,
}

/// An intent the node acts on, until the worker's clock reaches its end.
#[derive(Debug)]
struct Acted {
    end: Clock,
    seq: u64,
    keys: Vec<Key>,
}

// Min-heaps: the smallest start (or end) on top, ties by signal order.
impl Ord for Future {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.start, o.seq).cmp(&(self.start, self.seq))
    }
}
impl PartialOrd for Future {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Future {
    fn eq(&self, o: &Self) -> bool {
        (self.start, self.seq) == (o.start, o.seq)
    }
}
impl Eq for Future {}
impl Ord for Acted {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.end, o.seq).cmp(&(self.end, self.seq))
    }
}
impl PartialOrd for Acted {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Acted {
    fn eq(&self, o: &Self) -> bool {
        (self.end, self.seq) == (o.end, o.seq)
    }
}
impl Eq for Acted {}

#[derive(Debug, Default)]
struct WorkerIntents {
    clock: Clock,
    future: BinaryHeap<Future>,
    acted: BinaryHeap<Acted>,
}

/// This node's sync state for one key: its aggregated intent, and where the key's entries
/// stand. A key has a record only while some field differs from the default.
///
/// Eight bytes, as the intent count alone took before the flags joined it: the record is
/// touched on every key-intent, the flags only when an entry is made or answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KeySync {
    /// Acted, unexpired intents (plus one for a key replicated for the whole run).
    count: u32,
    /// 1 + the node a final delta of this key is on its way to (0: none). The replica was
    /// dropped this round: this node's requests for the key go there too, behind the delta
    /// (per-pair FIFO), so a worker's read after its last update through the replica still
    /// sees it. (Node ids are below `u16::MAX`.)
    final_to: u16,
    /// `ANNOUNCED`, `RESERVED`, `OUTSTANDING`.
    flags: u8,
}

/// The owner was told of this node's intent (a start was sent and no end since).
const ANNOUNCED: u8 = 1;
/// A store slot is reserved for the key's main copy, which the answer to a start (or to an
/// upgrade offer) may bring.
const RESERVED: u8 = 2;
/// An entry of the open round waits for its answer. At most one per key, so a replica's
/// delta is never in flight twice.
const OUTSTANDING: u8 = 4;

impl KeySync {
    fn is_idle(&self) -> bool {
        *self == KeySync::default()
    }
    fn announced(&self) -> bool {
        self.flags & ANNOUNCED != 0
    }
    fn reserved(&self) -> bool {
        self.flags & RESERVED != 0
    }
    fn outstanding(&self) -> bool {
        self.flags & OUTSTANDING != 0
    }
    fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }
    fn final_to(&self) -> Option<NodeId> {
        self.final_to.checked_sub(1).map(NodeId)
    }
    fn set_final_to(&mut self, to: Option<NodeId>) {
        self.final_to = to.map_or(0, |n| n.0.saturating_add(1));
    }
}

/// As owner: the nodes holding replicas of one key, without an allocation for up to three
/// (a key replicated to every node of a large cluster spills into a vector).
#[derive(Clone, Debug)]
enum Holders {
    Few { len: u8, nodes: [NodeId; 3] },
    Many(Vec<NodeId>),
}

impl Default for Holders {
    fn default() -> Holders {
        Holders::Few { len: 0, nodes: [NodeId(0); 3] }
    }
}

impl Holders {
    fn as_slice(&self) -> &[NodeId] {
        match self {
            Holders::Few { len, nodes } => &nodes[..usize::from(*len)],
            Holders::Many(v) => v,
        }
    }

    /// Adds `node` unless it is in already.
    fn insert(&mut self, node: NodeId) {
        if self.as_slice().contains(&node) {
            return;
        }
        match self {
            Holders::Few { len, nodes } if usize::from(*len) < nodes.len() => {
                nodes[usize::from(*len)] = node;
                *len += 1;
            }
            Holders::Few { nodes, .. } => {
                let mut v = nodes.to_vec();
                v.push(node);
                *self = Holders::Many(v);
            }
            Holders::Many(v) => v.push(node),
        }
    }

    /// Removes `node`; whether none is left.
    fn remove(&mut self, node: NodeId) -> bool {
        match self {
            Holders::Few { len, nodes } => {
                let n = usize::from(*len);
                if let Some(i) = nodes[..n].iter().position(|h| *h == node) {
                    nodes.copy_within(i + 1..n, i);
                    *len -= 1;
                }
                *len == 0
            }
            Holders::Many(v) => {
                v.retain(|n| *n != node);
                v.is_empty()
            }
        }
    }
}

/// The per-key records, with counts of the reserved and outstanding ones.
#[derive(Debug, Default)]
struct Keys {
    map: KeyMap<KeySync>,
    reserved: usize,
    outstanding: usize,
}

impl Keys {
    /// `key`'s record (the default if it has none).
    fn get(&self, key: Key) -> KeySync {
        self.map.get(&key).copied().unwrap_or_default()
    }

    /// Changes `key`'s record with `f`, keeping the counts, and drops it if it became idle.
    /// Returns what `f` returns.
    #[inline]
    fn update<R>(&mut self, key: Key, f: impl FnOnce(&mut KeySync) -> R) -> R {
        match self.map.entry(key) {
            Entry::Occupied(mut o) => {
                let e = o.get_mut();
                let (r0, o0) = (e.reserved(), e.outstanding());
                let r = f(e);
                let (r1, o1) = (e.reserved(), e.outstanding());
                if e.is_idle() {
                    o.remove();
                }
                self.recount(r0, r1, o0, o1);
                r
            }
            Entry::Vacant(v) => {
                let mut e = KeySync::default();
                let r = f(&mut e);
                if !e.is_idle() {
                    v.insert(e);
                }
                self.recount(false, e.reserved(), false, e.outstanding());
                r
            }
        }
    }

    fn recount(&mut self, r0: bool, r1: bool, o0: bool, o1: bool) {
        self.reserved = self.reserved + usize::from(r1) - usize::from(r0);
        self.outstanding = self.outstanding + usize::from(o1) - usize::from(o0);
    }

    /// Forgets `key`'s intent (count and announcement), keeping the rest of its record.
    fn forget_intent(&mut self, key: Key) {
        self.update(key, |e| {
            e.count = 0;
            e.set(ANNOUNCED, false);
        });
    }

    /// Clears `key`'s reservation; whether it had one.
    fn take_reserved(&mut self, key: Key) -> bool {
        self.update(key, |e| {
            let had = e.reserved();
            e.set(RESERVED, false);
            had
        })
    }

    /// Marks an entry for `key` outstanding in the open round.
    fn set_outstanding(&mut self, key: Key) {
        self.update(key, |e| e.set(OUTSTANDING, true));
    }
}

/// A touched key that needs an entry in the round's messages (see `Node::settle_quiet`).
#[derive(Clone, Copy, Debug)]
struct Kept {
    key: Key,
    /// The node its entry goes to, where known already.
    to: Option<NodeId>,
}

/// A replica this node holds.
#[derive(Clone, Copy, Debug)]
struct ReplicaMeta {
    /// The owner it synchronizes with (fixed while replicas exist).
    owner: NodeId,
    /// When it was last refreshed or found up to date.
    refreshed: Instant,
}

/// What a decision does with a start or sync entry at the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Adaptive,
    Relocate,
    Replicate,
}

/// A worker waiting in `wait_sync`.
#[derive(Clone, Copy, Debug)]
struct SyncWaiter {
    worker: WorkerId,
    ticket: Ticket,
    rounds: u64,
    deadline: Instant,
}

/// One grouped sync request being built for a peer.
#[derive(Debug, Default)]
struct SyncOut {
    starts: Vec<Key>,
    ends: Vec<Key>,
    replicas: Vec<ReplicaSync>,
    deltas: Vec<f32>,
    owners: Vec<OwnerChange>,
}

/// One grouped answer being built for an origin.
#[derive(Debug, Default)]
struct ReplyOut {
    relocated: Vec<Moved>,
    relocated_values: Vec<f32>,
    refreshed: Vec<Refresh>,
    refreshed_values: Vec<f32>,
    acks: Vec<Key>,
    failed: Vec<Key>,
}

/// The node's state for intents, rounds and replicas.
pub(super) struct SyncState {
    timer: ActionTimer,
    workers: Vec<WorkerIntents>,
    seq: u64,
    intents: usize,
    intent_keys: usize,
    /// Every key with intent here, a reserved slot, or an entry in the open round.
    keys: Keys,
    /// Keys whose aggregated intent changed, or that need another try, at the next round. A key
    /// may be in it more than once; the round sorts it and drops the repeats.
    touched: Vec<Key>,
    /// The touched keys a round makes entries for (a buffer kept from round to round).
    kept: Vec<Kept>,
    replicas: KeyMap<ReplicaMeta>,
    /// As owner, under the adaptive technique: the other nodes holding replicas of each key.
    holders: KeyMap<Holders>,
    /// Keys that moved here, with the number of rounds this node had completed then. A key
    /// moves on only after one more round here: requests that trail it (forwarded along its
    /// path, at most about a round behind) then catch it instead of chasing it from node to
    /// node while several nodes ask for it in turn.
    arrived: KeyMap<(u64, Instant)>,
    /// The time of the latest message or timer input (for the rules that need it deep
    /// inside, where no `now` is passed).
    pub(super) now: Instant,
    /// Ownership changes for home nodes, sent with the next round.
    owner_updates: Vec<(NodeId, OwnerChange)>,
    round: u32,
    open: bool,
    /// The open round carries more than version checks of replicas with nothing to add: an
    /// intent start or end, a delta, a final delta, or an ownership change.
    dirty: bool,
    rounds_done: u64,
    started_at: Instant,
    next_at: Option<Instant>,
    permanent_done: bool,
    waiters: Vec<SyncWaiter>,
}

impl SyncState {
    pub(super) fn new(cfg: &crate::Config) -> SyncState {
        let workers = usize::from(cfg.workers_per_node);
        SyncState {
            timer: ActionTimer::new(workers, cfg.timing),
            workers: (0..workers).map(|_| WorkerIntents::default()).collect(),
            seq: 0,
            intents: 0,
            intent_keys: 0,
            keys: Keys::default(),
            touched: Vec::new(),
            kept: Vec::new(),
            replicas: KeyMap::default(),
            arrived: KeyMap::default(),
            now: Instant(0),
            holders: KeyMap::default(),
            owner_updates: Vec::new(),
            round: 0,
            open: false,
            dirty: false,
            rounds_done: 0,
            started_at: Instant(0),
            // The first round starts at the first call to `handle_timeout`.
            next_at: cfg.technique.uses_rounds().then_some(Instant(0)),
            permanent_done: false,
            waiters: Vec::new(),
        }
    }

    /// When this state next needs `handle_timeout`.
    pub(super) fn next_timeout(&self, request_timeout: Duration) -> Option<Instant> {
        let round = if self.open { Some(self.started_at + request_timeout) } else { self.next_at };
        let waiter = self.waiters.iter().map(|w| w.deadline).min();
        match (round, waiter) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Nothing open but version checks (replicas kept for the whole run check their owners
    /// every round, for ever), and the next round would find nothing else to do: no worker
    /// waiting for rounds in `wait_sync`, no ownership change to report, no key to revisit,
    /// no acted intent past its end, no intent inside its window.
    pub(super) fn is_idle(&self) -> bool {
        !(self.open && self.dirty)
            && self.waiters.is_empty()
            && self.owner_updates.is_empty()
            && self.touched.is_empty()
            && self.workers.iter().enumerate().all(|(w, wi)| {
                wi.acted.peek().is_none_or(|a| a.end > wi.clock)
                    && wi.future.peek().is_none_or(|f| f.start >= self.timer.horizon(w) && f.end > wi.clock)
            })
    }
}

/// An acted intent over `keys` is over: drops their counts and notes the keys whose count
/// reached 0.
fn release_intent(
    records: &mut Keys,
    touched: &mut Vec<Key>,
    replicas: &KeyMap<ReplicaMeta>,
    stats: &mut super::Stats,
    keys: &[Key],
) {
    for k in keys {
        // Only the count changes: the record's counts of reserved and outstanding keys hold.
        let Entry::Occupied(mut e) = records.map.entry(*k) else { continue };
        let l = e.get_mut();
        l.count = l.count.saturating_sub(1);
        if l.count == 0 {
            stats.intent_ends += 1;
            // With no start sent and no replica, there is nothing to tell the owner (the round
            // would find the same): the intent is forgotten at once.
            if l.announced() || replicas.contains_key(k) {
                touched.push(*k);
            }
            if l.is_idle() {
                e.remove();
            }
        }
    }
}

impl Node {
    // ----- worker commands -----

    /// Worker `worker` will access `keys` while its clock is in `[start, end)`. Cheap: the
    /// intent is queued and acted on in a later sync round. An intent whose window is empty or
    /// already past is accepted and ignored; under techniques without sync rounds every intent
    /// is, and so is every intent on a cluster of one node, where every key is homed here and
    /// stays here: acting on it would only count. `Busy` if the node keeps `intents_max`
    /// intents or `intent_keys_max` keys already.
    pub fn intent(
        &mut self,
        _now: Instant,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
        kind: IntentKind,
    ) -> Result<(), OpError> {
        if worker.index() >= self.sync.workers.len() {
            return Err(OpError::InvalidArgument);
        }
        if let Some(&key) = keys.iter().find(|k| !self.cfg.layout.contains(**k)) {
            return Err(OpError::KeyOutsideLayout { key });
        }
        let clock = self.sync.workers[worker.index()].clock;
        let kept = self.cfg.technique.uses_rounds()
            && self.cfg.nodes > 1
            && start < end
            && clock < end
            && !keys.is_empty();
        let s = &mut self.sync;
        if kept
            && (s.intents >= self.cfg.intents_max || s.intent_keys + keys.len() > self.cfg.intent_keys_max)
        {
            return Err(OpError::Busy);
        }
        self.stats.intents_by_kind[kind as usize] += 1;
        self.stats.intents_signaled += 1;
        self.stats.intent_keys_signaled += keys.len() as u64;
        if !kept {
            return Ok(());
        }
        s.intents += 1;
        s.intent_keys += keys.len();
        s.seq += 1;
        let seq = s.seq;
        s.workers[worker.index()].future.push(Future { start, end, seq, keys: keys.to_vec() });
        Ok(())
    }

    /// Advances `worker`'s clock by one and returns the new clock.
    pub fn advance_clock(&mut self, _now: Instant, worker: WorkerId) -> Result<Clock, OpError> {
        let w = self.sync.workers.get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        w.clock = Clock(w.clock.0.saturating_add(1));
        Ok(w.clock)
    }

    /// Ends every intent of `worker`, waiting or acted on, as if its clock had passed them all
    /// (a worker that finishes). The next round tells the owners and drops replicas that no
    /// other intent of this node needs, with their final deltas.
    pub fn end_intents(&mut self, _now: Instant, worker: WorkerId) -> Result<(), OpError> {
        let s = &mut self.sync;
        let wi = s.workers.get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        for f in core::mem::take(&mut wi.future) {
            s.intents -= 1;
            s.intent_keys -= f.keys.len();
        }
        for a in core::mem::take(&mut wi.acted) {
            release_intent(&mut s.keys, &mut s.touched, &s.replicas, &mut self.stats, &a.keys);
            s.intents -= 1;
            s.intent_keys -= a.keys.len();
        }
        Ok(())
    }

    /// `worker`'s clock (0 for an unknown worker).
    pub fn clock(&self, worker: WorkerId) -> Clock {
        self.sync.workers.get(worker.index()).map_or(Clock(0), |w| w.clock)
    }

    /// Completes with [`super::Completion::Sync`] after two more sync rounds have ended (at
    /// once under techniques without rounds); fails with `Timeout` after the request timeout.
    pub fn wait_sync(&mut self, now: Instant, worker: WorkerId, ticket: Ticket) -> Result<(), OpError> {
        if worker.index() >= self.sync.workers.len() {
            return Err(OpError::InvalidArgument);
        }
        if !self.cfg.technique.uses_rounds() {
            self.complete(worker, ticket, Ok(super::Completion::Sync));
            return Ok(());
        }
        if self.sync.waiters.len() >= 4 * self.sync.workers.len() {
            return Err(OpError::Busy);
        }
        // A round already open started before the call: it does not count.
        let rounds = self.sync.rounds_done + 2 + u64::from(self.sync.open);
        let deadline = now + self.cfg.request_timeout;
        self.sync.waiters.push(SyncWaiter { worker, ticket, rounds, deadline });
        Ok(())
    }

    // ----- getters -----

    /// Sync rounds this node has completed.
    pub fn sync_rounds_done(&self) -> u64 {
        self.sync.rounds_done
    }

    /// Whether this node has (acted-on, unexpired) intent for `key`.
    pub fn has_intent(&self, key: Key) -> bool {
        self.sync.keys.get(key).count > 0
    }

    /// Replicas this node holds, in key order.
    pub fn replica_keys(&self) -> Vec<Key> {
        sorted(self.sync.replicas.keys().copied().collect())
    }

    /// As owner: the nodes holding replicas of `key` (adaptive technique only).
    pub fn replica_holders(&self, key: Key) -> Vec<NodeId> {
        self.sync.holders.get(&key).map_or_else(Vec::new, |h| h.as_slice().to_vec())
    }

    /// The keys of this node's open sync round still waiting for an answer, in key order.
    pub fn sync_outstanding(&self) -> Vec<Key> {
        sorted(self.sync.keys.map.iter().filter(|(_, e)| e.outstanding()).map(|(k, _)| *k).collect())
    }

    /// Store slots reserved for keys this node's sync starts asked for (counted from the
    /// records, for checks).
    pub(super) fn sync_reserved(&self) -> usize {
        self.sync.keys.map.values().filter(|e| e.reserved()).count()
    }

    /// Intents kept (waiting or acted on), and the keys in them.
    pub fn intents_kept(&self) -> (usize, usize) {
        (self.sync.intents, self.sync.intent_keys)
    }

    // ----- timers -----

    pub(super) fn sync_timeout(&mut self, now: Instant) {
        if !self.cfg.technique.uses_rounds() {
            return;
        }
        // Waiters past their deadline fail.
        let mut i = 0;
        while i < self.sync.waiters.len() {
            if self.sync.waiters[i].deadline <= now {
                let w = self.sync.waiters.swap_remove(i);
                self.stats.ops_failed += 1;
                self.complete(w.worker, w.ticket, Err(OpError::Timeout));
            } else {
                i += 1;
            }
        }
        if self.sync.open && self.sync.started_at + self.cfg.request_timeout <= now {
            self.abandon_round(now);
        }
        if !self.sync.open && self.sync.next_at.is_some_and(|t| t <= now) {
            self.start_round(now);
        }
    }

    /// Gives up on the open round: its answers may never come (a peer failed, or they are
    /// late). Late answers are still applied when they arrive.
    pub(super) fn abandon_round(&mut self, now: Instant) {
        if !self.sync.open {
            return;
        }
        self.stats.sync_rounds_abandoned += 1;
        let s = &mut self.sync;
        s.keys.map.retain(|k, e| {
            if e.outstanding() {
                s.touched.push(*k);
            }
            e.set(OUTSTANDING, false);
            e.set_final_to(None);
            !e.is_idle()
        });
        s.keys.outstanding = 0;
        self.finish_round(now, true);
    }

    // ----- rounds -----

    fn policy(&self, key: Key) -> Policy {
        match self.cfg.technique {
            Technique::Adaptive => Policy::Adaptive,
            Technique::AdaptiveNoReplication => Policy::Relocate,
            Technique::MultiTechnique if !self.cfg.hot_keys.contains(&key) => Policy::Relocate,
            _ => Policy::Replicate,
        }
    }

    /// [`ReplicaSync::ROOM`] if the owner may upgrade this node's replica of `key` to the main
    /// copy: the key is managed adaptively, this node still has intent, and a store slot is
    /// reserved for it (taken now if need be; the answer gives it back unless it brings the
    /// key). Otherwise 0: the owner keeps the key, and the next round asks again.
    fn room_for_upgrade(&mut self, key: Key) -> u8 {
        if self.policy(key) != Policy::Adaptive {
            return 0;
        }
        let store = &self.store;
        let room = self.sync.keys.update(key, |e| {
            if e.count > 0 && !e.reserved() && store.reserve_slots(1) {
                e.set(RESERVED, true);
            }
            e.count > 0 && e.reserved()
        });
        if room {
            ReplicaSync::ROOM
        } else {
            0
        }
    }

    fn local_count(&self, key: Key) -> u32 {
        self.sync.keys.get(key).count
    }

    /// Keys this node keeps a replica of for the whole run (full replication, NuPS's hot keys).
    fn register_permanent(&mut self) {
        self.sync.permanent_done = true;
        let keys: Vec<Key> = match self.cfg.technique {
            Technique::FullReplication => (0..self.cfg.layout.key_end()).map(Key).collect(),
            Technique::MultiTechnique => {
                let mut k: Vec<Key> = self.cfg.hot_keys.iter().copied().collect();
                k.sort_unstable();
                k
            }
            _ => return,
        };
        for k in keys {
            if self.home(k) != self.me {
                self.sync.keys.update(k, |e| e.count += 1);
                self.sync.touched.push(k);
            }
        }
    }

    /// Starts a sync round: action timing, aggregation, and one grouped request per peer.
    fn start_round(&mut self, now: Instant) {
        let s = &mut self.sync;
        s.round = s.round.wrapping_add(1);
        s.started_at = now;
        s.next_at = None;
        self.stats.sync_rounds += 1;
        if !self.sync.permanent_done {
            self.register_permanent();
        }
        self.act_on_intents();

        // Staleness of every replica, sampled at the start of the round.
        for meta in self.sync.replicas.values() {
            let age = now.saturating_since(meta.refreshed).as_micros();
            self.stats.staleness_sum_us += age;
            self.stats.staleness_samples += 1;
            self.stats.staleness_max_us = self.stats.staleness_max_us.max(age);
        }

        let mut out: BTreeMap<NodeId, SyncOut> = BTreeMap::new();
        self.drop_replicas_of_failed_owners();
        let touched = core::mem::take(&mut self.sync.touched);
        let kept = self.settle_quiet(&touched);
        recycle(&mut self.sync.touched, touched);
        for &Kept { key: k, to } in &kept {
            let l = self.sync.keys.get(k);
            if l.count > 0 {
                // Not here: `settle_quiet` took the keys that are, and nothing in this loop
                // brings a key here. The answer may be the key itself: make sure there is
                // room for it.
                let to = to.unwrap_or_else(|| self.route(k));
                if self.failed_peers.contains(&to) {
                    // The key's way leads through a failed node: accesses will fail with
                    // `PeerFailed`; asking again every round would only spin. A slot reserved
                    // for an answer the failed node will never give goes back.
                    self.stats.starts_abandoned += 1;
                    self.release_reservation(k);
                    continue;
                }
                let reserve = self.cfg.technique.moves_keys() && !l.reserved();
                if reserve && !self.store.reserve_slots(1) {
                    self.stats.starts_deferred += 1;
                    self.sync.touched.push(k);
                    continue;
                }
                out.entry(to).or_default().starts.push(k);
                self.sync.keys.update(k, |e| {
                    e.flags |= OUTSTANDING | ANNOUNCED | (if reserve { RESERVED } else { 0 });
                });
                continue;
            }
            // The intent ended: the replica goes with its final delta, or the owner hears of
            // the end; either entry is outstanding until answered.
            let (mut outstanding, mut final_to) = (false, None);
            if let Some(meta) = self.sync.replicas.remove(&k) {
                let o = out.entry(meta.owner).or_default();
                if let Some(t) = self.store.drop_replica(k, &mut o.deltas) {
                    let flags = ReplicaSync::FINAL | if t.nonzero { ReplicaSync::DELTA } else { 0 };
                    o.replicas.push(ReplicaSync { key: k, version: t.version, flags });
                    (outstanding, final_to) = (true, Some(meta.owner));
                    self.stats.replicas_destroyed += 1;
                    self.stats.deltas_sent += u64::from(t.nonzero);
                }
            } else if l.announced() {
                let to = to.unwrap_or_else(|| self.route(k));
                if !self.failed_peers.contains(&to) {
                    out.entry(to).or_default().ends.push(k);
                    outstanding = true;
                } else {
                    self.release_reservation(k);
                }
            }
            self.sync.keys.update(k, |e| {
                e.count = 0;
                e.set(ANNOUNCED, false);
                if outstanding {
                    e.set(OUTSTANDING, true);
                }
                if final_to.is_some() {
                    e.set_final_to(final_to);
                }
            });
        }
        recycle(&mut self.sync.kept, kept);
        let mut replicas: Vec<(Key, NodeId)> =
            self.sync.replicas.iter().map(|(k, m)| (*k, m.owner)).collect();
        replicas.sort_unstable_by_key(|(k, _)| *k);
        for (k, owner) in replicas {
            if self.sync.keys.get(k).outstanding() {
                continue;
            }
            let room = self.room_for_upgrade(k);
            let o = out.entry(owner).or_default();
            if let Some(t) = self.store.take_delta(k, &mut o.deltas) {
                let flags = if t.nonzero { ReplicaSync::DELTA } else { 0 } | room;
                o.replicas.push(ReplicaSync { key: k, version: t.version, flags });
                self.sync.keys.set_outstanding(k);
                self.stats.deltas_sent += u64::from(t.nonzero);
            } else {
                // The store lost the replica (it became the main copy): forget it.
                self.sync.replicas.remove(&k);
            }
        }
        let updates = core::mem::take(&mut self.sync.owner_updates);
        let mine: Vec<OwnerChange> = updates.iter().filter(|(h, _)| *h == self.me).map(|(_, c)| *c).collect();
        if !mine.is_empty() {
            self.record_owners(self.me, &mine);
        }
        for &(h, c) in updates.iter().filter(|(h, _)| *h != self.me) {
            out.entry(h).or_default().owners.push(c);
        }
        recycle(&mut self.sync.owner_updates, updates);
        let sent_any = !out.is_empty();
        self.sync.dirty = out.values().any(|o| {
            !(o.starts.is_empty() && o.ends.is_empty() && o.owners.is_empty())
                || o.replicas.iter().any(|r| r.flags != 0)
        });
        let round = self.sync.round;
        let me = self.me;
        for (to, o) in out {
            self.send_sync(to, round, me, 0, o);
        }
        if self.sync.keys.outstanding == 0 {
            self.finish_round(now, sent_any);
        } else {
            self.sync.open = true;
        }
    }

    /// Replicas whose owner failed can be neither synchronized nor upgraded: they go, and
    /// their unsent updates are counted as lost (the main copy they belonged to is gone).
    fn drop_replicas_of_failed_owners(&mut self) {
        if self.failed_peers.is_empty() {
            return;
        }
        let mut gone: Vec<Key> = self
            .sync
            .replicas
            .iter()
            .filter(|(_, m)| self.failed_peers.contains(&m.owner))
            .map(|(k, _)| *k)
            .collect();
        gone.sort_unstable();
        let mut scratch = Vec::new();
        for k in gone {
            self.sync.replicas.remove(&k);
            // Its owner can no longer hand the key over: the slot kept for that goes back.
            self.release_reservation(k);
            scratch.clear();
            if let Some(t) = self.store.drop_replica(k, &mut scratch) {
                self.stats.replicas_destroyed += 1;
                self.stats.deltas_lost += u64::from(t.nonzero);
            }
        }
    }

    /// Gives back the store slot reserved for `key`'s main copy, if one is. A key that comes
    /// after all is installed without it, or sent on to its home (see `install_moved`).
    fn release_reservation(&mut self, key: Key) {
        if self.sync.keys.take_reserved(key) {
            self.store.unreserve_slots(1);
        }
    }

    /// Settles the touched keys whose change needs no message and returns the others in key
    /// order, the order their entries take in the messages, each with the node its entry goes
    /// to where the store was asked on the way. A key is quiet if it has
    /// intent and is here already, or if its intent ended with nothing to tell another node (no
    /// replica, and no start sent or the key's main copy is here). Settling one quiet key
    /// depends on no other key, so the quiet ones are settled in the order they were touched,
    /// without sorting them. Nothing the round does with one kept key changes another's state,
    /// so the routes found here still hold when its entry is made.
    fn settle_quiet(&mut self, touched: &[Key]) -> Vec<Kept> {
        let mut kept = core::mem::take(&mut self.sync.kept);
        for &k in touched {
            let l = self.sync.keys.get(k);
            if l.count > 0 {
                let Some(w) = self.store.whereabouts_if_remote(k) else { continue };
                kept.push(Kept { key: k, to: Some(self.route_with(k, w)) });
            } else if !self.sync.replicas.contains_key(&k) {
                if l.announced() {
                    let w = self.store.whereabouts(k);
                    if !matches!(w, Whereabouts::Here(_)) {
                        kept.push(Kept { key: k, to: Some(self.route_with(k, w)) });
                        continue;
                    }
                    // The key's owner is this node (the key came here for the intent, or
                    // later): the end is the owner's to apply, here and now, rather than
                    // after a trip to the key's home and back.
                    self.holder_gone(k, self.me);
                }
                self.sync.keys.forget_intent(k);
            } else {
                // Its replica goes, to the replica's owner.
                kept.push(Kept { key: k, to: None });
            }
        }
        kept.sort_unstable_by_key(|e| e.key);
        kept.dedup_by_key(|e| e.key);
        kept
    }

    /// Action timing and aggregation: expire intents whose end the worker reached, act on
    /// intents whose start is within the window; record keys whose count changed.
    fn act_on_intents(&mut self) {
        let clocks: Vec<Clock> = self.sync.workers.iter().map(|w| w.clock).collect();
        self.sync.timer.start_round(&clocks);
        for (w, &clock) in clocks.iter().enumerate() {
            let horizon = self.sync.timer.horizon(w);
            let s = &mut self.sync;
            let wi = &mut s.workers[w];
            while wi.acted.peek().is_some_and(|a| a.end <= clock) {
                let Some(a) = wi.acted.pop() else { break };
                release_intent(&mut s.keys, &mut s.touched, &s.replicas, &mut self.stats, &a.keys);
                s.intents -= 1;
                s.intent_keys -= a.keys.len();
            }
            while wi.future.peek().is_some_and(|f| f.start < horizon) {
                let Some(f) = wi.future.pop() else { break };
                if f.end <= clock {
                    self.stats.intents_expired_unacted += 1;
                    s.intents -= 1;
                    s.intent_keys -= f.keys.len();
                    continue;
                }
                for k in &f.keys {
                    // Only the count changes: the records' counts hold.
                    let l = s.keys.map.entry(*k).or_default();
                    l.count += 1;
                    if l.count == 1 {
                        self.stats.intent_starts += 1;
                        s.touched.push(*k);
                    }
                }
                wi.acted.push(Acted { end: f.end, seq: f.seq, keys: f.keys });
            }
        }
    }

    fn finish_round(&mut self, now: Instant, sent_any: bool) {
        let s = &mut self.sync;
        s.open = false;
        s.rounds_done += 1;
        let done = s.rounds_done;
        let hold = self.cfg.relocation_hold;
        s.arrived.retain(|_, (r, t)| *r + 1 >= done || *t + hold > now);
        let period = self.cfg.sync_rounds_per_sec_max.map_or(0, |r| 1_000_000 / u64::from(r.max(1)));
        // Rounds take at least a microsecond, so that time moves even where the network
        // answers instantly (loopback, simulation).
        let next = if sent_any {
            (s.started_at + Duration(period.max(1))).max(now)
        } else {
            now + self.cfg.sync_idle_interval.max(Duration(period))
        };
        s.next_at = Some(next);
        let mut ready = Vec::new();
        s.waiters.retain(|w| {
            if w.rounds <= done {
                ready.push((w.worker, w.ticket));
                false
            } else {
                true
            }
        });
        for (w, t) in ready {
            self.complete(w, t, Ok(super::Completion::Sync));
        }
    }

    /// Sends `o` to `to` as one or more sync requests within the frame and key bounds.
    fn send_sync(&mut self, to: NodeId, round: u32, origin: NodeId, hops: u8, o: SyncOut) {
        let mut budget = Budget::new(&self.cfg);
        // Usually it all fits one message: send it as it is, without copying it entry by entry.
        let delta_bytes = 4 * o.deltas.len();
        let entries = o.starts.len() + o.ends.len() + o.replicas.len() + o.owners.len();
        if budget.fits(entries, ENTRY_BYTES * entries + delta_bytes) {
            if entries > 0 {
                let SyncOut { starts, ends, replicas, deltas, owners } = o;
                self.send(to, Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners });
            }
            return;
        }
        let mut cur = SyncOut::default();
        let flush = |node: &mut Node, c: SyncOut| {
            if c.starts.len() + c.ends.len() + c.replicas.len() + c.owners.len() > 0 {
                let SyncOut { starts, ends, replicas, deltas, owners } = c;
                node.send(to, Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners });
            }
        };
        for k in o.starts {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.starts.push(k);
        }
        for k in o.ends {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.ends.push(k);
        }
        let mut at = 0;
        for r in o.replicas {
            let len = if r.has_delta() { self.cfg.layout.len_of(r.key).unwrap_or(0) } else { 0 };
            if budget.take(ENTRY_BYTES + 4 * len) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.replicas.push(r);
            cur.deltas.extend_from_slice(o.deltas.get(at..at + len).unwrap_or(&[]));
            at += len;
        }
        for c in o.owners {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.owners.push(c);
        }
        flush(self, cur);
    }

    /// Sends `r` to `to` as one or more sync answers within the frame and key bounds.
    fn send_reply(&mut self, to: NodeId, round: u32, r: ReplyOut) {
        let mut budget = Budget::new(&self.cfg);
        // Usually it all fits one message: send it as it is, without copying it entry by entry.
        let value_bytes = 4 * (r.relocated_values.len() + r.refreshed_values.len());
        let entries = r.relocated.len() + r.refreshed.len() + r.acks.len() + r.failed.len();
        if budget.fits(entries, ENTRY_BYTES * entries + value_bytes) {
            if entries > 0 {
                let ReplyOut { relocated, mut relocated_values, refreshed, refreshed_values, acks, failed } =
                    r;
                relocated_values.extend_from_slice(&refreshed_values);
                let values = relocated_values;
                self.send(to, Message::SyncReply { round, relocated, refreshed, acks, failed, values });
            }
            return;
        }
        let mut cur = ReplyOut::default();
        let flush = |node: &mut Node, c: ReplyOut| {
            if c.relocated.len() + c.refreshed.len() + c.acks.len() + c.failed.len() > 0 {
                let mut values = c.relocated_values;
                values.extend_from_slice(&c.refreshed_values);
                let (relocated, refreshed, acks, failed) = (c.relocated, c.refreshed, c.acks, c.failed);
                node.send(to, Message::SyncReply { round, relocated, refreshed, acks, failed, values });
            }
        };
        let mut at = 0;
        for m in r.relocated {
            let len = self.cfg.layout.len_of(m.key).unwrap_or(0);
            if budget.take(ENTRY_BYTES + 4 * len) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.relocated.push(m);
            cur.relocated_values.extend_from_slice(r.relocated_values.get(at..at + len).unwrap_or(&[]));
            at += len;
        }
        let mut at = 0;
        for f in r.refreshed {
            let len = self.cfg.layout.len_of(f.key).unwrap_or(0);
            if budget.take(ENTRY_BYTES + 4 * len) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.refreshed.push(f);
            cur.refreshed_values.extend_from_slice(r.refreshed_values.get(at..at + len).unwrap_or(&[]));
            at += len;
        }
        for k in r.acks {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.acks.push(k);
        }
        for k in r.failed {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.failed.push(k);
        }
        flush(self, cur);
    }

    // ----- at the owner -----

    /// A sync request (or a forwarded part of one) from `from`, for `origin`'s round `round`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn serve_sync(
        &mut self,
        from: NodeId,
        round: u32,
        origin: NodeId,
        hops: u8,
        starts: &[Key],
        ends: &[Key],
        replicas: &[ReplicaSync],
        deltas: &[f32],
        owners: &[OwnerChange],
    ) {
        self.stats.hops_max = self.stats.hops_max.max(hops);
        if !owners.is_empty() {
            self.record_owners(from, owners);
        }
        let mut reply = ReplyOut::default();
        let mut fwd = SyncOut::default();
        for &k in starts {
            if !self.store.holds(k) {
                fwd.starts.push(k);
            } else if origin == self.me {
                reply.acks.push(k);
            } else {
                self.owner_start(origin, k, &mut reply);
            }
        }
        for &k in ends {
            if !self.store.holds(k) {
                fwd.ends.push(k);
            } else {
                self.holder_gone(k, origin);
                reply.acks.push(k);
            }
        }
        let mut at = 0;
        for r in replicas {
            let len = if r.has_delta() { self.cfg.layout.len_of(r.key).unwrap_or(0) } else { 0 };
            let delta = deltas.get(at..at + len).unwrap_or(&[]);
            at += len;
            if !self.store.holds(r.key) {
                fwd.replicas.push(*r);
                fwd.deltas.extend_from_slice(delta);
            } else {
                self.owner_sync(origin, r, delta, &mut reply);
            }
        }
        self.forward_sync(round, origin, hops, fwd, &mut reply);
        self.send_reply(origin, round, reply);
    }

    /// Entries for keys not held here go on toward their owners, like requests.
    fn forward_sync(&mut self, round: u32, origin: NodeId, hops: u8, fwd: SyncOut, reply: &mut ReplyOut) {
        let n = fwd.starts.len() + fwd.ends.len() + fwd.replicas.len();
        if n == 0 {
            return;
        }
        self.stats.keys_forwarded += n as u64;
        if hops >= HOPS_MAX {
            reply.failed.extend(fwd.starts.iter().chain(&fwd.ends).copied());
            reply.failed.extend(fwd.replicas.iter().map(|r| r.key));
            return;
        }
        let mut out: BTreeMap<NodeId, SyncOut> = BTreeMap::new();
        for k in fwd.starts {
            out.entry(self.next_hop(k)).or_default().starts.push(k);
        }
        for k in fwd.ends {
            out.entry(self.next_hop(k)).or_default().ends.push(k);
        }
        let mut at = 0;
        for r in fwd.replicas {
            let len = if r.has_delta() { self.cfg.layout.len_of(r.key).unwrap_or(0) } else { 0 };
            let o = out.entry(self.next_hop(r.key)).or_default();
            o.replicas.push(r);
            o.deltas.extend_from_slice(fwd.deltas.get(at..at + len).unwrap_or(&[]));
            at += len;
        }
        for (to, o) in out {
            self.send_sync(to, round, origin, hops + 1, o);
        }
    }

    /// `origin` has intent for `key`, held here.
    fn owner_start(&mut self, origin: NodeId, key: Key, reply: &mut ReplyOut) {
        let relocate = match self.policy(key) {
            Policy::Relocate => true,
            Policy::Replicate => false,
            Policy::Adaptive => self.local_count(key) == 0 && self.only_holder_is(key, origin),
        };
        if relocate {
            self.relocate_to(origin, key, reply);
        } else {
            self.give_replica(origin, key, reply);
        }
    }

    /// Whether no node other than `node` holds a replica of `key` (as far as this owner knows).
    fn only_holder_is(&self, key: Key, node: NodeId) -> bool {
        self.sync.holders.get(&key).is_none_or(|h| h.as_slice().iter().all(|n| *n == node))
    }

    fn holder_gone(&mut self, key: Key, node: NodeId) {
        if self.sync.holders.is_empty() {
            return;
        }
        if let Entry::Occupied(mut h) = self.sync.holders.entry(key) {
            if h.get_mut().remove(node) {
                h.remove();
            }
        }
    }

    /// A replica holder's sync entry for `key`, held here.
    fn owner_sync(&mut self, origin: NodeId, r: &ReplicaSync, delta: &[f32], reply: &mut ReplyOut) {
        let key = r.key;
        if r.has_delta() && self.store.add_owned(key, delta) {
            self.stats.deltas_merged += 1;
        }
        if r.is_final() || origin == self.me {
            self.holder_gone(key, origin);
            reply.acks.push(key);
            return;
        }
        if self.policy(key) == Policy::Adaptive
            && r.has_room()
            && self.local_count(key) == 0
            && self.only_holder_is(key, origin)
        {
            // The holder is the only node left with intent, and has room for the key: its
            // replica becomes the main copy.
            self.relocate_to(origin, key, reply);
            return;
        }
        if self.policy(key) == Policy::Adaptive {
            self.sync.holders.entry(key).or_default().insert(origin);
        }
        if self.store.version(key) == Some(r.version) {
            reply.acks.push(key);
        } else if let Some(version) = self.store.read_versioned(key, &mut reply.refreshed_values) {
            reply.refreshed.push(Refresh { key, version });
            self.stats.refreshes_sent += 1;
        } else {
            reply.failed.push(key);
        }
    }

    fn give_replica(&mut self, origin: NodeId, key: Key, reply: &mut ReplyOut) {
        let Some(version) = self.store.read_versioned(key, &mut reply.refreshed_values) else {
            reply.failed.push(key);
            return;
        };
        reply.refreshed.push(Refresh { key, version });
        self.stats.replicas_served += 1;
        if self.policy(key) == Policy::Adaptive {
            self.sync.holders.entry(key).or_default().insert(origin);
        }
    }

    fn relocate_to(&mut self, to: NodeId, key: Key, reply: &mut ReplyOut) {
        let (done, now, hold) = (self.sync.rounds_done, self.sync.now, self.cfg.relocation_hold);
        if self.sync.arrived.get(&key).is_some_and(|(r, t)| done <= *r || now < *t + hold) {
            // Just arrived: it stays a round and `relocation_hold`; the requester asks again.
            reply.acks.push(key);
            return;
        }
        if self.pointers.len() >= self.cfg.pointers_max {
            // No room to remember where the key went: it stays; the requester asks again.
            self.stats.moves_refused += 1;
            reply.failed.push(key);
            return;
        }
        let Some((epoch, version)) = self.store.take(key, to, &mut reply.relocated_values) else {
            reply.failed.push(key);
            return;
        };
        reply.relocated.push(Moved { key, epoch, version });
        self.pointers.insert(key, (to, epoch));
        self.cache.put(key, to);
        keymap::remove(&mut self.sync.holders, &key);
        self.stats.relocations_out += 1;
        if self.local_count(key) > 0 {
            // Without replication a node that still has intent asks for the key again.
            self.sync.touched.push(key);
        }
    }

    // ----- at the origin -----

    /// The answer to (part of) this node's sync request of round `round`, from `from`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sync_answered(
        &mut self,
        now: Instant,
        from: NodeId,
        round: u32,
        relocated: &[Moved],
        refreshed: &[Refresh],
        acks: &[Key],
        failed: &[Key],
        values: &[f32],
    ) {
        let mut at = 0;
        // Each answered key, and whether its main copy was installed here by this answer (its
        // reservation is settled then, and its accesses are local).
        let mut answered: Vec<(Key, bool)> =
            Vec::with_capacity(relocated.len() + refreshed.len() + acks.len() + failed.len());
        for m in relocated {
            let len = self.cfg.layout.len_of(m.key).unwrap_or(0);
            let v = values.get(at..at + len).unwrap_or(&[]);
            at += len;
            let reserved = if self.sync.keys.take_reserved(m.key) {
                super::forward::Reserved::Round
            } else {
                super::forward::Reserved::No
            };
            let change = self.install_moved(from, m, v, reserved);
            answered.push((m.key, change.is_some()));
            let Some(change) = change else { continue };
            // Reported to the home node with the next round's grouped request.
            self.sync.owner_updates.push(change);
            self.arrived(now, m.key);
        }
        for f in refreshed {
            let len = self.cfg.layout.len_of(f.key).unwrap_or(0);
            let v = values.get(at..at + len).unwrap_or(&[]);
            at += len;
            answered.push((f.key, false));
            self.learn_owner(f.key, from);
            if self.store.holds(f.key) {
                continue;
            }
            if let Some(meta) = self.sync.replicas.get_mut(&f.key) {
                meta.refreshed = now;
                self.store.refresh_replica(f.key, f.version, v);
            } else if self.local_count(f.key) > 0 {
                match self.store.install_replica(f.key, from, f.version, v) {
                    Ok(()) => {
                        self.sync.replicas.insert(f.key, ReplicaMeta { owner: from, refreshed: now });
                        self.stats.replicas_created += 1;
                    }
                    Err(_) => {
                        self.stats.replicas_refused += 1;
                        self.sync.touched.push(f.key);
                    }
                }
            } else {
                // The intent ended while the answer was on its way: tell the owner.
                self.sync.touched.push(f.key);
            }
        }
        for &k in acks {
            answered.push((k, false));
            if let Some(meta) = self.sync.replicas.get_mut(&k) {
                meta.refreshed = now;
            }
            if from != self.me {
                self.learn_owner(k, from);
            }
        }
        for &k in failed {
            answered.push((k, false));
            self.stats.sync_entries_failed += 1;
            self.sync.touched.push(k);
        }
        for (k, installed) in answered {
            // One look at the key's record: its reservation goes back, and an answer in this
            // round settles its entry.
            let current = round == self.sync.round;
            let (unreserve, count) = self.sync.keys.update(k, |e| {
                let had = e.reserved();
                e.set(RESERVED, false);
                if current {
                    e.set(OUTSTANDING, false);
                    e.set_final_to(None);
                }
                (had, e.count)
            });
            if unreserve {
                self.store.unreserve_slots(1);
            }
            // Intent that is still not served locally is tried again next round. (A key just
            // installed is local: nothing in this answer takes it away again.)
            if !installed && count > 0 && !self.store.is_local(k) {
                self.sync.touched.push(k);
            }
        }
        if self.sync.open && self.sync.keys.outstanding == 0 {
            self.finish_round(now, true);
        }
    }

    /// A sync request from this node could not be sent: `to` has failed.
    pub(super) fn sync_undeliverable(&mut self, msg: &Message) {
        let now = self.sync.now;
        let Message::Sync { origin, round, starts, ends, replicas, .. } = msg else { return };
        if *origin != self.me {
            let mut keys: Vec<Key> = starts.iter().chain(ends).copied().collect();
            keys.extend(replicas.iter().map(|r| r.key));
            let reply = ReplyOut { failed: keys, ..ReplyOut::default() };
            self.send_reply(*origin, *round, reply);
            return;
        }
        self.stats.deltas_lost += replicas.iter().filter(|r| r.has_delta()).count() as u64;
        let keys: Vec<Key> =
            starts.iter().chain(ends).copied().chain(replicas.iter().map(|r| r.key)).collect();
        self.sync_answered(now, self.me, *round, &[], &[], &[], &keys, &[]);
    }

    /// The main copy of `key` was installed here (in a sync answer or a `Relocate`): a replica
    /// held here became it, and the key stays at least a round and `relocation_hold` before it
    /// moves on (without the hold, a key bounced to its home for want of room could be handed
    /// straight back by a stale entry, again and again, with requests chasing it).
    pub(super) fn sync_key_installed(&mut self, key: Key) {
        if keymap::remove(&mut self.sync.replicas, &key).is_some() {
            self.stats.replicas_upgraded += 1;
        }
        if self.cfg.technique.uses_rounds() {
            self.sync.arrived.insert(key, (self.sync.rounds_done, self.sync.now));
        }
    }

    /// The replica of `key` left the store (its main copy passed through here on its way to
    /// the key's home): forget it; a round asks again while intent remains.
    pub(super) fn sync_forget_replica(&mut self, key: Key) {
        self.sync.replicas.remove(&key);
        if self.local_count(key) > 0 {
            self.sync.touched.push(key);
        }
    }

    /// Where this node's sync entries and requests for a replicated key go: its owner.
    pub(super) fn replica_owner(&self, key: Key) -> Option<NodeId> {
        let records = &self.sync.keys.map;
        self.sync.replicas.get(&key).map(|m| m.owner).or_else(|| records.get(&key).and_then(|e| e.final_to()))
    }

    // ----- checks -----

    pub(super) fn check_sync(&self) -> Result<(), super::InvariantViolation> {
        let fail = |what, n: u64| Err(super::InvariantViolation(what, n));
        let s = &self.sync;
        if s.replicas.len() != self.store.replicas_held() {
            return fail("replica table and store disagree", s.replicas.len() as u64);
        }
        // A replica whose last intent just ended (`end_intents`) stays until the next round,
        // which sends its final delta and drops it: it must be among the round's keys.
        let ending: BTreeSet<Key> = s.touched.iter().copied().collect();
        for k in s.replicas.keys() {
            if !self.store.has_replica(*k) {
                return fail("a replica in the table is not in the store", k.0);
            }
            if self.local_count(*k) == 0 && !ending.contains(k) {
                return fail("a replica is held without intent", k.0);
            }
        }
        let (mut reserved, mut outstanding) = (0, 0);
        for (k, e) in &s.keys.map {
            if e.is_idle() {
                return fail("an idle key record is kept", k.0);
            }
            if e.final_to().is_some() && !e.outstanding() {
                return fail("a final delta is on its way without an outstanding entry", k.0);
            }
            reserved += usize::from(e.reserved());
            outstanding += usize::from(e.outstanding());
        }
        if reserved != s.keys.reserved || outstanding != s.keys.outstanding {
            return fail("the key records' counts are off", outstanding as u64);
        }
        if !s.open && outstanding > 0 {
            return fail("sync entries outstanding with no round open", outstanding as u64);
        }
        let (mut n, mut keys) = (0, 0);
        let mut counts: BTreeMap<Key, u32> = BTreeMap::new();
        for w in &s.workers {
            n += w.future.len() + w.acted.len();
            keys += w.future.iter().map(|f| f.keys.len()).sum::<usize>();
            for a in w.acted.iter() {
                keys += a.keys.len();
                for k in &a.keys {
                    *counts.entry(*k).or_default() += 1;
                }
            }
        }
        if n != s.intents || keys != s.intent_keys {
            return fail("intent counters disagree with the heaps", n as u64);
        }
        if s.intents > self.cfg.intents_max || s.intent_keys > self.cfg.intent_keys_max {
            return fail("more intents than the bound", s.intents as u64);
        }
        for k in counts.keys() {
            if !s.keys.map.contains_key(k) {
                return fail("a key with acted intents has no record", k.0);
            }
        }
        for (k, l) in &s.keys.map {
            let permanent = match self.cfg.technique {
                Technique::FullReplication => self.home(*k) != self.me,
                Technique::MultiTechnique => self.cfg.hot_keys.contains(k) && self.home(*k) != self.me,
                _ => false,
            } && s.permanent_done;
            let expected = counts.get(k).copied().unwrap_or(0) + u32::from(permanent);
            if l.count != expected {
                return fail("a key's intent count disagrees with the acted intents", k.0);
            }
        }
        for k in s.holders.keys() {
            if !self.store.holds(*k) {
                return fail("replica holders are recorded for a key not owned here", k.0);
            }
        }
        Ok(())
    }
}

/// `keys` in ascending order, each once.
fn sorted(mut keys: Vec<Key>) -> Vec<Key> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Gives `buf`'s allocation back to the round buffer `slot`, emptied, if `slot` has none and
/// `buf` is not too large.
fn recycle<T>(slot: &mut Vec<T>, mut buf: Vec<T>) {
    if slot.capacity() == 0 && buf.capacity() <= BUFFER_KEEP_MAX {
        buf.clear();
        *slot = buf;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_keep_each_node_once_inline_and_spilled() {
        let mut h = Holders::default();
        for n in [3, 1, 3, 2] {
            h.insert(NodeId(n));
        }
        assert!(matches!(h, Holders::Few { .. }));
        assert_eq!(h.as_slice(), [NodeId(3), NodeId(1), NodeId(2)]);
        assert!(!h.remove(NodeId(1)));
        assert!(!h.remove(NodeId(9)), "removing a node not in is harmless");
        assert_eq!(h.as_slice(), [NodeId(3), NodeId(2)]);
        for n in [5, 6, 7, 6] {
            h.insert(NodeId(n));
        }
        assert!(matches!(h, Holders::Many(_)));
        assert_eq!(h.as_slice(), [NodeId(3), NodeId(2), NodeId(5), NodeId(6), NodeId(7)]);
        for n in [2, 3, 5, 6] {
            assert!(!h.remove(NodeId(n)));
        }
        assert!(h.remove(NodeId(7)), "the last one leaves it empty");
        let mut few = Holders::default();
        few.insert(NodeId(4));
        assert!(few.remove(NodeId(4)));
    }
}
