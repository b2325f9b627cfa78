//! The workers' reads and updates (the hottest path of the system: one latch, one lookup, a
//! copy or an add), and what the node asks of its own slots: where a key is, and its value.

use alloc::vec::Vec;

use super::record::{Held, Spot};
use super::table::Shard;
use super::{add_local, Place, State, Store, Whereabouts};
use crate::ids::{Key, Version};

impl Store {
    /// Runs `f` on the value of `key` (and, for a replica, its delta) if this node holds its
    /// main copy, or a replica when `REPLICA` allows it; creates the main copy first if this is
    /// the key's home node and the key was never touched. Returns whether it ran.
    ///
    /// Both kinds of slot go through [`Store::with_value_at`]; a key whose place is in a table
    /// (every key under the hashed placement; keys homed elsewhere under the dense one) gets it
    /// inlined with the kind known, so that the page code is not on its path.
    #[inline(always)]
    fn with_value<const REPLICA: bool, R>(
        &self,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        match self.place(key) {
            place @ Place::Table { .. } => self.with_value_at::<REPLICA, R>(place, key, f),
            place @ Place::Page { .. } => self.with_page_value::<REPLICA, R>(place, key, f),
        }
    }

    /// [`Store::with_value_at`] of a key whose place is in a page, out of line.
    #[inline(never)]
    fn with_page_value<const REPLICA: bool, R>(
        &self,
        place: Place,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        self.with_value_at::<REPLICA, R>(place, key, f)
    }

    /// [`Store::with_value`] of `key` at `place`.
    #[inline(always)]
    fn with_value_at<const REPLICA: bool, R>(
        &self,
        place: Place,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        let i = place.shard();
        let mut guard = self.shards[i].lock();
        let shard = &mut *guard;
        let spot = self.spot(shard, place, key);
        match self.with_slot_value::<REPLICA, R, _>(shard, spot, key, f) {
            Ok(r) => Some(r),
            Err(f) => self.with_value_untouched::<REPLICA, R>(shard, i, spot, key, f),
        }
    }

    /// [`Store::with_value`] of a key with no value here: a home key's first touch makes its
    /// initial value real; anything else is a miss. Out of line, so that the path every hit
    /// takes stays short.
    #[inline(never)]
    fn with_value_untouched<const REPLICA: bool, R>(
        &self,
        shard: &mut Shard,
        i: usize,
        spot: Spot,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        if self.record(shard, spot, key).held != Held::Untouched {
            return None;
        }
        let spot = self.touch(shard, i, spot, key)?;
        self.with_slot_value::<REPLICA, R, _>(shard, spot, key, f).ok()
    }

    /// A worker's read: copies the value of `key` into `out` if its main copy or a replica is
    /// here. `out.len()` must be the key's length.
    #[inline]
    pub fn read(&self, key: Key, out: &mut [f32]) -> bool {
        self.with_value::<true, _>(key, |v, _, _| {
            if v.len() != out.len() {
                return false;
            }
            out.copy_from_slice(v);
            true
        })
        .unwrap_or(false)
    }

    /// A worker's update: adds `delta` to the value of `key` if its main copy or a replica is
    /// here (a replica also keeps the update for its owner).
    #[inline]
    pub fn add(&self, key: Key, delta: &[f32]) -> bool {
        self.with_value::<true, _>(key, |v, unsent, version| add_local(v, unsent, version, delta))
            .unwrap_or(false)
    }

    /// Adds `delta` to the main copy of `key` if it is here (an update from another node).
    #[inline]
    pub(crate) fn add_owned(&self, key: Key, delta: &[f32]) -> bool {
        self.with_value::<false, _>(key, |v, unsent, version| add_local(v, unsent, version, delta))
            .unwrap_or(false)
    }

    /// Sets the value of `key` to `values` if its main copy is here (replicas are not set: a
    /// set goes to the owner). Not an add: [`crate::WriteKind`] names both.
    #[inline]
    pub fn set(&self, key: Key, values: &[f32]) -> bool {
        self.with_value::<false, _>(key, |v, _, version| {
            if v.len() != values.len() {
                return false;
            }
            v.copy_from_slice(values);
            *version = version.next();
            true
        })
        .unwrap_or(false)
    }

    /// A worker's read: appends the value of `key` to `out` if its main copy or a replica is
    /// here.
    pub fn read_append(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.with_value::<true, _>(key, |v, _, _| out.extend_from_slice(v)).is_some()
    }

    /// Appends the value of `key` to `out` if its main copy is here (a read for another node).
    pub fn read_owned_append(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.with_value::<false, _>(key, |v, _, _| out.extend_from_slice(v)).is_some()
    }

    /// Appends the main copy's value of `key` to `out` and returns its version, if it is here.
    pub fn read_versioned(&self, key: Key, out: &mut Vec<f32>) -> Option<Version> {
        self.with_value::<false, _>(key, |v, _, version| {
            out.extend_from_slice(v);
            *version
        })
    }

    /// A replica's sync entry at the owner, with one lookup: if the main copy of `key` is
    /// here, adds `delta` to it (none if empty; `false` beside the version if its length is
    /// wrong) and gives its version after that; `None` if it is not here.
    #[inline]
    pub(crate) fn merge_versioned(&self, key: Key, delta: &[f32]) -> Option<(bool, Version)> {
        self.with_value::<false, _>(key, |v, unsent, version| {
            let merged = !delta.is_empty() && add_local(v, unsent, version, delta);
            (merged, *version)
        })
    }

    /// The version of the main copy of `key`, if it is here.
    pub fn version(&self, key: Key) -> Option<Version> {
        self.with_value::<false, _>(key, |_, _, version| *version)
    }

    /// Whether the main copy of `key` is here (a never-touched key at its home counts).
    pub fn holds(&self, key: Key) -> bool {
        matches!(self.whereabouts(key), Whereabouts::Here(_))
    }

    /// Whether a worker's access to `key` is local: its main copy or a replica is here.
    #[inline]
    pub fn is_local(&self, key: Key) -> bool {
        self.whereabouts_if_remote(key).is_none()
    }

    /// Whether a replica of `key` is here.
    pub fn has_replica(&self, key: Key) -> bool {
        matches!(self.shard(key).lock().map.get(&key), Some(s) if s.state == State::Replica)
    }

    /// Where `key` is, as far as this node knows from its own slots.
    pub fn whereabouts(&self, key: Key) -> Whereabouts {
        let place = self.place(key);
        let shard = self.shards[place.shard()].lock();
        let spot = self.spot(&shard, place, key);
        let r = self.record(&shard, spot, key);
        match r.held {
            Held::Owned | Held::Untouched => Whereabouts::Here(r.epoch),
            Held::Away => Whereabouts::Away(r.owner, r.epoch),
            // The home node's record stays beside a replica.
            Held::Replica if self.is_home(spot) => Whereabouts::Away(r.owner, r.epoch),
            Held::Replica | Held::Absent => Whereabouts::Unknown,
        }
    }

    /// With one lookup: `None` if a worker's access to `key` is local (its main copy or a
    /// replica is here: [`Store::is_local`]), else its [`Store::whereabouts`] (then `Away` or
    /// `Unknown`).
    #[inline(always)]
    pub fn whereabouts_if_remote(&self, key: Key) -> Option<Whereabouts> {
        // As in `with_value`: the table kind inlined, the page kind out of line.
        match self.place(key) {
            place @ Place::Table { .. } => self.whereabouts_if_remote_at(place, key),
            place @ Place::Page { .. } => self.whereabouts_if_remote_paged(place, key),
        }
    }

    #[inline(never)]
    fn whereabouts_if_remote_paged(&self, place: Place, key: Key) -> Option<Whereabouts> {
        self.whereabouts_if_remote_at(place, key)
    }

    #[inline(always)]
    fn whereabouts_if_remote_at(&self, place: Place, key: Key) -> Option<Whereabouts> {
        let shard = self.shards[place.shard()].lock();
        let r = self.record(&shard, self.spot(&shard, place, key), key);
        match r.held {
            Held::Away => Some(Whereabouts::Away(r.owner, r.epoch)),
            Held::Absent => Some(Whereabouts::Unknown),
            Held::Untouched | Held::Owned | Held::Replica => None,
        }
    }
}
