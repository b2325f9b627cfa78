//! The owner's side of intents and replicas (adapm-cikm23.txt §4.1 and Appendix B.2.4). The
//! owner holds the key's main copy and decides for it:
//! - adaptive: a node whose intent starts gets the key moved to it if no other node has intent
//!   (the owner itself included) and no other node holds a replica; else a replica. A replica
//!   holder that is the only node left with intent gets the key moved to it in the answer to
//!   its next sync (its replica becomes the main copy). Keys never move while other replicas
//!   exist, so a replica's owner is fixed for the replica's life.
//! - without replication: every start moves the key (a node that loses a key it still has
//!   intent for asks again next round);
//! - without relocation, full replication, NuPS's hot keys: every start gets a replica.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::dispatch::Budget;
use super::lifecycle::{decide, Decision, Entry, Looks};
use super::round::{SyncOut, ENTRY_BYTES};
use super::{Node, HOPS_MAX};
use crate::config::Technique;
use crate::ids::{Key, NodeId, Version};
use crate::wire::{Message, Moved, OwnerChange, Refresh, ReplicaSync};

/// What a decision does with a start or sync entry at the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Policy {
    Adaptive,
    Relocate,
    Replicate,
}

/// What the owner's decision reads of this node, for one key and requester.
struct OwnerLooks<'a> {
    node: &'a Node,
    key: Key,
    origin: NodeId,
}

impl Looks for OwnerLooks<'_> {
    #[inline]
    fn intent_here(&self) -> bool {
        self.node.local_count(self.key) > 0
    }

    #[inline]
    fn other_holders(&self) -> bool {
        !self.node.keys.holders(self.key).iter().all(|n| *n == self.origin)
    }

    #[inline]
    fn moving(&self) -> (bool, bool) {
        let (n, key) = (self.node, self.key);
        let (done, now, hold) = (n.sync.rounds_done, n.sync.now, n.cfg.relocation_hold);
        let on_hold = n.sync.arrived.get(&key).is_some_and(|(r, t)| done <= *r || now < *t + hold);
        (on_hold, n.keys.pointers >= n.cfg.pointers_max)
    }
}

/// One grouped answer being built for an origin.
#[derive(Debug, Default)]
pub(super) struct ReplyOut {
    pub(super) relocated: Vec<Moved>,
    pub(super) relocated_values: Vec<f32>,
    pub(super) refreshed: Vec<Refresh>,
    pub(super) refreshed_values: Vec<f32>,
    pub(super) acks: Vec<Key>,
    pub(super) failed: Vec<Key>,
}

impl Node {
    /// As owner: the nodes holding replicas of `key` (adaptive technique only).
    pub fn replica_holders(&self, key: Key) -> Vec<NodeId> {
        self.keys.holders(key).to_vec()
    }

    pub(super) fn policy(&self, key: Key) -> Policy {
        match self.cfg.technique {
            Technique::Adaptive => Policy::Adaptive,
            Technique::AdaptiveNoReplication => Policy::Relocate,
            Technique::MultiTechnique if !self.cfg.hot_keys.contains(&key) => Policy::Relocate,
            _ => Policy::Replicate,
        }
    }

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
            } else {
                let d = self.decide(k, Entry::Start, origin);
                self.carry_out(d, origin, k, None, &mut reply);
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
            // One look at the store: the delta merged into the main copy if it is here, and
            // the main copy's version after it.
            match self.store.merge_versioned(r.key, delta) {
                None => {
                    fwd.replicas.push(*r);
                    fwd.deltas.extend_from_slice(delta);
                }
                Some((merged, current)) => {
                    self.stats.deltas_merged += u64::from(merged);
                    self.owner_sync(origin, r, current, &mut reply);
                }
            }
        }
        self.forward_sync(round, origin, hops, fwd, &mut reply);
        self.send_reply(origin, round, reply);
    }

    /// Entries for keys not held here go on toward their owners, like requests.
    pub(super) fn forward_sync(
        &mut self,
        round: u32,
        origin: NodeId,
        hops: u8,
        fwd: SyncOut,
        reply: &mut ReplyOut,
    ) {
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

    /// The owner's decision on `entry` for `key` (held here), from `origin`.
    #[inline(always)]
    pub(super) fn decide(&self, key: Key, entry: Entry, origin: NodeId) -> Decision {
        decide(self.policy(key), entry, origin == self.me, &OwnerLooks { node: self, key, origin })
    }

    /// Carries out the owner's decision `d` on an entry for `key` (held here) from `origin`;
    /// `version` is the version of the origin's replica, for a sync entry.
    #[inline(always)]
    pub(super) fn carry_out(
        &mut self,
        d: Decision,
        origin: NodeId,
        key: Key,
        version: Option<Version>,
        reply: &mut ReplyOut,
    ) {
        match d {
            Decision::Ack => reply.acks.push(key),
            Decision::DropHolder => {
                self.holder_gone(key, origin);
                reply.acks.push(key);
            }
            Decision::RefuseMove => {
                // No room to remember where the key went: it stays; the requester asks again.
                self.stats.moves_refused += 1;
                reply.failed.push(key);
            }
            Decision::Relocate => self.relocate_to(origin, key, reply),
            Decision::GiveReplica => {
                let Some(version) = self.store.read_versioned(key, &mut reply.refreshed_values) else {
                    reply.failed.push(key);
                    return;
                };
                reply.refreshed.push(Refresh { key, version });
                self.stats.replicas_served += 1;
                if self.policy(key) == Policy::Adaptive {
                    self.keys.add_holder(key, origin);
                }
            }
            Decision::Sync => self.sync_replica(origin, key, version, None, reply),
        }
    }

    pub(super) fn holder_gone(&mut self, key: Key, node: NodeId) {
        if self.keys.owned > 0 {
            self.keys.remove_holder(key, node);
        }
    }

    /// A replica holder's sync entry for `key`, held here, its delta merged: the main copy's
    /// version is `current`.
    pub(super) fn owner_sync(
        &mut self,
        origin: NodeId,
        r: &ReplicaSync,
        current: Version,
        reply: &mut ReplyOut,
    ) {
        let key = r.key;
        let entry = if r.is_final() { Entry::Final } else { Entry::Sync { room: r.has_room() } };
        match self.decide(key, entry, origin) {
            // The usual answer to a replica's sync, here rather than through `carry_out`
            // (one call less per replica and round).
            Decision::Sync => self.sync_replica(origin, key, Some(r.version), Some(current), reply),
            d => self.carry_out(d, origin, key, Some(r.version), reply),
        }
    }

    /// Keeps `origin`'s replica of `key` (held here) in sync: acknowledges its `version` or
    /// refreshes it. `current` is the main copy's version if the caller has just read it.
    #[inline(always)]
    fn sync_replica(
        &mut self,
        origin: NodeId,
        key: Key,
        version: Option<Version>,
        current: Option<Version>,
        reply: &mut ReplyOut,
    ) {
        if self.policy(key) == Policy::Adaptive {
            self.keys.add_holder(key, origin);
        }
        let current = current.or_else(|| self.store.version(key));
        if current == version {
            reply.acks.push(key);
        } else if let Some(version) = self.store.read_versioned(key, &mut reply.refreshed_values) {
            reply.refreshed.push(Refresh { key, version });
            self.stats.refreshes_sent += 1;
        } else {
            reply.failed.push(key);
        }
    }

    /// Moves `key` (held here) to `to` in `reply`, as the owner decided.
    pub(super) fn relocate_to(&mut self, to: NodeId, key: Key, reply: &mut ReplyOut) {
        let Some((epoch, version)) = self.store.take(key, to, &mut reply.relocated_values) else {
            reply.failed.push(key);
            return;
        };
        reply.relocated.push(Moved { key, epoch, version });
        self.keys.departed(key, to, epoch);
        self.cache.put(key, to);
        self.stats.relocations_out += 1;
        if self.local_count(key) > 0 {
            // Without replication a node that still has intent asks for the key again.
            self.sync.touched.push(key);
        }
    }

    /// Sends `r` to `to` as one or more sync answers within the frame and key bounds.
    pub(super) fn send_reply(&mut self, to: NodeId, round: u32, r: ReplyOut) {
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
}
