//! Replicas at their holder (adapm-cikm23.txt Appendix B.2.3). A holder adds local updates to
//! its copy and to an unsent delta. Each round it sends the delta with the version of its last
//! refresh; the owner merges it (one more version) and answers with its value if the versions
//! differ. The holder sets its copy to that value plus what was added locally since the delta
//! was taken, so every update is counted once. When the holder's intent ends it drops the
//! replica and sends the delta as its last.

use alloc::vec::Vec;

use super::lifecycle::{Actions, Life};
use super::record::{KeyRecord, OUTSTANDING, RESERVED};
use super::round::sorted;
use super::Node;
use crate::ids::{Key, NodeId};
use crate::store::Store;
use crate::time::Instant;
use crate::wire::ReplicaSync;

impl Node {
    /// Replicas this node holds, in key order.
    pub fn replica_keys(&self) -> Vec<Key> {
        sorted(self.keys.with_life(Life::has_replica).map(|(k, _)| k).collect())
    }

    /// The round's look at the record of a replica held here, in one update of `e` (its hot
    /// part): `None` if an entry for the key is still outstanding (no second one goes);
    /// otherwise the entry is marked outstanding and the answer is its flags:
    /// [`ReplicaSync::ROOM`] if the owner may upgrade the replica to the main copy (the key is
    /// managed adaptively, this node still has intent, and a store slot is reserved for it,
    /// taken now if need be; the answer gives it back unless it brings the key), else 0 (the
    /// owner keeps the key, and the next round asks again).
    #[inline]
    pub(super) fn replica_entry(e: &mut KeyRecord, adaptive: bool, store: &Store) -> Option<u8> {
        if e.outstanding() {
            return None;
        }
        if adaptive && e.count > 0 && !e.reserved() && store.reserve_slots(1) {
            e.set(RESERVED, true);
        }
        e.set(OUTSTANDING, true);
        Some(if adaptive && e.count > 0 && e.reserved() { ReplicaSync::ROOM } else { 0 })
    }

    /// Replicas whose owner failed can be neither synchronized nor upgraded: they go, and
    /// their unsent updates are counted as lost (the main copy they belonged to is gone).
    pub(super) fn drop_replicas_of_failed_owners(&mut self, now: Instant) {
        if self.failed_peers.is_empty() {
            return;
        }
        let mut gone: Vec<Key> = self
            .keys
            .with_life(Life::has_replica)
            .filter(|(_, c)| c.replica().is_some_and(|m| self.failed_peers.contains(&m.owner)))
            .map(|(k, _)| k)
            .collect();
        gone.sort_unstable();
        let mut scratch = Vec::new();
        for k in gone {
            if let Some(meta) = self.keys.remove_replica(k) {
                self.stats.sample_staleness(now, meta.refreshed);
            }
            // Its owner can no longer hand the key over: the slot kept for that goes back.
            self.release_reservation(k);
            scratch.clear();
            if let Some(t) = self.store.drop_replica(k, &mut scratch) {
                self.stats.replicas_destroyed += 1;
                self.stats.deltas_lost += u64::from(t.nonzero);
            }
        }
    }

    /// The main copy of `key` was installed here (in a sync answer or a `Relocate`): a replica
    /// held here became it, and the key stays at least a round and `relocation_hold` before it
    /// moves on (without the hold, a key bounced to its home for want of room could be handed
    /// straight back by a stale entry, again and again, with requests chasing it).
    pub(super) fn sync_key_installed(&mut self, key: Key) {
        let actions = self.keys.installed(key);
        if actions.contains(Actions::REPLICA_UPGRADED) {
            self.stats.replicas_upgraded += 1;
        }
        if self.cfg.technique.uses_rounds() {
            self.sync.arrived.insert(key, (self.sync.rounds_done, self.sync.now));
        }
    }

    /// The replica of `key` left the store (its main copy passed through here on its way to
    /// the key's home): forget it; a round asks again while intent remains.
    pub(super) fn sync_forget_replica(&mut self, key: Key) {
        self.keys.remove_replica(key);
        if self.local_count(key) > 0 {
            self.sync.touched.push(key);
        }
    }

    /// Where this node's sync entries and requests for a replicated key go: its owner.
    #[inline]
    pub(super) fn replica_owner(&self, key: Key) -> Option<NodeId> {
        match self.keys.replica(key) {
            Some(m) => Some(m.owner),
            None => self.keys.map.get(&key).and_then(|e| e.final_to()),
        }
    }
}
