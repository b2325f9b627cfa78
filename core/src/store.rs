//! The parameter store: the values this node holds, shared by worker threads and the node's
//! protocol state.
//!
//! Sharded by key hash; each shard is a `hashbrown` map behind one `spin` latch, with values in
//! one contiguous arena per shard. A worker's local access takes exactly one latch (its key's
//! shard) and copies or adds in place; it never waits for the protocol.
//!
//! A slot is one of:
//! - **owned**: this node holds the key's main copy (with its epoch and version);
//! - **away**: only on the key's home node: the key lives elsewhere; the slot records the owner
//!   and epoch the home node knows of (the home node's ownership table *is* these slots);
//! - **replica**: a copy of a main copy held elsewhere, with the owner's version of its last
//!   refresh and the local updates not yet sent to the owner (the *delta*). Workers read it and
//!   add to it like a main copy; the node sends the delta in its sync rounds. Only filled
//!   replicas are in the store: one that is asked for but has not arrived is simply absent. On
//!   the home node a replica slot also keeps the ownership record.
//!
//! Keys are sparse: a home node creates a key's slot on first touch, with the configured
//! initial value. Keys never touched take no memory.
//!
//! Under [`Placement::Dense`] the keys homed here can be kept apart, in **pages**: each home
//! key has a dense home index (see [`crate::placement`]); the index picks the shard and, within
//! it, a page of up to 256 keys and a position in the page. A page holds each of its keys' home
//! record (state, owner, epoch, version: 16 bytes) and room for its value; the key itself is not
//! stored. A page key is untouched (implicitly held here, with its initial value), owned, or
//! away. A replica held at the home node of a key that is away lives in the shard's table
//! beside the page. Keys homed elsewhere (moved in, or replicas) are in the tables as under
//! [`Placement::Hashed`].
//!
//! A page is allocated only once enough of its keys are touched: until then its touched keys
//! have slots in the shard's table, exactly as home keys do under the hashed placement, and
//! the shard counts them. When their slots would take more room than the whole page (about
//! half of the page's keys for short values, more for long ones), the page is allocated and
//! takes them, and the table and arena give back the room they leave. A model that touches
//! most of its range ends with its home keys in pages; one that touches its range sparsely
//! (hashed feature ids) keeps them in tables and pays what the hashed placement pays. A range
//! too wide to index (more than 2^16 pages per shard) keeps every key in tables.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::hash::BuildHasherDefault;
use core::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::{HashMap, HashTable};

use crate::config::{Config, Init, Placement};
use crate::ids::{mix, Epoch, Key, MixHasher, NodeId, Version};
use crate::layout::Layout;
use crate::placement::Homes;
use kernels::{add_into, add_into_both};

mod kernels;
mod standalone;

pub use standalone::Standalone;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Owned,
    Away,
    Replica,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    version: Version,
    off: u32,
    len: u32,
    epoch: Epoch,
    owner: NodeId,
    state: State,
}

/// A shard's table of slots by key. It hashes a key with its [`mix`] turned by 16 bits, so that
/// the bits that pick a bucket and a tag are neither the bits that pick the shard (bits 40 and
/// up of the mix, see `Store::place`) nor the low bits that `hashed_home` reduces modulo the node
/// count. The `_mixed` methods take the mix `Store::place` computed, so that a lookup on the hot
/// path mixes its key once.
#[derive(Default)]
struct SlotMap(HashTable<(Key, Slot)>);

impl SlotMap {
    #[inline(always)]
    fn hash(mix: u64) -> u64 {
        mix.rotate_right(16)
    }

    #[inline(always)]
    fn get_mixed(&self, mix: u64, key: Key) -> Option<&Slot> {
        self.0.find(Self::hash(mix), |(k, _)| *k == key).map(|(_, s)| s)
    }

    #[inline(always)]
    fn get_mut_mixed(&mut self, mix: u64, key: Key) -> Option<&mut Slot> {
        self.0.find_mut(Self::hash(mix), |(k, _)| *k == key).map(|(_, s)| s)
    }

    #[inline(always)]
    fn get(&self, key: &Key) -> Option<&Slot> {
        self.get_mixed(mix(*key), *key)
    }

    #[inline(always)]
    fn get_mut(&mut self, key: &Key) -> Option<&mut Slot> {
        self.get_mut_mixed(mix(*key), *key)
    }

    fn contains_key(&self, key: &Key) -> bool {
        self.get(key).is_some()
    }

    /// Sets the slot of `key`, inserting or replacing.
    fn insert(&mut self, key: Key, slot: Slot) -> &mut Slot {
        let hash = Self::hash(mix(key));
        let entry = self.0.entry(hash, |(k, _)| *k == key, |(k, _)| Self::hash(mix(*k)));
        &mut entry.insert((key, slot)).into_mut().1
    }

    fn remove(&mut self, key: &Key) -> Option<Slot> {
        let key = *key;
        match self.0.find_entry(Self::hash(mix(key)), |(k, _)| *k == key) {
            Ok(e) => Some(e.remove().0 .1),
            Err(_) => None,
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&Key, &Slot)> {
        self.0.iter().map(|(k, s)| (k, s))
    }

    fn slots_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.0.iter_mut().map(|(_, s)| s)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Shrinks the table to fit its slots.
    fn shrink(&mut self) {
        self.0.shrink_to(0, |(k, _)| Self::hash(mix(*k)));
    }

    fn allocation_size(&self) -> usize {
        self.0.allocation_size()
    }
}

/// A shard behind its latch, alone in its cache lines: two threads working on neighbouring
/// shards do not invalidate each other's latch, and finding a shard is a shift, not a multiply.
#[repr(align(128))]
struct Latched(spin::Mutex<Shard>);

// One shard in one 128-byte block (two cache lines).
const _: () = assert!(core::mem::size_of::<Latched>() == 128);

/// Failed looks at a held latch after which a waiting thread gives up its core (with `std`).
const LATCH_SPINS: u32 = 64;

impl Latched {
    /// Takes the latch. A latch is held for a copy or an add, so a thread that finds it held
    /// spins a little, reading (not writing) its cache line; with `std`, it then yields its
    /// core before trying again. On a machine with more runnable threads than cores the
    /// holder may have lost its core mid-copy, and spinning until it is scheduled again would
    /// burn the waiter's whole time slice.
    #[inline(always)]
    fn lock(&self) -> spin::MutexGuard<'_, Shard> {
        match self.0.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    #[cold]
    fn lock_contended(&self) -> spin::MutexGuard<'_, Shard> {
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

struct Shard {
    map: SlotMap,
    arena: Vec<f32>,
    /// Free arena ranges by length.
    free: FreeLists,
    /// `Placement::Dense` only: the pages of home keys, by page number (grown to the highest
    /// page touched; empty for a range too wide to index, whose home keys stay in the table).
    pages: Vec<PageEntry>,
}

/// Most pages a shard indexes: 40 bytes of index per 256 keys of the shard's range. A range
/// wider than this (about 2^32 home keys per node with 256 shards) keeps every key in tables.
const PAGES_PER_SHARD_MAX: u64 = 1 << 16;

/// The bytes a key's slot takes in a table, at a typical load of the table (a 33-byte bucket
/// in a table between 7/16 and 7/8 full): what a page is weighed against.
const TABLE_SLOT_BYTES: usize = 48;

/// One page of a shard's index.
#[derive(Default)]
struct PageEntry {
    /// The page, once its keys are dense enough (see `Store::promote_at`).
    page: Option<Page>,
    /// Until then: how many of its keys have a slot in the shard's table (which they keep until
    /// the page takes them).
    table_keys: u16,
}

/// The page `page` of a shard's index, if it is allocated.
#[inline]
fn page_of(pages: &[PageEntry], page: u64) -> Option<&Page> {
    pages.get(usize::try_from(page).ok()?)?.page.as_ref()
}

/// The allocated pages of a shard's index, with their numbers.
fn allocated(pages: &[PageEntry]) -> impl Iterator<Item = (u64, &Page)> {
    pages.iter().enumerate().filter_map(|(i, e)| Some((i as u64, e.page.as_ref()?)))
}

#[inline]
fn page_of_mut(pages: &mut [PageEntry], page: u64) -> Option<&mut Page> {
    pages.get_mut(usize::try_from(page).ok()?)?.page.as_mut()
}

/// Free arena ranges by length.
type FreeLists = HashMap<u32, Vec<u32>, BuildHasherDefault<MixHasher<0>>>;

/// The home record at position `pos` of page `page`, if the page is allocated (if not, the
/// key's slot is in the table, or the key is untouched).
fn home_record(pages: &[PageEntry], page: u64, pos: usize) -> Option<&HomeSlot> {
    page_of(pages, page).and_then(|p| p.slots.get(pos))
}

/// The home record of a key in a page.
#[derive(Clone, Copy, Debug, Default)]
struct HomeSlot {
    version: Version,
    epoch: Epoch,
    owner: NodeId,
    state: HomeState,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum HomeState {
    /// Never touched: held here, with its initial value (not yet written into the page).
    #[default]
    Untouched,
    Owned,
    /// Held by `owner` as of `epoch`; a replica held here is in the shard's table.
    Away,
}

/// Home keys `2^page_bits` in a row (by home index within one shard; fewer in a shard's last
/// page): their records, and room for each one's value, `stride` floats apart.
struct Page {
    slots: Box<[HomeSlot]>,
    values: Box<[f32]>,
}

/// Where a key's slot is.
#[derive(Clone, Copy)]
enum Place {
    /// In the shard's table (whether this node is the key's home: `Store::table_home`).
    Table { shard: usize, mix: u64 },
    /// A home key in a page (`Placement::Dense`).
    Page { shard: usize, page: u64, pos: usize },
}

/// The most keys in a page, and the most floats of values a page aims at (a page of long
/// values holds fewer keys).
const PAGE_KEYS_MAX: usize = 256;
const PAGE_FLOATS: usize = 1 << 16;

impl Slot {
    /// Floats the slot occupies in the arena: the value, and for a replica its delta after it.
    #[inline]
    fn alloc_len(&self) -> u32 {
        match self.state {
            State::Owned => self.len,
            State::Replica => 2 * self.len,
            State::Away => 0,
        }
    }
}

/// A replica's state as its holder sends it in a sync round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaTaken {
    /// The owner's version the replica was last refreshed to.
    pub version: Version,
    /// Whether the delta (appended to the caller's buffer) has any non-zero element.
    pub nonzero: bool,
}

/// The bytes a [`Store`] has allocated, by use. See [`Store::footprint`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// The shards' hash tables of slots: one slot per key held here, replicated here, or (on
    /// its home node) away.
    pub slots: usize,
    /// The shards' value arenas, used and spare (a range freed by a key that left stays for
    /// the next one).
    pub arenas: usize,
    /// The lists of free arena ranges.
    pub free_lists: usize,
}

/// What the home node knows about where a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whereabouts {
    /// Held here, as the main copy with this epoch.
    Here(Epoch),
    /// Held by another node, as of this epoch (home node only).
    Away(NodeId, Epoch),
    /// Not here, and this node is not its home: nothing known.
    Unknown,
}

/// Why a key could not be installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstallError {
    /// The store holds `store_keys_max` keys already.
    Full,
    /// The key is already held here: a second main copy would be created.
    AlreadyOwned,
    /// The values' length does not match the layout.
    Length,
    /// The arena of the shard cannot grow further.
    ArenaFull,
}

/// The values this node holds. See the module docs.
pub struct Store {
    shards: Box<[Latched]>,
    /// The shard count minus one (a power of two minus one).
    shard_mask: usize,
    /// log2 of the shard count.
    shard_bits: u32,
    /// log2 of the keys per page, and the floats between two keys' values in a page.
    page_bits: u32,
    page_stride: usize,
    /// Pages a shard may index (0: none, home keys stay in tables).
    pages_max: u64,
    layout: Layout,
    homes: Homes,
    me: NodeId,
    init: Init,
    seed: u64,
    held: AtomicUsize,
    held_max: usize,
    replicas: AtomicUsize,
    replicas_max: usize,
}

impl Store {
    /// An empty store for node `me` of the cluster `cfg` describes.
    pub fn new(cfg: &Config, me: NodeId) -> Store {
        let n = cfg.store_shards.clamp(1, crate::config::STORE_SHARDS_MAX).next_power_of_two();
        let homes = Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
        let page_stride = cfg.layout.len_max().max(1);
        let page_keys = (PAGE_FLOATS / page_stride).clamp(1, PAGE_KEYS_MAX);
        // A power of two: the largest not above `page_keys`.
        let page_bits = usize::BITS - 1 - page_keys.leading_zeros();
        let pages_max = match cfg.placement {
            Placement::Dense => Some((homes.homed_on(me) >> n.trailing_zeros() >> page_bits) + 1)
                .filter(|p| *p <= PAGES_PER_SHARD_MAX)
                .unwrap_or(0),
            Placement::Hashed => 0,
        };

        let shards = (0..n)
            .map(|_| {
                Latched(spin::Mutex::new(Shard {
                    map: SlotMap::default(),
                    arena: Vec::new(),
                    free: HashMap::default(),
                    pages: Vec::new(),
                }))
            })
            .collect();
        Store {
            shards,
            shard_mask: n - 1,
            shard_bits: n.trailing_zeros(),
            page_bits,
            page_stride,
            pages_max,
            layout: cfg.layout.clone(),
            homes,
            me,
            init: cfg.init,
            seed: cfg.seed,
            held: AtomicUsize::new(0),
            held_max: cfg.store_keys_max,
            replicas: AtomicUsize::new(0),
            replicas_max: cfg.replicas_max,
        }
    }

    /// The layout of the keys.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Main copies of keys homed elsewhere held here now, plus slots reserved for keys on their
    /// way here: what `store_keys_max` bounds. (Keys homed here are bounded by the layout.)
    pub fn keys_held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

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
            let _ =
                self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| Some(h.saturating_sub(n)));
        }
    }

    /// Replicas held here now.
    pub fn replicas_held(&self) -> usize {
        self.replicas.load(Ordering::Relaxed)
    }

    /// The homes of keys this store follows.
    pub fn homes(&self) -> &Homes {
        &self.homes
    }

    #[inline(always)]
    fn place(&self, key: Key) -> Place {
        if self.homes.placement() == Placement::Dense {
            if let Some(page) = self.page_place(key) {
                return page;
            }
        }
        // Bits 40 and up of the mix pick a table's shard: independent of `hashed_home`, which uses
        // the mix modulo the node count, and of the bits the table hashes with (`SlotMap`).
        let mix = mix(key);
        Place::Table { shard: (mix >> 40) as usize & self.shard_mask, mix }
    }

    /// Under the dense placement, the page place of `key` if it is homed here. `place` calls it
    /// only under that placement: the hashed placement's accesses pay one test for it.
    #[inline]
    fn page_place(&self, key: Key) -> Option<Place> {
        let (home, index) = self.homes.dense(key)?;
        if home != self.me {
            return None;
        }
        let local = index >> self.shard_bits;
        Some(Place::Page {
            shard: index as usize & self.shard_mask,
            page: local >> self.page_bits,
            pos: (local & ((1 << self.page_bits) - 1)) as usize,
        })
    }

    /// Whether this node keeps the home record of `key` in `key`'s shard's table (with
    /// `pages`, that shard's pages): the key is homed here, and under the dense placement its
    /// page is not allocated.
    fn record_in_table(&self, pages: &[PageEntry], key: Key) -> bool {
        match self.place(key) {
            Place::Table { mix, .. } => self.table_home_mix(mix),
            Place::Page { page, .. } => page_of(pages, page).is_none(),
        }
    }

    /// Whether the key with this [`mix`], whose slot belongs in a table, is homed here: only
    /// under the hashed placement (under the dense one a home key's place is in a page, whose
    /// callers know it is home). Computed only where needed: a division.
    #[inline]
    fn table_home_mix(&self, mix: u64) -> bool {
        self.homes.hashed_home_is(mix, self.me)
    }

    /// The latch of the shard that has `key`'s slot (its page or its table).
    #[inline]
    fn shard(&self, key: Key) -> &Latched {
        match self.place(key) {
            Place::Table { shard, .. } | Place::Page { shard, .. } => &self.shards[shard],
        }
    }

    /// A home key of page `page` of shard `i`, whose page is not allocated and which has no
    /// slot in the table, is touched for the first time. If that makes the page's keys dense
    /// enough, the page is allocated and takes the table's slots of its keys, and the answer is
    /// true (the key is then untouched in the page). Otherwise the key counts toward the page
    /// and the caller creates its slot in the table (if that fails, for want of arena room, the
    /// page only comes one key early).
    fn first_touch(&self, shard: &mut Shard, i: usize, page: u64) -> bool {
        let Some(at) = usize::try_from(page).ok().filter(|p| (*p as u64) < self.pages_max) else {
            return false;
        };
        if at >= shard.pages.len() {
            shard.pages.resize_with(at + 1, PageEntry::default);
        }
        let keys = self.page_len(i, at as u64);
        let entry = &mut shard.pages[at];
        if usize::from(entry.table_keys) + 1 >= self.promote_at(keys) {
            self.promote(shard, i, at, keys);
            return true;
        }
        entry.table_keys += 1;
        false
    }

    /// How many keys page `at` of shard `i` has: all but a shard's last page have
    /// `2^page_bits`.
    fn page_len(&self, i: usize, at: u64) -> usize {
        // The shard's home indexes are i, i + shards, i + 2 shards, ... below `homed_on`.
        let shard_keys = self.homes.homed_on(self.me).saturating_sub(i as u64).div_ceil(1 << self.shard_bits);
        let before = at.saturating_mul(1 << self.page_bits);
        shard_keys.saturating_sub(before).min(1 << self.page_bits) as usize
    }

    /// How many of a page's `keys` must have a slot in the table for the page to take them: the
    /// point where their table slots and arena ranges would take more room than the page.
    fn promote_at(&self, keys: usize) -> usize {
        let value = self.page_stride * core::mem::size_of::<f32>();
        let page = keys * (core::mem::size_of::<HomeSlot>() + value);
        page.div_ceil(TABLE_SLOT_BYTES + value).max(1)
    }

    /// Allocates page `at` of shard `i` and moves the slots of its keys from the table into it.
    /// A replica held here of a key that is away stays in the table; its ownership record goes
    /// to the page.
    fn promote(&self, shard: &mut Shard, i: usize, at: usize, keys: usize) {
        let stride = self.page_stride;
        let mut page = Page {
            slots: alloc::vec![HomeSlot::default(); keys].into_boxed_slice(),
            values: alloc::vec![0.0; keys * stride].into_boxed_slice(),
        };
        for (pos, record) in page.slots.iter_mut().enumerate() {
            let Some(key) = self.page_key(i, at as u64, pos) else { continue };
            let Some(s) = shard.map.get(&key).copied() else { continue };
            let state = match s.state {
                State::Owned => {
                    let (off, len) = (s.off as usize, s.len as usize);
                    if let (Some(to), Some(from)) = (
                        page.values.get_mut(pos * stride..pos * stride + len),
                        shard.arena.get(off..off + len),
                    ) {
                        to.copy_from_slice(from);
                    }
                    shard.free.entry(s.alloc_len()).or_default().push(s.off);
                    shard.map.remove(&key);
                    HomeState::Owned
                }
                State::Away => {
                    shard.map.remove(&key);
                    HomeState::Away
                }
                State::Replica => HomeState::Away,
            };
            *record = HomeSlot { version: s.version, epoch: s.epoch, owner: s.owner, state };
        }
        shard.pages[at] = PageEntry { page: Some(page), table_keys: 0 };
        Self::compact(shard);
    }

    /// Gives back the spare room of a shard's table and arena once most of it is unused. Keys
    /// leave the table for pages in a burst when a dense model touches its keys; without this
    /// their table buckets and arena ranges would stay allocated for good.
    fn compact(shard: &mut Shard) {
        if shard.map.len() * 4 < shard.map.capacity() {
            shard.map.shrink();
        }
        let free: usize = shard.free.iter().map(|(len, offs)| *len as usize * offs.len()).sum();
        if free * 4 <= shard.arena.len() * 3 {
            return;
        }
        let mut arena = Vec::with_capacity(shard.arena.len() - free.min(shard.arena.len()));
        for slot in shard.map.slots_mut() {
            let (off, len) = (slot.off as usize, slot.alloc_len() as usize);
            if let Some(range) = shard.arena.get(off..off + len).filter(|_| len > 0) {
                slot.off = arena.len() as u32;
                arena.extend_from_slice(range);
            }
        }
        shard.arena = arena;
        shard.free = FreeLists::default();
    }

    /// The key at position `pos` of page `page` of shard `shard` (the inverse of `place`).
    fn page_key(&self, shard: usize, page: u64, pos: usize) -> Option<Key> {
        let local = (page << self.page_bits) | pos as u64;
        self.homes.key_at(self.me, (local << self.shard_bits) | shard as u64)
    }

    /// The initial value of element `i` of `key`: deterministic in (seed, key, i).
    pub fn initial_value(init: Init, seed: u64, key: Key, i: usize) -> f32 {
        match init {
            Init::Zero => 0.0,
            Init::Uniform { scale } => {
                let h = mix(Key(seed ^ mix(Key(key.0.wrapping_add((i as u64) << 40)))));
                // 24 random bits mapped to [-1, 1).
                let unit = ((h >> 40) as f32) / ((1u64 << 23) as f32) - 1.0;
                unit * scale
            }
        }
    }

    /// Runs `f` on the value of `key` (and, for a replica, its delta) if this node holds its
    /// main copy, or a replica when `REPLICA` allows it; creates the main copy first if this is
    /// the key's home node and the key was never touched. Returns whether it ran.
    #[inline(always)]
    fn with_value<const REPLICA: bool, R>(
        &self,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        let (shard, mix) = match self.place(key) {
            Place::Table { shard, mix } => (shard, mix),
            Place::Page { shard, page, pos } => {
                return self.with_page_value::<REPLICA, R>(key, shard, page, pos, f)
            }
        };
        let mut guard = self.shards[shard].lock();
        self.with_table_value::<REPLICA, R>(&mut guard, key, mix, || self.table_home_mix(mix), f)
    }

    /// [`Store::with_value`] of a key whose slot belongs in `shard`'s table (its mix is `mix`);
    /// `home` says, when the key has no slot, whether this is its home node (which creates it).
    #[inline(always)]
    fn with_table_value<const REPLICA: bool, R>(
        &self,
        shard: &mut Shard,
        key: Key,
        mix: u64,
        home: impl FnOnce() -> bool,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        if let Some(slot) = shard.map.get_mut_mixed(mix, key) {
            return Self::apply::<REPLICA, R>(&mut shard.arena, slot, f);
        }
        if !home() {
            return None;
        }
        self.materialize(shard, key)?;
        let slot = shard.map.get_mut_mixed(mix, key)?;
        Self::apply::<REPLICA, R>(&mut shard.arena, slot, f)
    }

    /// [`Store::with_value`] of a key in a page. Out of line, so that the table path that
    /// every access takes under the hashed placement stays as short as it was.
    #[inline(never)]
    fn with_page_value<const REPLICA: bool, R>(
        &self,
        key: Key,
        shard: usize,
        page: u64,
        pos: usize,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        let i = shard;
        let mut guard = self.shards[i].lock();
        let shard = &mut *guard;
        let len = self.layout.len_of(key)?;
        let stride = self.page_stride;
        if page_of(&shard.pages, page).is_none() {
            // The key's slot is in the table (or goes there), as under the hashed placement,
            // unless this first touch allocates the page.
            let mix = mix(key);
            if let Some(slot) = shard.map.get_mut_mixed(mix, key) {
                return Self::apply::<REPLICA, R>(&mut shard.arena, slot, f);
            }
            if !self.first_touch(shard, i, page) {
                return self.with_table_value::<REPLICA, R>(shard, key, mix, || true, f);
            }
        }
        let Shard { map, arena, pages, .. } = shard;
        let p = page_of_mut(pages, page)?;
        let slot = p.slots.get_mut(pos)?;
        let value = p.values.get_mut(pos * stride..pos * stride + len)?;
        match slot.state {
            HomeState::Owned => Some(f(value, None, &mut slot.version)),
            HomeState::Untouched => {
                self.initialize(key, value);
                slot.state = HomeState::Owned;
                Some(f(value, None, &mut slot.version))
            }
            HomeState::Away if REPLICA => {
                let slot = map.get_mut(&key)?;
                Self::apply::<REPLICA, R>(arena, slot, f)
            }
            HomeState::Away => None,
        }
    }

    /// Writes the initial value of `key` into `value`.
    fn initialize(&self, key: Key, value: &mut [f32]) {
        for (i, v) in value.iter_mut().enumerate() {
            *v = Self::initial_value(self.init, self.seed, key, i);
        }
    }

    #[inline(always)]
    fn apply<const REPLICA: bool, R>(
        arena: &mut [f32],
        slot: &mut Slot,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        let (off, len) = (slot.off as usize, slot.len as usize);
        match slot.state {
            State::Owned => {
                let value = arena.get_mut(off..off + len)?;
                Some(f(value, None, &mut slot.version))
            }
            State::Replica if REPLICA => {
                let both = arena.get_mut(off..off + 2 * len)?;
                let (value, delta) = both.split_at_mut(len);
                Some(f(value, Some(delta), &mut slot.version))
            }
            _ => None,
        }
    }

    fn materialize<'s>(&self, shard: &'s mut Shard, key: Key) -> Option<&'s mut Slot> {
        // A key homed here needs no room from `store_keys_max`: its slot is part of this node's
        // share of the layout, which bounds it.
        let len = self.layout.len_of(key)?;
        let off = alloc_range(shard, len)?;
        self.initialize(key, &mut shard.arena[off as usize..off as usize + len]);
        let slot = Slot {
            version: Version(0),
            off,
            len: len as u32,
            epoch: Epoch(0),
            owner: self.me,
            state: State::Owned,
        };
        Some(shard.map.insert(key, slot))
    }

    fn reserve(&self) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| (h < self.held_max).then_some(h + 1))
            .is_ok()
    }

    fn release(&self) {
        self.unreserve_slots(1);
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

    /// The node's name for [`Store::set`] (it goes once the node's calls are renamed).
    #[inline]
    pub(crate) fn write(&self, key: Key, values: &[f32]) -> bool {
        self.set(key, values)
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
        let (shard, mix) = match self.place(key) {
            Place::Table { shard, mix } => (shard, mix),
            Place::Page { shard, page, pos } => {
                let shard = self.shards[shard].lock();
                if page_of(&shard.pages, page).is_none() {
                    // In the table (owned, or away with or without a replica here), or untouched.
                    return match shard.map.get(&key) {
                        Some(s) if s.state == State::Owned => Whereabouts::Here(s.epoch),
                        Some(s) => Whereabouts::Away(s.owner, s.epoch),
                        None => Whereabouts::Here(Epoch(0)),
                    };
                }
                return match home_record(&shard.pages, page, pos) {
                    Some(s) if s.state == HomeState::Away => Whereabouts::Away(s.owner, s.epoch),
                    Some(s) => Whereabouts::Here(s.epoch),
                    None => Whereabouts::Here(Epoch(0)),
                };
            }
        };
        let shard = self.shards[shard].lock();
        match shard.map.get_mixed(mix, key) {
            Some(s) if s.state == State::Owned => Whereabouts::Here(s.epoch),
            Some(s) if s.state == State::Away || self.table_home_mix(mix) => {
                Whereabouts::Away(s.owner, s.epoch)
            }
            Some(_) => Whereabouts::Unknown,
            None if self.table_home_mix(mix) => Whereabouts::Here(Epoch(0)),
            None => Whereabouts::Unknown,
        }
    }

    /// With one lookup: `None` if a worker's access to `key` is local (its main copy or a
    /// replica is here: [`Store::is_local`]), else its [`Store::whereabouts`] (then `Away` or
    /// `Unknown`).
    #[inline(always)]
    pub fn whereabouts_if_remote(&self, key: Key) -> Option<Whereabouts> {
        match self.place(key) {
            Place::Table { shard, mix } => match self.shards[shard].lock().map.get_mixed(mix, key) {
                Some(s) if s.state == State::Away => Some(Whereabouts::Away(s.owner, s.epoch)),
                Some(_) => None,
                None if self.table_home_mix(mix) => None,
                None => Some(Whereabouts::Unknown),
            },
            Place::Page { shard, page, pos } => {
                let shard = self.shards[shard].lock();
                if page_of(&shard.pages, page).is_none() {
                    // In the table, or untouched.
                    return match shard.map.get(&key) {
                        Some(s) if s.state == State::Away => Some(Whereabouts::Away(s.owner, s.epoch)),
                        _ => None,
                    };
                }
                match home_record(&shard.pages, page, pos) {
                    Some(s) if s.state == HomeState::Away && !shard.map.contains_key(&key) => {
                        Some(Whereabouts::Away(s.owner, s.epoch))
                    }
                    _ => None,
                }
            }
        }
    }

    /// Removes the main copy of `key` to hand it to `to`: appends the value to `out` and
    /// returns the new epoch and the version. On the home node the slot becomes "away at `to`".
    pub(crate) fn take(&self, key: Key, to: NodeId, out: &mut Vec<f32>) -> Option<(Epoch, Version)> {
        let (shard, mix) = match self.place(key) {
            Place::Table { shard, mix } => (shard, mix),
            Place::Page { shard, page, pos } => return self.take_home(key, shard, page, pos, to, out),
        };
        let home = self.table_home_mix(mix);
        let mut guard = self.shards[shard].lock();
        self.take_table(&mut guard, key, mix, home, to, out)
    }

    /// [`Store::take`] of a key whose slot belongs in `shard`'s table (its mix is `mix`), on its
    /// home node if `home`.
    fn take_table(
        &self,
        shard: &mut Shard,
        key: Key,
        mix: u64,
        home: bool,
        to: NodeId,
        out: &mut Vec<f32>,
    ) -> Option<(Epoch, Version)> {
        if home && shard.map.get_mixed(mix, key).is_none() {
            self.materialize(shard, key)?;
        }
        let Shard { map, arena, free, .. } = shard;
        let slot = map.get_mut_mixed(mix, key)?;
        if slot.state != State::Owned {
            return None;
        }
        let (off, len) = (slot.off as usize, slot.len as usize);
        out.extend_from_slice(arena.get(off..off + len)?);
        let taken = *slot;
        let epoch = taken.epoch.next();
        if home {
            // The home node's record of the key, in the same slot.
            *slot = Slot { state: State::Away, owner: to, epoch, off: 0, len: 0, ..taken };
        } else {
            map.remove(&key);
            self.release();
        }
        free.entry(taken.alloc_len()).or_default().push(taken.off);
        Some((epoch, taken.version))
    }

    /// [`Store::take`] of a key in a page.
    fn take_home(
        &self,
        key: Key,
        shard: usize,
        page: u64,
        pos: usize,
        to: NodeId,
        out: &mut Vec<f32>,
    ) -> Option<(Epoch, Version)> {
        let len = self.layout.len_of(key)?;
        let stride = self.page_stride;
        let i = shard;
        let mut guard = self.shards[i].lock();
        let shard = &mut *guard;
        if page_of(&shard.pages, page).is_none() {
            let mix = mix(key);
            if shard.map.get_mixed(mix, key).is_some() || !self.first_touch(shard, i, page) {
                return self.take_table(shard, key, mix, true, to, out);
            }
        }
        let p = page_of_mut(&mut shard.pages, page)?;
        let slot = p.slots.get_mut(pos)?;
        match slot.state {
            HomeState::Away => return None,
            HomeState::Owned => out.extend_from_slice(p.values.get(pos * stride..pos * stride + len)?),
            HomeState::Untouched => {
                let at = out.len();
                out.resize(at + len, 0.0);
                self.initialize(key, &mut out[at..]);
            }
        }
        let epoch = slot.epoch.next();
        *slot = HomeSlot { state: HomeState::Away, owner: to, epoch, ..*slot };
        Some((epoch, slot.version))
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
        let (shard, mix) = match self.place(key) {
            Place::Table { shard, mix } => (shard, mix),
            Place::Page { shard, page, pos } => {
                return self.install_home(key, shard, page, pos, epoch, version, values, reserved)
            }
        };
        let home = self.table_home_mix(mix);
        let mut guard = self.shards[shard].lock();
        self.install_table(&mut guard, key, mix, home, epoch, version, values, reserved)
    }

    /// [`Store::install`] of a key whose slot belongs in `shard`'s table (its mix is `mix`), on
    /// its home node if `home`.
    #[allow(clippy::too_many_arguments)]
    fn install_table(
        &self,
        shard: &mut Shard,
        key: Key,
        mix: u64,
        home: bool,
        epoch: Epoch,
        version: Version,
        values: &[f32],
        reserved: bool,
    ) -> Result<(), InstallError> {
        let old = shard.map.get_mixed(mix, key).copied();
        match old {
            Some(s) if s.state == State::Owned => return Err(InstallError::AlreadyOwned),
            None if home => return Err(InstallError::AlreadyOwned),
            _ => {}
        }
        // Keys homed here take no room from `store_keys_max` (a reservation for one is given
        // back); others take the reserved slot or a new one.
        let counted = !home && !reserved;
        if counted && !self.reserve() {
            return Err(InstallError::Full);
        }
        let Some(off) = alloc_range(shard, values.len()) else {
            if counted {
                self.release();
            }
            return Err(InstallError::ArenaFull);
        };
        if home && reserved {
            self.release();
        }
        let len = values.len();
        shard.arena[off as usize..off as usize + len].copy_from_slice(values);
        let mut version = version;
        if let Some(r) = old.filter(|s| s.state == State::Replica) {
            let (roff, rlen) = (r.off as usize, r.len as usize);
            if let Some(unsent) = shard.arena.get(roff + rlen..roff + 2 * rlen) {
                if unsent.iter().any(|x| *x != 0.0) {
                    let unsent = unsent.to_vec();
                    version =
                        fold_unsent(&mut shard.arena[off as usize..off as usize + len], &unsent, version);
                }
            }
            self.retire_replica(&mut shard.free, &r);
        }
        let slot = Slot { version, off, len: len as u32, epoch, owner: self.me, state: State::Owned };
        shard.map.insert(key, slot);
        Ok(())
    }

    /// [`Store::install`] of a key in a page.
    #[allow(clippy::too_many_arguments)]
    fn install_home(
        &self,
        key: Key,
        shard: usize,
        page: u64,
        pos: usize,
        epoch: Epoch,
        version: Version,
        values: &[f32],
        reserved: bool,
    ) -> Result<(), InstallError> {
        let mut guard = self.shards[shard].lock();
        let shard = &mut *guard;
        let stride = self.page_stride;
        let Some(p) = page_of_mut(&mut shard.pages, page) else {
            // The key's record is in the table (or it is untouched: held here).
            return self.install_table(shard, key, mix(key), true, epoch, version, values, reserved);
        };
        let (Some(slot), Some(value)) =
            (p.slots.get_mut(pos), p.values.get_mut(pos * stride..pos * stride + values.len()))
        else {
            return Err(InstallError::Length);
        };
        if slot.state != HomeState::Away {
            return Err(InstallError::AlreadyOwned);
        }
        // A key homed here takes no room from `store_keys_max`.
        if reserved {
            self.release();
        }
        value.copy_from_slice(values);
        let mut version = version;
        if let Some(r) = shard.map.remove(&key) {
            // A replica held here becomes the main copy.
            let (roff, rlen) = (r.off as usize, r.len as usize);
            if let Some(unsent) = shard.arena.get(roff + rlen..roff + 2 * rlen) {
                version = fold_unsent(value, unsent, version);
            }
            self.retire_replica(&mut shard.free, &r);
        }
        *slot = HomeSlot { version, epoch, owner: self.me, state: HomeState::Owned };
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
        let (shard, page, mut home) = match self.place(key) {
            Place::Table { shard, mix } => (shard, None, self.table_home_mix(mix)),
            Place::Page { shard, page, pos } => (shard, Some((page, pos)), true),
        };
        let mut guard = self.shards[shard].lock();
        let shard = &mut *guard;
        let mut old = shard.map.get(&key).copied();
        if let Some((page, pos)) = page.filter(|(page, _)| page_of(&shard.pages, *page).is_some()) {
            // A home key in a page: a replica only while the key is away; its ownership record
            // stays in the page.
            home = false;
            match home_record(&shard.pages, page, pos) {
                Some(h) if h.state == HomeState::Away => {
                    old = old.or(Some(Slot {
                        version: h.version,
                        off: 0,
                        len: 0,
                        epoch: h.epoch,
                        owner: h.owner,
                        state: State::Away,
                    }))
                }
                _ => return Err(InstallError::AlreadyOwned),
            }
        }
        let (epoch, owner) = match old {
            Some(s) if s.state == State::Owned => return Err(InstallError::AlreadyOwned),
            // Untouched at its home: held here.
            None if home => return Err(InstallError::AlreadyOwned),
            Some(s) if s.state == State::Replica => {
                drop(guard);
                self.refresh_replica(key, version, values);
                return Ok(());
            }
            // On the home node the ownership record stays with the replica.
            Some(s) => (s.epoch, s.owner),
            None => (Epoch(0), owner),
        };
        if self
            .replicas
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| (h < self.replicas_max).then_some(h + 1))
            .is_err()
        {
            return Err(InstallError::Full);
        }
        let len = values.len();
        let Some(off) = alloc_range(shard, 2 * len) else {
            self.replicas.fetch_sub(1, Ordering::Relaxed);
            return Err(InstallError::ArenaFull);
        };
        let region = &mut shard.arena[off as usize..off as usize + 2 * len];
        region[..len].copy_from_slice(values);
        region[len..].fill(0.0);
        let slot = Slot { version, off, len: len as u32, epoch, owner, state: State::Replica };
        shard.map.insert(key, slot);
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
        let mut guard = self.shard(key).lock();
        let shard = &mut *guard;
        let taken = Self::take_delta_locked(shard, key, out)?;
        let slot = *shard.map.get(&key)?;
        self.retire_replica(&mut shard.free, &slot);
        // A home key's record stays: in the table, or in its page.
        if self.record_in_table(&shard.pages, key) {
            shard.map.insert(key, Slot { state: State::Away, off: 0, len: 0, ..slot });
        } else {
            shard.map.remove(&key);
        }
        Some(taken)
    }

    /// A replica's slot is gone (dropped, or turned into the main copy): its arena range goes
    /// to the free lists and it no longer counts against `replicas_max`.
    fn retire_replica(&self, free: &mut FreeLists, r: &Slot) {
        free.entry(r.alloc_len()).or_default().push(r.off);
        self.replicas.fetch_sub(1, Ordering::Relaxed);
    }

    /// Home node only: records that `owner` holds `key` as of `epoch`, if that is newer than
    /// what is known. Returns whether the record changed.
    pub(crate) fn record_owner(&self, key: Key, owner: NodeId, epoch: Epoch) -> bool {
        let (shard, page) = match self.place(key) {
            Place::Table { shard, mix } if self.table_home_mix(mix) => (shard, None),
            Place::Table { .. } => return false,
            Place::Page { shard, page, pos } => (shard, Some((page, pos))),
        };
        let mut guard = self.shards[shard].lock();
        let shard = &mut *guard;
        if let Some((page, pos)) = page.filter(|(page, _)| page_of(&shard.pages, *page).is_some()) {
            return match page_of_mut(&mut shard.pages, page).and_then(|p| p.slots.get_mut(pos)) {
                Some(s) if s.state == HomeState::Away && epoch > s.epoch => {
                    s.owner = owner;
                    s.epoch = epoch;
                    true
                }
                _ => false,
            };
        }
        match shard.map.get_mut(&key) {
            Some(s) if s.state != State::Owned && epoch > s.epoch => {
                s.owner = owner;
                s.epoch = epoch;
                true
            }
            _ => false,
        }
    }

    /// Home node only: calls `f` for every key homed here that another node holds, with the
    /// owner last recorded. Takes each shard's latch in turn.
    pub fn for_each_away(&self, mut f: impl FnMut(Key, NodeId)) {
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = shard.lock();
            // A replica of a key homed here keeps the key's ownership record in its slot.
            let away = |k: &Key, s: &Slot| {
                s.state == State::Away
                    || (s.state == State::Replica && self.record_in_table(&shard.pages, *k))
            };
            for (k, s) in shard.map.iter().filter(|(k, s)| away(k, s)) {
                f(*k, s.owner);
            }
            for (page, p) in allocated(&shard.pages) {
                for (pos, s) in p.slots.iter().enumerate().filter(|(_, s)| s.state == HomeState::Away) {
                    if let Some(k) = self.page_key(i, page, pos) {
                        f(k, s.owner);
                    }
                }
            }
        }
    }

    /// Calls `f` for every main copy held here (in no particular order) with its epoch,
    /// version and value. Takes each shard's latch in turn.
    pub fn for_each_owned(&self, mut f: impl FnMut(Key, Epoch, Version, &[f32])) {
        let stride = self.page_stride;
        for (i, shard) in self.shards.iter().enumerate() {
            let shard = shard.lock();
            for (k, s) in shard.map.iter().filter(|(_, s)| s.state == State::Owned) {
                let (off, len) = (s.off as usize, s.len as usize);
                if let Some(v) = shard.arena.get(off..off + len) {
                    f(*k, s.epoch, s.version, v);
                }
            }
            for (page, p) in allocated(&shard.pages) {
                for (pos, s) in p.slots.iter().enumerate().filter(|(_, s)| s.state == HomeState::Owned) {
                    let Some(k) = self.page_key(i, page, pos) else { continue };
                    let Some(len) = self.layout.len_of(k) else { continue };
                    if let Some(v) = p.values.get(pos * stride..pos * stride + len) {
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
        for shard in self.shards.iter() {
            let shard = shard.lock();
            f.slots += shard.map.allocation_size();
            f.slots += shard.pages.capacity() * core::mem::size_of::<PageEntry>();
            for (_, p) in allocated(&shard.pages) {
                f.slots += p.slots.len() * core::mem::size_of::<HomeSlot>();
                f.arenas += p.values.len() * core::mem::size_of::<f32>();
            }
            f.arenas += shard.arena.capacity() * core::mem::size_of::<f32>();
            f.free_lists += shard.free.allocation_size();
            f.free_lists += shard.free.values().map(|v| v.capacity() * 4).sum::<usize>();
        }
        f
    }
}

/// A worker's add to a main copy or (with `unsent`) a replica.
#[inline(always)]
fn add_local(v: &mut [f32], unsent: Option<&mut [f32]>, version: &mut Version, delta: &[f32]) -> bool {
    if v.len() != delta.len() {
        return false;
    }
    match unsent {
        Some(u) => add_into_both(v, u, delta),
        None => {
            add_into(v, delta);
            *version = version.next();
        }
    }
    true
}

/// Folds a replica's unsent `delta` into its key's main copy `value`, which arrived with
/// `version`: a non-zero delta counts as one more update. Returns the version after it. A
/// delta of another length than the value (a peer's bug) is left out.
pub(crate) fn fold_unsent(value: &mut [f32], delta: &[f32], version: Version) -> Version {
    if delta.len() != value.len() || delta.iter().all(|x| *x == 0.0) {
        return version;
    }
    add_into(value, delta);
    version.next()
}

fn alloc_range(shard: &mut Shard, len: usize) -> Option<u32> {
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

#[cfg(test)]
mod tests;
