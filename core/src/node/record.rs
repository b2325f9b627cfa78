//! One record per key: everything this node's protocol knows about a key, in one map
//! ([`Keys`]), hashed without a random seed (`super::keymap`) so that a replayed run is the
//! same run. A key has a record only while some part of it differs from the default.
//!
//! The record is split by how often it is touched. Its hot part, 16 bytes, is read or written
//! on every key-intent: the intent count, the round's flags (start announced, slot reserved,
//! entry outstanding), the owner a final delta is on its way to, and the key's lifecycle tag
//! ([`Life`]). The parts that only some keys have, rarely, live behind one `Box` ([`Cold`]):
//! the forwarding pointer of a key given away, the waiting operations of a key asked for, the
//! replica's owner, the holders of the replicas of a key owned here. The tag says which of
//! them there are without following the box; the transitions between tags are
//! `super::lifecycle`'s pure function, which every change of the cold part goes through
//! ([`Keys::transition`]), asserting that the data agree with the tag.
//!
//! The counts the node needs of the whole map (reserved slots, outstanding entries, pointers,
//! keys incoming, replicas, keys with holders) are kept beside it, changed only where a flag
//! or the tag changes: never recounted per event.
//!
//! One part of a key's state is kept apart, on purpose: when a key last arrived (`arrived`
//! in `super::round`'s `SyncState`). It is a timer, not a state: every round expires the
//! entries one round and `relocation_hold` old, and in this map that would visit every record
//! each round (the keys with intent, thousands) instead of the few that arrived lately. It is
//! read only where the owner decides to move a key (`super::owner`), never with the rest.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use hashbrown::hash_map::Entry;

use super::keymap::KeyMap;
use super::lifecycle::{self, Actions, Event, Life};
use super::WaitingOp;
use crate::ids::{Epoch, Key, NodeId, RequestId};
use crate::time::Instant;

/// This node's protocol state for one key. The first four fields are the hot part.
#[derive(Debug, Default)]
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
    /// Which of the cold parts the key has; `Idle` exactly when `cold` is `None`.
    pub(super) life: Life,
    pub(super) cold: Option<Box<Cold>>,
}

const _: () = assert!(core::mem::size_of::<KeyRecord>() == 16, "the hot record stays 16 bytes");

/// The owner was told of this node's intent (a start was sent and no end since).
pub(super) const ANNOUNCED: u8 = 1;
/// A store slot is reserved for the key's main copy, which the answer to a start (or to an
/// upgrade offer) may bring.
pub(super) const RESERVED: u8 = 2;
/// An entry of the open round waits for its answer. At most one per key, so a replica's
/// delta is never in flight twice.
pub(super) const OUTSTANDING: u8 = 4;

/// A copy of a record's hot part, to look at without holding the map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Hot {
    pub(super) count: u32,
    pub(super) final_to: u16,
    pub(super) flags: u8,
    pub(super) life: Life,
}

impl Hot {
    pub(super) fn announced(&self) -> bool {
        self.flags & ANNOUNCED != 0
    }
    pub(super) fn reserved(&self) -> bool {
        self.flags & RESERVED != 0
    }
    pub(super) fn outstanding(&self) -> bool {
        self.flags & OUTSTANDING != 0
    }
}

impl KeyRecord {
    #[inline]
    pub(super) fn is_idle(&self) -> bool {
        self.count == 0 && self.final_to == 0 && self.flags == 0 && self.life == Life::Idle
    }
    #[inline]
    pub(super) fn hot(&self) -> Hot {
        Hot { count: self.count, final_to: self.final_to, flags: self.flags, life: self.life }
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
    /// The replica held here, if one is.
    pub(super) fn replica(&self) -> Option<&ReplicaMeta> {
        match self.cold.as_deref() {
            Some(Cold { place: Place::Replica(m), .. }) => Some(m),
            _ => None,
        }
    }
    /// Where the key went, and the epoch of that move, if it left and the home has not
    /// confirmed the move yet.
    pub(super) fn pointer(&self) -> Option<(NodeId, Epoch)> {
        self.cold.as_ref().and_then(|c| c.pointer)
    }
}

/// The parts of a key's record that few keys have.
#[derive(Debug, Default)]
pub(super) struct Cold {
    /// Where the key went (`Life::Away*`).
    pub(super) pointer: Option<(NodeId, Epoch)>,
    pub(super) place: Place,
}

/// What this node has of a key besides a forwarding pointer.
#[derive(Debug, Default)]
pub(super) enum Place {
    #[default]
    None,
    /// The main copy is here and these nodes hold replicas of it (never empty).
    Owned(Holders),
    /// A replica.
    Replica(ReplicaMeta),
    /// The key was asked for and what waits for it.
    Incoming(Incoming),
}

impl Cold {
    /// The tag these parts make.
    pub(super) fn life(&self) -> Life {
        match (&self.place, self.pointer.is_some()) {
            (Place::None, false) => Life::Idle,
            (Place::None, true) => Life::Away,
            (Place::Owned(_), false) => Life::Owned,
            (Place::Owned(_), true) => Life::Invalid,
            (Place::Replica(_), false) => Life::Replica,
            (Place::Replica(_), true) => Life::AwayReplica,
            (Place::Incoming(_), false) => Life::Incoming,
            (Place::Incoming(_), true) => Life::AwayIncoming,
        }
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

/// The per-key records, with the counts the node needs of them.
#[derive(Debug, Default)]
pub(super) struct Keys {
    pub(super) map: KeyMap<KeyRecord>,
    /// Records with `RESERVED`, and with `OUTSTANDING`.
    pub(super) reserved: usize,
    pub(super) outstanding: usize,
    /// Records by tag: with a forwarding pointer, incoming, with a replica, owned with
    /// holders.
    pub(super) pointers: usize,
    pub(super) incoming: usize,
    pub(super) replicas: usize,
    pub(super) owned: usize,
    /// Operations (not localizes) waiting in the incoming records, and localizes.
    pub(super) waiting_ops: usize,
    pub(super) localizes: usize,
}

impl Keys {
    /// `key`'s hot part (the default if it has no record).
    #[inline]
    pub(super) fn get(&self, key: Key) -> Hot {
        self.map.get(&key).map(KeyRecord::hot).unwrap_or_default()
    }

    /// `key`'s record, if it has one.
    #[inline]
    pub(super) fn record(&self, key: Key) -> Option<&KeyRecord> {
        if self.map.is_empty() {
            None
        } else {
            self.map.get(&key)
        }
    }

    /// Changes `key`'s hot part with `f`, keeping the counts, and drops the record if it became
    /// idle. Returns what `f` returns. `f` must leave the tag and the cold part alone (they
    /// change only through [`Keys::transition`]).
    #[inline]
    pub(super) fn update<R>(&mut self, key: Key, f: impl FnOnce(&mut KeyRecord) -> R) -> R {
        match self.map.entry(key) {
            Entry::Occupied(mut o) => {
                let e = o.get_mut();
                let (r0, o0, life) = (e.reserved(), e.outstanding(), e.life);
                let r = f(e);
                invariant!(e.life == life, "a record's tag changed outside a transition");
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
                invariant!(
                    e.life == Life::Idle && e.cold.is_none(),
                    "a new record's tag set outside a transition"
                );
                let (r1, o1) = (e.reserved(), e.outstanding());
                if !e.is_idle() {
                    v.insert(e);
                }
                self.recount(false, r1, false, o1);
                r
            }
        }
    }

    #[inline]
    pub(super) fn recount(&mut self, r0: bool, r1: bool, o0: bool, o1: bool) {
        if r0 != r1 {
            self.reserved = self.reserved + usize::from(r1) - usize::from(r0);
        }
        if o0 != o1 {
            self.outstanding = self.outstanding + usize::from(o1) - usize::from(o0);
        }
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
        if !self.map.get(&key).is_some_and(KeyRecord::reserved) {
            return false;
        }
        self.update(key, |e| e.set(RESERVED, false));
        true
    }

    /// Marks an entry for `key` outstanding in the open round.
    pub(super) fn set_outstanding(&mut self, key: Key) {
        self.update(key, |e| e.set(OUTSTANDING, true));
    }

    /// `event` happens to `key`: its tag moves as [`lifecycle::step`] says, `f` changes the
    /// cold part to match (it gets one, empty, if the key had none), and the counts follow
    /// the tag. Returns what `f` returns and the step's actions, which the caller carries
    /// out. A pair the lifecycle does not allow is a bug: asserted (`invariant!`), and
    /// otherwise the data decide the tag.
    pub(super) fn transition<R>(
        &mut self,
        key: Key,
        event: Event,
        f: impl FnOnce(&mut Cold) -> R,
    ) -> (R, Actions) {
        let e = self.map.entry(key).or_default();
        let before = e.life;
        let step = lifecycle::step(before, event);
        invariant!(step.is_some(), "a key's lifecycle does not allow this event in this state");
        let cold = e.cold.get_or_insert_with(Box::default);
        let r = f(cold);
        let after = cold.life();
        invariant!(
            step.is_none_or(|s| s.next == after),
            "a key's data disagree with its lifecycle after a transition"
        );
        invariant!(after != Life::Invalid, "a key owned here keeps a forwarding pointer");
        e.life = after;
        if after == Life::Idle {
            e.cold = None;
        }
        if e.is_idle() {
            self.map.remove(&key);
        }
        self.count_life(before, false);
        self.count_life(after, true);
        (r, step.map_or(Actions::NONE, |s| s.actions))
    }

    fn count_life(&mut self, life: Life, add: bool) {
        let change = |n: &mut usize| {
            if add {
                *n += 1;
            } else {
                *n -= 1;
            }
        };
        if life.has_pointer() {
            change(&mut self.pointers);
        }
        match life {
            Life::Incoming | Life::AwayIncoming => change(&mut self.incoming),
            Life::Replica | Life::AwayReplica => change(&mut self.replicas),
            Life::Owned => change(&mut self.owned),
            Life::Idle | Life::Away | Life::Invalid => {}
        }
    }

    // ----- the cold parts, read -----

    /// The replica of `key` held here, if one is.
    #[inline]
    pub(super) fn replica(&self, key: Key) -> Option<&ReplicaMeta> {
        if self.replicas == 0 {
            return None;
        }
        self.map.get(&key).and_then(KeyRecord::replica)
    }

    /// Where `key` went, if it left and the home has not confirmed the move yet.
    #[inline]
    pub(super) fn pointer(&self, key: Key) -> Option<(NodeId, Epoch)> {
        if self.pointers == 0 {
            return None;
        }
        self.map.get(&key).and_then(KeyRecord::pointer)
    }

    /// Whether this node asked for `key` and waits for it.
    #[inline]
    pub(super) fn is_incoming(&self, key: Key) -> bool {
        self.incoming > 0 && self.map.get(&key).is_some_and(|e| e.life.is_incoming())
    }

    /// As owner: the nodes holding replicas of `key`.
    pub(super) fn holders(&self, key: Key) -> &[NodeId] {
        if self.owned == 0 {
            return &[];
        }
        match self.map.get(&key).and_then(|e| e.cold.as_deref()) {
            Some(Cold { place: Place::Owned(h), .. }) => h.as_slice(),
            _ => &[],
        }
    }

    /// Every record with a cold part of tag `pred`, in the map's order.
    pub(super) fn with_life(&self, pred: impl Fn(Life) -> bool) -> impl Iterator<Item = (Key, &KeyRecord)> {
        self.map.iter().filter(move |(_, e)| pred(e.life)).map(|(k, e)| (*k, e))
    }

    // ----- the cold parts, changed: each a transition -----

    /// The main copy of `key` was taken from here and sent to `to` in epoch `epoch`: a
    /// forwarding pointer stays, and the replica holders (if any) are forgotten.
    pub(super) fn departed(&mut self, key: Key, to: NodeId, epoch: Epoch) {
        self.transition(key, Event::Departed, |c| {
            c.place = Place::None;
            c.pointer = Some((to, epoch));
        });
    }

    /// The home confirmed `key`'s move of `epoch`: its pointer goes, if it is that move's.
    pub(super) fn release_pointer(&mut self, key: Key, epoch: Epoch) {
        if self.pointer(key).is_some_and(|(_, e)| e == epoch) {
            self.transition(key, Event::Released, |c| c.pointer = None);
        }
    }

    /// The main copy of `key` was installed here: its pointer and its replica (which the main
    /// copy replaced) go; what waits for it stays, for [`Keys::take_incoming`].
    pub(super) fn installed(&mut self, key: Key) -> Actions {
        let life = self.record(key).map_or(Life::Idle, |e| e.life);
        if life == Life::Idle {
            return Actions::NONE;
        }
        self.transition(key, Event::Installed, |c| {
            c.pointer = None;
            if matches!(c.place, Place::Replica(_)) {
                c.place = Place::None;
            }
        })
        .1
    }

    /// This node asked for `key`; `f` adds what waits for it.
    pub(super) fn ask<R>(&mut self, key: Key, f: impl FnOnce(&mut Incoming) -> R) -> R {
        self.transition(key, Event::Asked, |c| {
            if !matches!(c.place, Place::Incoming(_)) {
                c.place = Place::Incoming(Incoming::default());
            }
            let Place::Incoming(inc) = &mut c.place else { unreachable!() };
            f(inc)
        })
        .0
    }

    /// What waits for `key`, to change in place (not to remove: see `take_incoming`).
    pub(super) fn incoming_mut(&mut self, key: Key) -> Option<&mut Incoming> {
        if self.incoming == 0 {
            return None;
        }
        match self.map.get_mut(&key).and_then(|e| e.cold.as_deref_mut()) {
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
            Place::Incoming(inc) => inc,
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
    pub(super) fn add_replica(&mut self, key: Key, meta: ReplicaMeta) {
        self.transition(key, Event::ReplicaMade, |c| c.place = Place::Replica(meta));
    }

    /// The replica of `key` left the store: forget it. Its meta, if it was held.
    pub(super) fn remove_replica(&mut self, key: Key) -> Option<ReplicaMeta> {
        let meta = *self.replica(key)?;
        self.transition(key, Event::ReplicaGone, |c| c.place = Place::None);
        Some(meta)
    }

    /// The replica of `key`, to refresh in place.
    pub(super) fn replica_mut(&mut self, key: Key) -> Option<&mut ReplicaMeta> {
        if self.replicas == 0 {
            return None;
        }
        match self.map.get_mut(&key).and_then(|e| e.cold.as_deref_mut()) {
            Some(Cold { place: Place::Replica(m), .. }) => Some(m),
            _ => None,
        }
    }

    /// As owner: `node` holds a replica of `key`.
    pub(super) fn add_holder(&mut self, key: Key, node: NodeId) {
        if self.holders(key).contains(&node) {
            return;
        }
        self.transition(key, Event::HolderAdded, |c| match &mut c.place {
            Place::Owned(h) => h.insert(node),
            place => {
                let mut h = Holders::default();
                h.insert(node);
                *place = Place::Owned(h);
            }
        });
    }

    /// As owner: `node` holds no replica of `key` any more.
    pub(super) fn remove_holder(&mut self, key: Key, node: NodeId) {
        let holders = self.holders(key);
        if !holders.contains(&node) {
            return;
        }
        let event = if holders.len() == 1 { Event::HoldersGone } else { Event::HolderGone };
        self.transition(key, event, |c| {
            if let Place::Owned(h) = &mut c.place {
                if h.remove(node) {
                    c.place = Place::None;
                }
            }
        });
    }
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
        assert_eq!(keys.get(k).life, Life::Away);
        assert_eq!(keys.pointer(k), Some((NodeId(2), Epoch(3))));
        keys.add_replica(k, ReplicaMeta { owner: NodeId(2), refreshed: Instant(0) });
        assert_eq!((keys.get(k).life, keys.pointers, keys.replicas), (Life::AwayReplica, 1, 1));
        keys.release_pointer(k, Epoch(2));
        assert_eq!(keys.pointers, 1, "another epoch's release leaves the pointer");
        keys.release_pointer(k, Epoch(3));
        assert_eq!((keys.get(k).life, keys.pointers), (Life::Replica, 0));
        let actions = keys.installed(k);
        assert!(actions.contains(Actions::REPLICA_UPGRADED));
        assert_eq!((keys.get(k).life, keys.replicas), (Life::Idle, 0));
        keys.add_holder(k, NodeId(1));
        keys.add_holder(k, NodeId(3));
        assert_eq!(keys.holders(k), [NodeId(1), NodeId(3)]);
        keys.remove_holder(k, NodeId(1));
        assert_eq!((keys.get(k).life, keys.owned), (Life::Owned, 1));
        keys.remove_holder(k, NodeId(3));
        assert_eq!((keys.get(k).life, keys.owned), (Life::Idle, 0));
        keys.update(k, |e| e.count = 0);
        assert!(keys.map.is_empty(), "an idle record is dropped");
    }
}
