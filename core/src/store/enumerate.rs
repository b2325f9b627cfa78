//! The store's enumerations and accounting: each takes every shard's latch in turn.

use super::page::{allocated, HomeState, PageEntry, RECORD_WORDS};
use super::{Footprint, Slot, State, Store};
use crate::ids::{Epoch, Key, NodeId, Version};

impl Store {
    /// Home node only: calls `f` for every key homed here that another node holds, with the
    /// owner last recorded. Takes each shard's latch in turn.
    pub fn for_each_away(&self, mut f: impl FnMut(Key, NodeId)) {
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = shard.lock();
            // A replica of a key homed here keeps the key's ownership record in its slot.
            let away = |k: &Key, s: &Slot| {
                s.state == State::Away || (s.state == State::Replica && self.record_in_table(&shard, *k))
            };
            for (k, s) in shard.map.iter().filter(|(k, s)| away(k, s)) {
                f(*k, s.owner);
            }
            for (page, p) in allocated(&shard.pages) {
                for (pos, s) in p.records().filter(|(_, s)| s.state == HomeState::Away) {
                    if let Some(k) = self.page_key(i, page, pos) {
                        f(k, s.owner);
                    }
                }
            }
        }
    }

    /// Home node only: calls `f` for every key homed here that was ever touched, whether its
    /// main copy is here or away (in no particular order, each key once). Keys homed here that
    /// are not listed were never touched: they are held here with their initial value. Each
    /// shard's keys are listed under its latch at once, so a key moving between this node and
    /// another meanwhile is listed either as held or as away, never missed.
    pub fn for_each_homed_touched(&self, mut f: impl FnMut(Key)) {
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = shard.lock();
            for (k, s) in shard.map.iter() {
                let homed = match s.state {
                    State::Away => true,
                    State::Owned | State::Replica => self.record_in_table(&shard, *k),
                };
                if homed {
                    f(*k);
                }
            }
            for (page, p) in allocated(&shard.pages) {
                for (pos, _) in p.records().filter(|(_, s)| s.state != HomeState::Untouched) {
                    if let Some(k) = self.page_key(i, page, pos) {
                        f(k);
                    }
                }
            }
        }
    }

    /// Calls `f` for every main copy held here (in no particular order) with its epoch,
    /// version and value. Takes each shard's latch in turn.
    pub fn for_each_owned(&self, mut f: impl FnMut(Key, Epoch, Version, &[f32])) {
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = shard.lock();
            for (k, s) in shard.map.iter().filter(|(_, s)| s.state == State::Owned) {
                let (off, len) = (s.off as usize, s.len as usize);
                if let Some(v) = shard.arena.get(off..off + len) {
                    f(*k, s.epoch, s.version, v);
                }
            }
            for (page, p) in allocated(&shard.pages) {
                for (pos, s) in p.records().filter(|(_, s)| s.state == HomeState::Owned) {
                    let Some(k) = self.page_key(i, page, pos) else { continue };
                    let Some(len) = self.layout.len_of(k) else { continue };
                    if let Some(v) = p.value(pos, len) {
                        f(k, s.epoch, s.version, v);
                    }
                }
            }
        }
    }

    /// Main copies held here of keys homed elsewhere (all in the shards' tables: pages hold
    /// keys homed here only). Takes each shard's latch in turn; for checks.
    pub fn moved_in(&self) -> usize {
        let foreign = |(k, s): &(&Key, &Slot)| s.state == State::Owned && self.homes.home(**k) != self.me;
        self.shards.iter().map(|shard| shard.lock().map.iter().filter(foreign).count()).sum()
    }

    /// Calls `f` for every replica held here with the version of its last refresh, its value
    /// and its unsent delta. Takes each shard's latch in turn.
    pub fn for_each_replica(&self, mut f: impl FnMut(Key, Version, &[f32], &[f32])) {
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for (k, s) in shard.map.iter().filter(|(_, s)| s.state == State::Replica) {
                let (off, len) = (s.off as usize, s.len as usize);
                if let Some(v) = shard.arena.get(off..off + 2 * len) {
                    f(*k, s.version, &v[..len], &v[len..]);
                }
            }
        }
    }

    /// Bytes of bookkeeping per key (slot and map entry), beyond the value itself, in a table
    /// without spare room; hash tables keep between 1/8 and 9/16 of their buckets free.
    pub const fn slot_bytes() -> usize {
        core::mem::size_of::<(Key, Slot)>() + 1
    }

    /// The bytes this store has allocated, by use (capacities, as the allocator counts them;
    /// the shard array itself is left out). Takes each shard's latch in turn.
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint::default();
        f.slots += self.page_hints.len() * core::mem::size_of::<usize>();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            f.slots += shard.map.allocation_size();
            f.slots += shard.pages.capacity() * core::mem::size_of::<PageEntry>();
            for (_, p) in allocated(&shard.pages) {
                f.slots += p.keys() * RECORD_WORDS * core::mem::size_of::<f32>();
                f.arenas += p.keys() * self.page_stride * core::mem::size_of::<f32>();
            }
            f.arenas += shard.arena.capacity() * core::mem::size_of::<f32>();
            f.free_lists += shard.free.allocation_size();
            f.free_lists += shard.free.values().map(|v| v.capacity() * 4).sum::<usize>();
        }
        f
    }
}
