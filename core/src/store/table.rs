//! A shard's table of slots by key, its latch, and its value arena: where every key that is not
//! in a page has its slot (see the module docs of [`super`]).

use alloc::vec::Vec;
use core::hash::BuildHasherDefault;

use hashbrown::{HashMap, HashTable};

use super::page::PageEntry;
use super::Slot;
use crate::ids::{mix, Key, MixHasher};

/// A shard's table of slots by key. It hashes a key with its [`mix`] turned by 16 bits, so that
/// the bits that pick a bucket and a tag are neither the bits that pick the shard (bits 40 and
/// up of the mix, see `Store::place`) nor the low bits that `hashed_home` reduces modulo the node
/// count. The `_mixed` methods take the mix `Store::place` computed, so that a lookup on the hot
/// path mixes its key once.
#[derive(Default)]
pub(super) struct SlotMap(HashTable<(Key, Slot)>);

impl SlotMap {
    #[inline(always)]
    pub(super) fn hash(mix: u64) -> u64 {
        mix.rotate_right(16)
    }

    #[inline(always)]
    pub(super) fn get_mixed(&self, mix: u64, key: Key) -> Option<&Slot> {
        self.0.find(Self::hash(mix), |(k, _)| *k == key).map(|(_, s)| s)
    }

    #[inline(always)]
    pub(super) fn get_mut_mixed(&mut self, mix: u64, key: Key) -> Option<&mut Slot> {
        self.0.find_mut(Self::hash(mix), |(k, _)| *k == key).map(|(_, s)| s)
    }

    #[inline(always)]
    pub(super) fn get(&self, key: &Key) -> Option<&Slot> {
        self.get_mixed(mix(*key), *key)
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, key: &Key) -> Option<&mut Slot> {
        self.get_mut_mixed(mix(*key), *key)
    }

    /// Sets the slot of `key`, inserting or replacing.
    pub(super) fn insert(&mut self, key: Key, slot: Slot) -> &mut Slot {
        let hash = Self::hash(mix(key));
        let entry = self.0.entry(hash, |(k, _)| *k == key, |(k, _)| Self::hash(mix(*k)));
        &mut entry.insert((key, slot)).into_mut().1
    }

    pub(super) fn remove(&mut self, key: &Key) -> Option<Slot> {
        let key = *key;
        match self.0.find_entry(Self::hash(mix(key)), |(k, _)| *k == key) {
            Ok(e) => Some(e.remove().0 .1),
            Err(_) => None,
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Key, &Slot)> {
        self.0.iter().map(|(k, s)| (k, s))
    }

    pub(super) fn slots_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.0.iter_mut().map(|(_, s)| s)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Shrinks the table to fit its slots.
    pub(super) fn shrink(&mut self) {
        self.0.shrink_to(0, |(k, _)| Self::hash(mix(*k)));
    }

    pub(super) fn allocation_size(&self) -> usize {
        self.0.allocation_size()
    }
}

/// A shard behind its latch, alone in its cache lines: two threads working on neighbouring
/// shards do not invalidate each other's latch, and finding a shard is a shift, not a multiply.
#[repr(align(128))]
pub(super) struct Latched(pub(super) spin::Mutex<Shard>);

// One shard in one 128-byte block (two cache lines).
const _: () = assert!(core::mem::size_of::<Latched>() == 128);

/// Failed looks at a held latch after which a waiting thread gives up its core (with `std`).
pub(super) const LATCH_SPINS: u32 = 64;

impl Latched {
    /// Takes the latch. A latch is held for a copy or an add, so a thread that finds it held
    /// spins a little, reading (not writing) its cache line; with `std`, it then yields its
    /// core before trying again. On a machine with more runnable threads than cores the
    /// holder may have lost its core mid-copy, and spinning until it is scheduled again would
    /// burn the waiter's whole time slice.
    #[inline(always)]
    pub(super) fn lock(&self) -> spin::MutexGuard<'_, Shard> {
        match self.0.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    #[cold]
    pub(super) fn lock_contended(&self) -> spin::MutexGuard<'_, Shard> {
        loop {
            for _ in 0..LATCH_SPINS {
                if !self.0.is_locked() {
                    if let Some(guard) = self.0.try_lock() {
                        return guard;
                    }
                }
                core::hint::spin_loop();
            }
            #[cfg(any(test, feature = "std"))]
            std::thread::yield_now();
        }
    }
}

pub(super) struct Shard {
    pub(super) map: SlotMap,
    pub(super) arena: Vec<f32>,
    /// Free arena ranges by length.
    pub(super) free: FreeLists,
    /// `Placement::Dense` only: the pages of home keys, by page number (grown to the highest
    /// page touched; empty for a range too wide to index, whose home keys stay in the table).
    pub(super) pages: Vec<PageEntry>,
    /// `Placement::Dense` only: home keys of pages not allocated yet that have a slot in the
    /// table (the sum of the pages' `table_keys`), which decides when a shard stops staging
    /// its home keys in the table (see `Store::first_touch`).
    pub(super) staged: u32,
}

/// Free arena ranges by length.
pub(super) type FreeLists = HashMap<u32, Vec<u32>, BuildHasherDefault<MixHasher<0>>>;

pub(super) fn alloc_range(shard: &mut Shard, len: usize) -> Option<u32> {
    let len32 = u32::try_from(len).ok()?;
    if let Some(off) = shard.free.get_mut(&len32).and_then(|v| v.pop()) {
        return Some(off);
    }
    let off = shard.arena.len();
    let end = off.checked_add(len)?;
    if end > u32::MAX as usize {
        return None;
    }
    shard.arena.resize(end, 0.0);
    Some(off as u32)
}
