//! The node's moves of main copies and replicas. These are `pub(crate)`: only the node may call
//! them, since a main copy installed here that is not handed over elsewhere would be a second
//! one (invariant 1). Each finds the key's record once and applies a transition of
//! [`super::record`].

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::record::Held;
use super::table::Shard;
use super::{DeltaTaken, InstallError, State, Store};
use crate::ids::{Epoch, Key, NodeId, Version};

impl Store {
    /// Reserves room for `n` main copies that are on their way here; false (and nothing
    /// reserved) if the store would exceed `store_keys_max`.
    pub(crate) fn reserve_slots(&self, n: usize) -> bool {
        n == 0
            || self
                .held
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                    h.checked_add(n).filter(|t| *t <= self.held_max)
                })
                .is_ok()
    }

    /// Gives back `n` reservations whose keys did not come.
    pub(crate) fn unreserve_slots(&self, n: usize) {
        if n > 0 {
            let before =
                self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| Some(h.saturating_sub(n)));
            invariant!(before.is_ok_and(|h| h >= n), "more reservations given back than taken");
        }
    }

    /// Takes room for one main copy of a key homed elsewhere.
    pub(super) fn reserve(&self) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| (h < self.held_max).then_some(h + 1))
            .is_ok()
    }

    /// Gives back the room of one main copy (or reservation).
    pub(super) fn release(&self) {
        self.unreserve_slots(1);
    }

    /// Removes the main copy of `key` to hand it to `to`: appends the value to `out` and
    /// returns the new epoch and the version. On the home node the slot becomes "away at `to`".
    pub(crate) fn take(&self, key: Key, to: NodeId, out: &mut Vec<f32>) -> Option<(Epoch, Version)> {
        let place = self.place(key);
        let i = place.shard();
        let mut guard = self.shards[i].lock();
        let shard = &mut *guard;
        let mut spot = self.spot(shard, place, key);
        let record = self.record(shard, spot, key);
        match record.held {
            Held::Owned => {}
            // A never-touched key leaves with its initial value.
            Held::Untouched => spot = self.touch(shard, i, spot, key)?,
            Held::Absent | Held::Away | Held::Replica => return None,
        }
        let version = self
            .with_slot_value::<false, _, _>(shard, spot, key, |value, _, version| {
                out.extend_from_slice(value);
                *version
            })
            .ok()?;
        let epoch = record.epoch.next();
        self.hand_over(shard, spot, key, to, epoch);
        Some((epoch, version))
    }

    /// Installs the main copy of `key` that arrived from another node, into a slot reserved
    /// with [`Store::reserve_slots`] if `reserved` (then an error leaves the reservation to the
    /// caller). A replica of the key held here becomes the main copy: its unsent delta is added
    /// to the arriving value (and counts as one more update), so no local update is lost.
    pub(crate) fn install(
        &self,
        key: Key,
        epoch: Epoch,
        version: Version,
        values: &[f32],
        reserved: bool,
    ) -> Result<(), InstallError> {
        if self.layout.len_of(key) != Some(values.len()) {
            return Err(InstallError::Length);
        }
        let place = self.place(key);
        let mut guard = self.shards[place.shard()].lock();
        let shard = &mut *guard;
        let spot = self.spot(shard, place, key);
        if matches!(self.record(shard, spot, key).held, Held::Owned | Held::Untouched) {
            return Err(InstallError::AlreadyOwned);
        }
        // Keys homed here take no room from `store_keys_max` (a reservation for one is given
        // back); others take the reserved slot or a new one.
        let home = self.is_home(spot);
        let counted = !home && !reserved;
        if counted && !self.reserve() {
            return Err(InstallError::Full);
        }
        let Some(room) = self.room_for(shard, spot, values.len()) else {
            if counted {
                self.release();
            }
            return Err(InstallError::ArenaFull);
        };
        if home && reserved {
            self.release();
        }
        self.own(shard, spot, key, room, epoch, version, values);
        invariant!(self.keys_held() <= self.held_max, "more keys held than the bound");
        Ok(())
    }

    /// Installs a replica of `key`, owned by `owner`, with the owner's `version` and `values`.
    /// If a replica is here already it is refreshed instead (see [`Store::refresh_replica`]).
    pub(crate) fn install_replica(
        &self,
        key: Key,
        owner: NodeId,
        version: Version,
        values: &[f32],
    ) -> Result<(), InstallError> {
        if self.layout.len_of(key) != Some(values.len()) {
            return Err(InstallError::Length);
        }
        let place = self.place(key);
        let mut guard = self.shards[place.shard()].lock();
        let shard = &mut *guard;
        let spot = self.spot(shard, place, key);
        let record = self.record(shard, spot, key);
        let (epoch, owner) = match record.held {
            Held::Owned | Held::Untouched => return Err(InstallError::AlreadyOwned),
            Held::Replica => {
                drop(guard);
                self.refresh_replica(key, version, values);
                return Ok(());
            }
            // On the home node the ownership record stays with the replica.
            Held::Away => (record.epoch, record.owner),
            Held::Absent => (Epoch(0), owner),
        };
        if self
            .replicas
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| (h < self.replicas_max).then_some(h + 1))
            .is_err()
        {
            return Err(InstallError::Full);
        }
        if self.add_replica(shard, spot, key, epoch, owner, version, values).is_none() {
            self.replicas.fetch_sub(1, Ordering::Relaxed);
            return Err(InstallError::ArenaFull);
        }
        Ok(())
    }

    /// Sets the replica of `key` to the owner's `values` (at `version`) plus the updates made
    /// here since its delta was last taken. Returns false if no replica of `key` is here.
    pub(crate) fn refresh_replica(&self, key: Key, version: Version, values: &[f32]) -> bool {
        let mut guard = self.shard(key).lock();
        let shard = &mut *guard;
        let Some(slot) = shard.map.get_mut(&key) else { return false };
        let (off, len) = (slot.off as usize, slot.len as usize);
        if slot.state != State::Replica || values.len() != len {
            return false;
        }
        let Some(both) = shard.arena.get_mut(off..off + 2 * len) else { return false };
        let (value, unsent) = both.split_at_mut(len);
        for ((v, n), d) in value.iter_mut().zip(values).zip(unsent.iter()) {
            *v = *n + *d;
        }
        slot.version = version;
        true
    }

    /// Appends the unsent delta of the replica of `key` to `out` and zeroes it (the caller
    /// sends it to the owner). `None` if no replica of `key` is here.
    pub(crate) fn take_delta(&self, key: Key, out: &mut Vec<f32>) -> Option<DeltaTaken> {
        let mut guard = self.shard(key).lock();
        Self::take_delta_locked(&mut guard, key, out)
    }

    fn take_delta_locked(shard: &mut Shard, key: Key, out: &mut Vec<f32>) -> Option<DeltaTaken> {
        let slot = shard.map.get(&key)?;
        let (off, len) = (slot.off as usize, slot.len as usize);
        if slot.state != State::Replica {
            return None;
        }
        let version = slot.version;
        let unsent = shard.arena.get_mut(off + len..off + 2 * len)?;
        let nonzero = unsent.iter().any(|x| *x != 0.0);
        if nonzero {
            out.extend_from_slice(unsent);
            unsent.fill(0.0);
        }
        Some(DeltaTaken { version, nonzero })
    }

    /// Removes the replica of `key`, appending its unsent delta to `out` (the final delta for
    /// the owner). On the home node the ownership record stays. `None` if no replica is here.
    pub(crate) fn drop_replica(&self, key: Key, out: &mut Vec<f32>) -> Option<DeltaTaken> {
        let place = self.place(key);
        let mut guard = self.shards[place.shard()].lock();
        let shard = &mut *guard;
        let taken = Self::take_delta_locked(shard, key, out)?;
        let slot = *shard.map.get(&key)?;
        self.unreplicate(shard, place, key, slot);
        Some(taken)
    }

    /// Home node only: records that `owner` holds `key` as of `epoch`, if that is newer than
    /// what is known. Returns whether the record changed.
    pub(crate) fn record_owner(&self, key: Key, owner: NodeId, epoch: Epoch) -> bool {
        let place = self.place(key);
        let mut guard = self.shards[place.shard()].lock();
        let shard = &mut *guard;
        let spot = self.spot(shard, place, key);
        if !self.is_home(spot) {
            return false;
        }
        let record = self.record(shard, spot, key);
        if !matches!(record.held, Held::Away | Held::Replica) || epoch <= record.epoch {
            return false;
        }
        self.set_owner(shard, spot, key, owner, epoch);
        true
    }
}
