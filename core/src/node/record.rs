//! One record per key: everything this node's protocol knows about a key, hashed without a
//! random seed (`super::keymap`) so that a replayed run is the same run. A key has a record
//! only while some part of it differs from the default.
//!
//! The record is split by how often it is touched, into two parts under the same key, each in
//! one map of [`Keys`]:
//! - the hot part ([`KeyRecord`], 8 bytes), read or written on every key-intent: the intent
//!   count, the round's flags (start announced, slot reserved, entry outstanding) and the
//!   owner a final delta is on its way to;
//! - the cold part ([`Cold`], 32 bytes), which few keys have: a forwarding pointer of a key
//!   given away, the waiting operations of a key asked for, a replica's owner, the replica
//!   holders of a key owned here. Which of these it has is the key's lifecycle tag ([`Life`]),
//!   read from the parts, never stored beside them.
//!
//! Why two maps and not one: the hot part must stay small and must not be looked up twice.
//! With the cold part in the same map (behind a slab index; a `Box` per record was worse, its
//! `malloc` alone cost a moving key-intent a quarter more instructions), every key-intent's
//! record grew by half, and every change of a rare part went through the big map and the
//! slab: a local key-intent took 2.6 % more instructions than before the merge, a moving one
//! 8.9 % and a replicated one 9.4 % (callgrind, `core/benches/intents.rs`), where this design
//! takes 0.9 % and 0.2 % more and the same (the round and the owner look at a key once where
//! they looked two or three times), because a change of a rare part is one probe of one map,
//! as it was before the merge.
//!
//! A round's pass over the replicas held here goes through `Keys::replica_keys`, a sorted list
//! of their keys, rather than over every cold part: at a node that owns keys too, most cold
//! parts are holder lists, and a walk that read each of them cost a replicated key-intent 4 %
//! of its time. The list is an index, not a second record: it names keys to look up, the cold
//! part stays the only place a replica is recorded, and the pass drops every key whose
//! replica went (asserted: afterwards the list has one key per replica). The two parts share no field: the hot part
//! says nothing about the cold one and the cold part nothing about intents or rounds, so
//! there is nothing to keep in step between them. What merging fixed stays fixed: the four
//! maps of rare parts (pointers, keys incoming, replicas, holders) that had to agree with each
//! other are one record with one tag, and every change of it is a step of
//! `super::lifecycle`'s pure function ([`Keys::transition`]), which asserts that the parts the
//! change leaves make the tag the step names.
//!
//! The counts the node needs of the whole map (reserved slots, outstanding entries, pointers,
//! keys incoming, replicas, keys with holders) are kept beside it, changed only where a flag
//! or the tag changes: never recounted per event.
//!
//! One part of a key's state is kept apart, on purpose: when a key last arrived (`arrived`
//! in `super::round`'s `SyncState`). It is a timer, not a state: every round expires the
//! entries one round and `relocation_hold` old, and in a map of records that would visit
//! every record each round instead of the few that arrived lately. It is read only where the
//! owner decides to move a key (`super::owner`), never with the rest.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use core::hash::BuildHasherDefault;

use hashbrown::hash_map::{Entry, OccupiedEntry};

use super::keymap::KeyMap;
use super::lifecycle::{self, Actions, Event, Life};
use super::WaitingOp;
use crate::ids::{Epoch, Key, MixHasher, NodeId, RequestId};
use crate::time::Instant;

/// This node's protocol state for one key that every key-intent touches (the hot part).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct KeyRecord {
    /// Acted, unexpired intents (plus one for a key replicated for the whole run).
    pub(super) count: u32,
    /// 1 + the node a final delta of this key is on its way to (0: none). The replica was
    /// dropped this round: this node's requests for the key go there too, behind the delta
    /// (per-pair FIFO), so a worker's read after its last update through the replica still
    /// sees it. (Node ids are below `u16::MAX`.)
    pub(super) final_to: u16,
    /// `ANNOUNCED`, `RESERVED`, `OUTSTANDING`.
    pub(super) flags: u8,
}

const _: () = assert!(core::mem::size_of::<KeyRecord>() == 8, "the hot record stays 8 bytes");

/// The owner was told of this node's intent (a start was sent and no end since).
pub(super) const ANNOUNCED: u8 = 1;
/// A store slot is reserved for the key's main copy, which the answer to a start (or to an
/// upgrade offer) may bring.
pub(super) const RESERVED: u8 = 2;
/// An entry of the open round waits for its answer. At most one per key, so a replica's
/// delta is never in flight twice.
pub(super) const OUTSTANDING: u8 = 4;

impl KeyRecord {
    #[inline]
    pub(super) fn is_idle(&self) -> bool {
        *self == KeyRecord::default()
    }
    pub(super) fn announced(&self) -> bool {
        self.flags & ANNOUNCED != 0
    }
    pub(super) fn reserved(&self) -> bool {
        self.flags & RESERVED != 0
    }
    pub(super) fn outstanding(&self) -> bool {
        self.flags & OUTSTANDING != 0
    }
    pub(super) fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }
    pub(super) fn final_to(&self) -> Option<NodeId> {
        self.final_to.checked_sub(1).map(NodeId)
    }
    pub(super) fn set_final_to(&mut self, to: Option<NodeId>) {
        self.final_to = to.map_or(0, |n| n.0.saturating_add(1));
    }
}

/// The parts of a key's record that few keys have. Which parts there are is the key's
/// lifecycle tag ([`Cold::life`]): the place's variant and whether a pointer is set, read
/// from the parts rather than stored beside them, so that tag and parts cannot disagree and
/// the part stays 32 bytes (40 with the tag stored). Never `Idle` in the map: a key with no
/// part has no cold part.
#[derive(Debug, Default)]
pub(super) struct Cold {
    pub(super) place: Place,
    /// Where the key went (`Life::Away*`): the epoch of the move, and 1 + the node (0: no
    /// pointer; node ids are below `u16::MAX`).
    pointer_epoch: Epoch,
    pointer_to: u16,
}

const _: () = assert!(core::mem::size_of::<Cold>() == 32, "a cold part stays 32 bytes");

/// What this node has of a key besides a forwarding pointer.
#[derive(Debug, Default)]
pub(super) enum Place {
    #[default]
    None,
    /// The main copy is here and these nodes hold replicas of it (never empty).
    Owned(Holders),
    /// A replica.
    Replica(ReplicaMeta),
    /// The key was asked for and what waits for it (boxed: only `Technique::Relocation`
    /// localizes, and the other parts stay small).
    Incoming(alloc::boxed::Box<Incoming>),
}

impl Cold {
    /// The replica, if one is held.
    pub(super) fn replica(&self) -> Option<&ReplicaMeta> {
        match &self.place {
            Place::Replica(m) => Some(m),
            _ => None,
        }
    }

    /// Where the key went, if it left and the home has not confirmed the move yet.
    #[inline]
    pub(super) fn pointer(&self) -> Option<(NodeId, Epoch)> {
        self.pointer_to.checked_sub(1).map(|n| (NodeId(n), self.pointer_epoch))
    }

    #[inline]
    fn set_pointer(&mut self, p: Option<(NodeId, Epoch)>) {
        (self.pointer_to, self.pointer_epoch) = match p {
            Some((n, e)) => (n.0.saturating_add(1), e),
            None => (0, Epoch::default()),
        };
    }

    /// The key's lifecycle tag: which parts there are.
    #[inline]
    pub(super) fn life(&self) -> Life {
        let place = match self.place {
            Place::None => 0,
            Place::Owned(_) => Life::OWNED,
            Place::Replica(_) => Life::REPLICA,
            Place::Incoming(_) => Life::INCOMING,
        };
        Life::from_parts(self.pointer_to != 0, place)
    }
}

/// A key this node asked to have moved here, and what waits for it.
#[derive(Debug, Default)]
pub(super) struct Incoming {
    /// Local `localize` requests that complete when the key arrives.
    pub(super) localizes: Vec<RequestId>,
    pub(super) ops: VecDeque<WaitingOp>,
}

/// As owner: the nodes holding replicas of one key, without an allocation for up to three
/// (a key replicated to every node of a large cluster spills into a vector).
#[derive(Clone, Debug)]
pub(super) enum Holders {
    Few { len: u8, nodes: [NodeId; 3] },
    Many(Vec<NodeId>),
}

impl Default for Holders {
    fn default() -> Holders {
        Holders::Few { len: 0, nodes: [NodeId(0); 3] }
    }
}

impl Holders {
    pub(super) fn as_slice(&self) -> &[NodeId] {
        match self {
            Holders::Few { len, nodes } => &nodes[..usize::from(*len)],
            Holders::Many(v) => v,
        }
    }

    /// Adds `node` unless it is in already.
    pub(super) fn insert(&mut self, node: NodeId) {
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
    pub(super) fn remove(&mut self, node: NodeId) -> bool {
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

/// A replica this node holds.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplicaMeta {
    /// The owner it synchronizes with (fixed while replicas exist).
    pub(super) owner: NodeId,
    /// When it was last refreshed or found up to date.
    pub(super) refreshed: Instant,
}

/// The per-key records: hot parts and cold parts, each in one map, and the counts the node
/// needs of them.
#[derive(Debug, Default)]
pub(super) struct Keys {
    pub(super) map: KeyMap<KeyRecord>,
    /// The cold parts, by key; each entry's tag is not `Idle`.
    cold: KeyMap<Cold>,
    /// Records with `RESERVED`, and with `OUTSTANDING`.
    pub(super) reserved: usize,
    pub(super) outstanding: usize,
    /// Cold parts by tag: with a forwarding pointer, incoming, with a replica, owned with
    /// holders.
    pub(super) pointers: usize,
    pub(super) incoming: usize,
    pub(super) replicas: usize,
    pub(super) owned: usize,
    /// Operations (not localizes) waiting in the incoming records, and localizes.
    pub(super) waiting_ops: usize,
    pub(super) localizes: usize,
    /// Every key a replica is held of, in key order, then the keys replicas were made of since
    /// the round's last walk ([`Keys::for_each_replica`]), which sorts them in and drops the
    /// keys whose replica went. A round looks at each replica through it instead of walking
    /// every cold part (most of which, at an owner, are holder lists).
    replica_keys: Vec<Key>,
}

impl Keys {
    /// `key`'s hot part (the default if it has none).
    #[inline]
    pub(super) fn get(&self, key: Key) -> KeyRecord {
        self.map.get(&key).copied().unwrap_or_default()
    }

    /// `key`'s cold part, if it has one (without hashing the key when no key has one).
    #[cfg(test)]
    pub(super) fn cold(&self, key: Key) -> Option<&Cold> {
        if self.cold.is_empty() {
            None
        } else {
            self.cold.get(&key)
        }
    }

    /// `key`'s lifecycle tag.
    #[cfg(test)]
    pub(super) fn life(&self, key: Key) -> Life {
        self.cold(key).map_or(Life::Idle, Cold::life)
    }

    /// Whether a replica of `key` is held here.
    #[inline]
    pub(super) fn has_replica(&self, key: Key) -> bool {
        self.replicas > 0 && self.cold.get(&key).is_some_and(|c| c.life().has_replica())
    }

    /// Changes `key`'s hot part with `f`, keeping the counts, and drops it if it became idle.
    /// Returns what `f` returns.
    #[inline]
    pub(super) fn update<R>(&mut self, key: Key, f: impl FnOnce(&mut KeyRecord) -> R) -> R {
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
                let mut e = KeyRecord::default();
                let r = f(&mut e);
                if !e.is_idle() {
                    v.insert(e);
                }
                self.recount(false, e.reserved(), false, e.outstanding());
                r
            }
        }
    }

    #[inline]
    pub(super) fn recount(&mut self, r0: bool, r1: bool, o0: bool, o1: bool) {
        self.reserved = self.reserved + usize::from(r1) - usize::from(r0);
        self.outstanding = self.outstanding + usize::from(o1) - usize::from(o0);
    }

    /// Forgets `key`'s intent (count and announcement), keeping the rest of its record.
    pub(super) fn forget_intent(&mut self, key: Key) {
        self.update(key, |e| {
            e.count = 0;
            e.set(ANNOUNCED, false);
        });
    }

    /// Clears `key`'s reservation; whether it had one.
    pub(super) fn take_reserved(&mut self, key: Key) -> bool {
        self.update(key, |e| {
            let had = e.reserved();
            e.set(RESERVED, false);
            had
        })
    }

    /// `event` happens to `key`: its tag moves as [`lifecycle::step`] says, `f` changes the
    /// cold part to match (an empty one if the key had none), and the counts follow the tag.
    /// Returns what `f` returns and the step's actions, which the caller carries out. A pair
    /// the lifecycle does not allow is a bug: asserted (`invariant!`), and otherwise the data
    /// decide the tag.
    #[inline]
    pub(super) fn transition<R>(
        &mut self,
        key: Key,
        event: Event,
        f: impl FnOnce(&mut Cold) -> R,
    ) -> (R, Actions) {
        let (r, actions, before, after) = apply_entry(self.cold.entry(key), event, f);
        self.count_life(before, after);
        (r, actions)
    }

    /// `key`'s cold part, to change with [`apply`] if `pred` says so: one probe of the map.
    #[inline]
    fn occupied_if(
        &mut self,
        key: Key,
        pred: impl FnOnce(&Cold) -> bool,
    ) -> Option<OccupiedEntry<'_, Key, Cold, BuildHasherDefault<MixHasher>>> {
        match self.cold.entry(key) {
            Entry::Occupied(o) if pred(o.get()) => Some(o),
            _ => None,
        }
    }

    #[inline]
    fn count_life(&mut self, before: Life, after: Life) {
        if before != after {
            self.count_one(before, false);
            self.count_one(after, true);
        }
    }

    #[inline]
    fn count_one(&mut self, life: Life, add: bool) {
        let change = |n: &mut usize, on: bool| {
            if add {
                *n += usize::from(on);
            } else {
                *n -= usize::from(on);
            }
        };
        change(&mut self.pointers, life.has_pointer());
        change(&mut self.incoming, life.is_incoming());
        change(&mut self.replicas, life.has_replica());
        change(&mut self.owned, life == Life::Owned);
    }

    // ----- the cold parts, read -----

    /// The replica of `key` held here, if one is.
    #[inline]
    pub(super) fn replica(&self, key: Key) -> Option<&ReplicaMeta> {
        if self.replicas == 0 {
            return None;
        }
        self.cold.get(&key).and_then(Cold::replica)
    }

    /// Where `key` went, if it left and the home has not confirmed the move yet.
    #[inline]
    pub(super) fn pointer(&self, key: Key) -> Option<(NodeId, Epoch)> {
        if self.pointers == 0 {
            return None;
        }
        self.cold.get(&key).and_then(Cold::pointer)
    }

    /// Whether this node asked for `key` and waits for it.
    #[inline]
    pub(super) fn is_incoming(&self, key: Key) -> bool {
        self.incoming > 0 && self.cold.get(&key).is_some_and(|c| c.life().is_incoming())
    }

    /// Keys with a cold part.
    pub(super) fn cold_len(&self) -> usize {
        self.cold.len()
    }

    /// As owner: the holder entries over every key owned here with holders, and the longest
    /// list (a walk over the cold parts; none when no key has holders).
    pub(super) fn holder_counts(&self) -> (usize, usize) {
        if self.owned == 0 {
            return (0, 0);
        }
        self.cold.values().fold((0, 0), |(sum, longest), c| match &c.place {
            Place::Owned(h) => (sum + h.as_slice().len(), longest.max(h.as_slice().len())),
            _ => (sum, longest),
        })
    }

    /// As owner: the nodes holding replicas of `key`.
    #[inline]
    pub(super) fn holders(&self, key: Key) -> &[NodeId] {
        if self.owned == 0 {
            return &[];
        }
        match self.cold.get(&key) {
            Some(Cold { place: Place::Owned(h), .. }) => h.as_slice(),
            _ => &[],
        }
    }

    /// Every key with a cold part whose tag passes `pred`, with that part, in the map's order.
    pub(super) fn with_life(&self, pred: impl Fn(Life) -> bool) -> impl Iterator<Item = (Key, &Cold)> {
        self.cold.iter().filter(move |(_, c)| pred(c.life())).map(|(k, c)| (*k, c))
    }

    /// Calls `f` with every replica held here, in key order (the round's walk: one probe of
    /// the cold parts per replica, through `replica_keys`).
    #[inline]
    pub(super) fn for_each_replica(&mut self, mut f: impl FnMut(Key, &ReplicaMeta)) {
        if self.replicas == 0 {
            self.replica_keys.clear();
            return;
        }
        self.tidy_replica_keys();
        let cold = &self.cold;
        for k in &self.replica_keys {
            if let Some(Cold { place: Place::Replica(m), .. }) = cold.get(k) {
                f(*k, m);
            }
        }
    }

    /// Sorts the keys of replicas made since the last walk into `replica_keys` and drops the
    /// keys whose replica went: afterwards it holds exactly the replicas, in key order.
    fn tidy_replica_keys(&mut self) {
        let list = &mut self.replica_keys;
        list.sort_unstable();
        list.dedup();
        let cold = &self.cold;
        list.retain(|k| matches!(cold.get(k), Some(Cold { place: Place::Replica(_), .. })));
        invariant!(list.len() == self.replicas, "replica_keys lists every replica");
    }

    /// Whether no cold part is `Idle` (has no part) and none is `Invalid` (for checks).
    pub(super) fn cold_consistent(&self) -> bool {
        self.cold.values().all(|c| !matches!(c.life(), Life::Idle | Life::Invalid))
    }

    // ----- the cold parts, changed: each a transition -----

    /// The main copy of `key` was taken from here and sent to `to` in epoch `epoch`: a
    /// forwarding pointer stays, and the replica holders (if any) are forgotten.
    #[inline]
    pub(super) fn departed(&mut self, key: Key, to: NodeId, epoch: Epoch) {
        self.transition(key, Event::Departed, |c| {
            if !matches!(c.place, Place::None) {
                c.place = Place::None;
            }
            c.set_pointer(Some((to, epoch)));
        });
    }

    /// The home confirmed `key`'s move of `epoch`: its pointer goes, if it is that move's.
    #[inline]
    pub(super) fn release_pointer(&mut self, key: Key, epoch: Epoch) {
        if self.pointers == 0 {
            return;
        }
        let Some(o) = self.occupied_if(key, |c| c.pointer().is_some_and(|(_, e)| e == epoch)) else { return };
        let (_, _, before, after) = apply(o, Event::Released, |c| c.set_pointer(None));
        self.count_life(before, after);
    }

    /// The main copy of `key` was installed here: its pointer and its replica (which the main
    /// copy replaced) go; what waits for it stays, for [`Keys::take_incoming`].
    #[inline]
    pub(super) fn installed(&mut self, key: Key) -> Actions {
        if self.cold.is_empty() {
            return Actions::NONE;
        }
        let Some(o) = self.occupied_if(key, |_| true) else { return Actions::NONE };
        let (_, actions, before, after) = apply(o, Event::Installed, |c| {
            c.set_pointer(None);
            if let Place::Replica(_) = c.place {
                set_place(c, Place::None);
            }
        });
        self.count_life(before, after);
        actions
    }

    /// This node asked for `key`; `f` adds what waits for it.
    pub(super) fn ask<R>(&mut self, key: Key, f: impl FnOnce(&mut Incoming) -> R) -> R {
        self.transition(key, Event::Asked, |c| {
            if !matches!(c.place, Place::Incoming(_)) {
                c.place = Place::Incoming(alloc::boxed::Box::default());
            }
            match &mut c.place {
                Place::Incoming(inc) => f(inc),
                _ => f(&mut Incoming::default()),
            }
        })
        .0
    }

    /// What waits for `key`, to change in place (not to remove: see `take_incoming`).
    pub(super) fn incoming_mut(&mut self, key: Key) -> Option<&mut Incoming> {
        if self.incoming == 0 {
            return None;
        }
        match self.cold.get_mut(&key) {
            Some(Cold { place: Place::Incoming(inc), .. }) => Some(inc),
            _ => None,
        }
    }

    /// `key` is no longer asked for (`event` says why: it arrived, or the wait ended): what
    /// waited for it, if anything, and the actions of the step.
    pub(super) fn take_incoming(&mut self, key: Key, event: Event) -> Option<(Incoming, Actions)> {
        if !self.is_incoming(key) {
            return None;
        }
        let (inc, actions) = self.transition(key, event, |c| match core::mem::take(&mut c.place) {
            Place::Incoming(inc) => *inc,
            other => {
                c.place = other;
                Incoming::default()
            }
        });
        self.waiting_ops -= inc.ops.len();
        self.localizes -= inc.localizes.len();
        Some((inc, actions))
    }

    /// A replica of `key` from `meta.owner` was installed here.
    #[inline]
    pub(super) fn add_replica(&mut self, key: Key, meta: ReplicaMeta) {
        self.transition(key, Event::ReplicaMade, |c| set_place(c, Place::Replica(meta)));
        self.replica_keys.push(key);
        // Bounded without a walk too: replicas made and dropped again and again between two
        // rounds leave at most as many stale keys as there are replicas, plus a few.
        if self.replica_keys.len() > 2 * self.replicas + 64 {
            self.tidy_replica_keys();
        }
    }

    /// The replica of `key` left the store: forget it. Its meta, if it was held.
    #[inline]
    pub(super) fn remove_replica(&mut self, key: Key) -> Option<ReplicaMeta> {
        if self.replicas == 0 {
            return None;
        }
        let o = self.occupied_if(key, |c| c.life().has_replica())?;
        let (meta, _, before, after) = apply(o, Event::ReplicaGone, |c| match c.place {
            Place::Replica(m) => {
                set_place(c, Place::None);
                Some(m)
            }
            _ => None,
        });
        self.count_life(before, after);
        meta
    }

    /// The replica of `key`, to refresh in place.
    pub(super) fn replica_mut(&mut self, key: Key) -> Option<&mut ReplicaMeta> {
        if self.replicas == 0 {
            return None;
        }
        match self.cold.get_mut(&key) {
            Some(Cold { place: Place::Replica(m), .. }) => Some(m),
            _ => None,
        }
    }

    /// As owner: `node` holds a replica of `key`.
    #[inline(always)]
    pub(super) fn add_holder(&mut self, key: Key, node: NodeId) {
        let mut entry = self.cold.entry(key);
        if let Entry::Occupied(o) = &mut entry {
            if let Place::Owned(h) = &mut o.get_mut().place {
                // Owned with holders already: no change of state, one more (or the same)
                // holder.
                h.insert(node);
                return;
            }
        }
        let (_, _, before, after) = apply_entry(entry, Event::HolderAdded, |c| {
            let mut h = Holders::default();
            h.insert(node);
            set_place(c, Place::Owned(h));
        });
        self.count_life(before, after);
    }

    /// As owner: `node` holds no replica of `key` any more.
    #[inline]
    pub(super) fn remove_holder(&mut self, key: Key, node: NodeId) {
        if self.owned == 0 {
            return;
        }
        let mut last = false;
        let Some(o) = self.occupied_if(key, |c| match &c.place {
            Place::Owned(h) if h.as_slice().contains(&node) => {
                last = h.as_slice().len() == 1;
                true
            }
            _ => false,
        }) else {
            return;
        };
        let event = if last { Event::HoldersGone } else { Event::HolderGone };
        let (_, _, before, after) = apply(o, event, |c| {
            if let Place::Owned(h) = &mut c.place {
                if h.remove(node) {
                    set_place(c, Place::None);
                }
            }
        });
        self.count_life(before, after);
    }
}

/// Sets `c`'s place to `p`, where the old place is usually `None` (dropped without a call).
#[inline]
fn set_place(c: &mut Cold, p: Place) {
    let old = core::mem::replace(&mut c.place, p);
    match old {
        // Nothing to drop: no call.
        Place::None | Place::Replica(_) | Place::Owned(Holders::Few { .. }) => core::mem::forget(old),
        _ => drop(old),
    }
}

/// [`Keys::transition`] on the cold part `o`: the result of `f`, the actions, and the tags
/// before and after (for the counts, which the caller updates).
#[inline(always)]
fn apply<R>(
    mut o: OccupiedEntry<'_, Key, Cold, BuildHasherDefault<MixHasher>>,
    event: Event,
    f: impl FnOnce(&mut Cold) -> R,
) -> (R, Actions, Life, Life) {
    let (r, actions, before, after) = apply_to(o.get_mut(), event, f);
    if after == Life::Idle {
        // An idle cold part holds nothing to drop (no place, no pointer): no call.
        core::mem::forget(o.remove());
    }
    (r, actions, before, after)
}

/// [`apply`] on `key`'s entry of the cold map: an empty cold part if the key has none, built
/// beside the map and moved in only if the step leaves it a part.
#[inline(always)]
fn apply_entry<R>(
    entry: Entry<'_, Key, Cold, BuildHasherDefault<MixHasher>>,
    event: Event,
    f: impl FnOnce(&mut Cold) -> R,
) -> (R, Actions, Life, Life) {
    match entry {
        Entry::Occupied(o) => apply(o, event, f),
        Entry::Vacant(v) => {
            let mut c = Cold::default();
            let out = apply_to(&mut c, event, f);
            if out.3 == Life::Idle {
                // An idle cold part holds nothing to drop: no call.
                core::mem::forget(c);
            } else {
                v.insert(c);
            }
            out
        }
    }
}

/// [`apply`] on a cold part `c` outside the map (which the caller removes if it became idle).
#[inline(always)]
fn apply_to<R>(c: &mut Cold, event: Event, f: impl FnOnce(&mut Cold) -> R) -> (R, Actions, Life, Life) {
    let before = c.life();
    let step = lifecycle::step(before, event);
    invariant!(step.is_some(), "a key's lifecycle does not allow this event in this state");
    let r = f(c);
    // The step says what the tag is now; the parts `f` left must make that tag (checked
    // where asserts run; elsewhere the tag is not read from them a second time).
    let after = match step {
        Some(s) => {
            invariant!(c.life() == s.next, "a key's data disagree with its lifecycle after a transition");
            s.next
        }
        None => c.life(),
    };
    invariant!(after != Life::Invalid, "a key owned here keeps a forwarding pointer");
    (r, step.map_or(Actions::NONE, |s| s.actions), before, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn holders_keep_each_node_once_inline_and_spilled() {
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

    #[test]
    fn transitions_keep_tags_counts_and_records() {
        let mut keys = Keys::default();
        let k = Key(7);
        keys.update(k, |e| e.count += 1);
        keys.departed(k, NodeId(2), Epoch(3));
        assert_eq!(keys.life(k), Life::Away);
        assert_eq!(keys.pointer(k), Some((NodeId(2), Epoch(3))));
        keys.add_replica(k, ReplicaMeta { owner: NodeId(2), refreshed: Instant(0) });
        assert_eq!((keys.life(k), keys.pointers, keys.replicas), (Life::AwayReplica, 1, 1));
        keys.release_pointer(k, Epoch(2));
        assert_eq!(keys.pointers, 1, "another epoch's release leaves the pointer");
        keys.release_pointer(k, Epoch(3));
        assert_eq!((keys.life(k), keys.pointers), (Life::Replica, 0));
        let actions = keys.installed(k);
        assert!(actions.contains(Actions::REPLICA_UPGRADED));
        assert_eq!((keys.life(k), keys.replicas), (Life::Idle, 0));
        keys.add_holder(k, NodeId(1));
        keys.add_holder(k, NodeId(3));
        assert_eq!(keys.holders(k), [NodeId(1), NodeId(3)]);
        keys.remove_holder(k, NodeId(1));
        assert_eq!((keys.life(k), keys.owned), (Life::Owned, 1));
        keys.remove_holder(k, NodeId(3));
        assert_eq!((keys.life(k), keys.owned), (Life::Idle, 0));
        keys.update(k, |e| e.count = 0);
        assert!(keys.map.is_empty(), "an idle record is dropped");
    }
}
