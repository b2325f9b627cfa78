//! Pages: under [`Placement::Dense`](crate::config::Placement), the keys homed here kept apart in
//! dense pages once enough of a page's keys are touched (see the module docs of [`super`]).

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::table::{FreeLists, Shard};
use super::{State, Store};
use crate::ids::{Epoch, Key, NodeId, Version};

/// Most pages a shard indexes: 40 bytes of index per 256 keys of the shard's range. A range
/// wider than this (about 2^32 home keys per node with 256 shards) keeps every key in tables.
pub(super) const PAGES_PER_SHARD_MAX: u64 = 1 << 16;

/// Most pages whose start the store keeps for prefetching (8 bytes each): every page of a node
/// with up to 2^24 home keys of short values. Pages past it are accessed without a prefetch.
pub(super) const PAGE_HINTS_MAX: usize = 1 << 16;

/// The bytes a key's slot takes in a table, at a typical load of the table (a 33-byte bucket
/// in a table between 7/16 and 7/8 full): what a page is weighed against.
pub(super) const TABLE_SLOT_BYTES: usize = 48;

/// A shard stages at most one eighth of its home keys in its table (or one page's worth, if
/// that is more): past it, touching a key of a page not allocated yet allocates the page.
///
/// The dense placement permutes the keys, so whatever order a model touches them in, every
/// page of a shard is about as dense as the shard: by their own rule (`Store::promote_at`) the
/// pages would all wait until about 70% of their keys were touched (16-float values) and then
/// be allocated at once, with 70% of the keys' slots and values still in the tables and their
/// doubled capacity (a fill then peaked at 74-85 B/key beyond the values, against 16 after).
/// With the bound, the tables of a fill never hold more than an eighth of the keys (about 14
/// B/key of the range for 16-float values at the tables' usual load, up to twice that with
/// their and the arenas' spare room); a range
/// touched sparsely (below an eighth, as hashed feature ids are) keeps every key in tables, and
/// one touched between an eighth and the pages' own point pays at most about twice what tables
/// alone would (the staged eighth, and pages for the rest).
pub(super) const STAGED_SHARE: u64 = 8;

/// One page of a shard's index.
#[derive(Default)]
pub(super) struct PageEntry {
    /// The page, once its keys are dense enough (see `Store::promote_at`).
    pub(super) page: Option<Page>,
    /// Until then: how many of its keys have a slot in the shard's table (which they keep until
    /// the page takes them).
    pub(super) table_keys: u16,
}

/// The page `page` of a shard's index, if it is allocated.
#[inline]
pub(super) fn page_of(pages: &[PageEntry], page: u64) -> Option<&Page> {
    pages.get(usize::try_from(page).ok()?)?.page.as_ref()
}

/// The allocated pages of a shard's index, with their numbers.
pub(super) fn allocated(pages: &[PageEntry]) -> impl Iterator<Item = (u64, &Page)> {
    pages.iter().enumerate().filter_map(|(i, e)| Some((i as u64, e.page.as_ref()?)))
}

#[inline]
pub(super) fn page_of_mut(pages: &mut [PageEntry], page: u64) -> Option<&mut Page> {
    pages.get_mut(usize::try_from(page).ok()?)?.page.as_mut()
}

/// The home record at position `pos` of page `page`, if the page is allocated (if not, the
/// key's slot is in the table, or the key is untouched).
pub(super) fn home_record(pages: &[PageEntry], page: u64, pos: usize) -> Option<HomeSlot> {
    page_of(pages, page).and_then(|p| p.record(pos))
}

/// The home record of a key in a page.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct HomeSlot {
    pub(super) version: Version,
    pub(super) epoch: Epoch,
    pub(super) owner: NodeId,
    pub(super) state: HomeState,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum HomeState {
    /// Never touched: held here, with its initial value (not yet written into the page).
    #[default]
    Untouched,
    Owned,
    /// Held by `owner` as of `epoch`; a replica held here is in the shard's table.
    Away,
}

/// The words of a key's home record at the head of its entry in a page: the version's low and
/// high halves, the epoch, and the owner with the state.
pub(super) const RECORD_WORDS: usize = 4;
const STATE_WORD: usize = 3;

/// Home keys `2^page_bits` in a row (by home index within one shard; fewer in a shard's last
/// page). Each key has one entry: its home record, then room for its value, so that a worker's
/// access finds both in the same cache line (for values of a few floats) where two arrays
/// would cost two misses. The record's words are kept as the bits of `f32`s (only copied,
/// never computed with, so every bit pattern survives on the targets parma builds for: x87's
/// 32-bit x86 is not one), so one allocation holds both without `unsafe`.
///
/// The one `unsafe` here is in [`Page::entry`] and [`Page::entry_words_mut`], a worker's way to a
/// key's entry: they check that the position is in the page and the value fits an entry, and
/// leave out the bounds check that follows from it. The fields are set once, by
/// [`Page::new`], and `cells` is never resized, so no caller can make the check wrong.
pub(super) struct Page {
    cells: Box<[f32]>,
    /// Floats per entry: `RECORD_WORDS` and the store's page stride (at least `RECORD_WORDS`).
    entry: u32,
    /// The page's keys: `cells.len() / entry`, so `keys * entry <= cells.len()`. (Both fields
    /// are `u32`s, so that a shard's index of pages takes 32 bytes a page.)
    keys: u32,
}

// A shard's index takes 32 bytes a page on 64-bit targets (less with 32-bit pointers).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<PageEntry>() == 32);

impl Page {
    /// A page of `keys` untouched keys, each with room for `stride` floats of value.
    pub(super) fn new(keys: usize, stride: usize) -> Page {
        let entry = u32::try_from(RECORD_WORDS + stride).expect("a page entry of at most 2^32 floats");
        let floats = keys.checked_mul(entry as usize).expect("a page fits in memory");
        // All-zero words are the default record: untouched.
        let cells = alloc::vec![0.0; floats].into_boxed_slice();
        let keys = u32::try_from(cells.len() / entry as usize).expect("at most 2^32 keys in a page");
        Page { keys, cells, entry }
    }

    /// How many keys the page has.
    pub(super) fn keys(&self) -> usize {
        self.keys as usize
    }

    /// Floats per entry.
    #[inline(always)]
    fn entry_len(&self) -> usize {
        self.entry as usize
    }

    /// The address of the page's first entry (for a prefetch; entries are `RECORD_WORDS` and
    /// the page stride floats apart).
    pub(super) fn start(&self) -> usize {
        self.cells.as_ptr() as usize
    }

    /// The record at `pos`.
    #[inline]
    pub(super) fn record(&self, pos: usize) -> Option<HomeSlot> {
        let at = pos.checked_mul(self.entry_len())?;
        self.cells.get(at..at + RECORD_WORDS).map(decode)
    }

    /// The state at `pos` (one word of the record).
    #[inline(always)]
    pub(super) fn state(&self, pos: usize) -> Option<HomeState> {
        let at = pos.checked_mul(self.entry_len())?;
        self.cells.get(at + STATE_WORD).map(|w| decode_state(w.to_bits()))
    }

    /// Replaces the record at `pos` (nothing if `pos` is outside the page).
    pub(super) fn set_record(&mut self, pos: usize, h: HomeSlot) {
        let Some(at) = pos.checked_mul(self.entry_len()) else { return };
        if let Some(words) = self.cells.get_mut(at..at + RECORD_WORDS) {
            words.copy_from_slice(&encode(h));
        }
    }

    /// Where the entry at `pos` starts, if `pos` is in the page and a value of `len` floats fits
    /// in an entry: then the entry's record and value, `at..at + RECORD_WORDS + len`, lie in
    /// `cells` (see [`Page::entry`]).
    #[inline(always)]
    fn entry_at(&self, pos: usize, len: usize) -> Option<usize> {
        // No overflow: `pos < keys` and `keys * entry <= cells.len()`.
        (pos < self.keys() && len <= self.entry_len() - RECORD_WORDS).then(|| pos * self.entry_len())
    }

    /// The entry at `pos` with a value of `len` floats: its record's words, then its value;
    /// `None` if `pos` is outside the page or `len` is longer than its room for a value.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn entry(&self, pos: usize, len: usize) -> Option<&[f32]> {
        let at = self.entry_at(pos, len)?;
        // SAFETY: `entry_at` checked `pos < keys` and `len <= entry - RECORD_WORDS`, so
        // `at + RECORD_WORDS + len <= (pos + 1) * entry <= keys * entry <= cells.len()`:
        // `keys` is `cells.len() / entry`, both set once by `new`, and `cells` never changes
        // length.
        Some(unsafe { self.cells.get_unchecked(at..at + RECORD_WORDS + len) })
    }

    /// [`Page::entry`], to write.
    #[inline(always)]
    #[allow(unsafe_code)]
    fn entry_words_mut(&mut self, pos: usize, len: usize) -> Option<&mut [f32]> {
        let at = self.entry_at(pos, len)?;
        // SAFETY: as in `entry`: the range lies in `cells`.
        Some(unsafe { self.cells.get_unchecked_mut(at..at + RECORD_WORDS + len) })
    }

    /// The `len` floats of value at `pos`.
    pub(super) fn value(&self, pos: usize, len: usize) -> Option<&[f32]> {
        Some(&self.entry(pos, len)?[RECORD_WORDS..])
    }

    /// The `len` floats of value at `pos`, to write.
    pub(super) fn value_mut(&mut self, pos: usize, len: usize) -> Option<&mut [f32]> {
        Some(&mut self.entry_words_mut(pos, len)?[RECORD_WORDS..])
    }

    /// The entry at `pos` split: its record's words and its `len` floats of value.
    #[inline(always)]
    pub(super) fn entry_mut(&mut self, pos: usize, len: usize) -> Option<(&mut [f32], &mut [f32])> {
        Some(self.entry_words_mut(pos, len)?.split_at_mut(RECORD_WORDS))
    }

    /// The `len` floats of value at `pos` if the key there is owned (a worker's read of a home
    /// key, with one check of the position); `None` if it is untouched or away.
    #[inline(always)]
    pub(super) fn owned_value(&self, pos: usize, len: usize) -> Option<&[f32]> {
        let (record, value) = self.entry(pos, len)?.split_at(RECORD_WORDS);
        (state_of(record) == HomeState::Owned).then_some(value)
    }

    /// [`Page::entry_mut`] if the key at `pos` is owned (a worker's update of a home key).
    #[inline(always)]
    pub(super) fn owned_entry_mut(&mut self, pos: usize, len: usize) -> Option<(&mut [f32], &mut [f32])> {
        let (record, value) = self.entry_mut(pos, len)?;
        (state_of(record) == HomeState::Owned).then_some((record, value))
    }

    /// Changes the record at `pos` with `f`; false if `pos` is outside the page.
    pub(super) fn update(&mut self, pos: usize, f: impl FnOnce(&mut HomeSlot)) -> bool {
        let Some(mut h) = self.record(pos) else { return false };
        f(&mut h);
        self.set_record(pos, h);
        true
    }

    /// Every record, with its position.
    pub(super) fn records(&self) -> impl Iterator<Item = (usize, HomeSlot)> + '_ {
        self.cells.chunks_exact(self.entry_len()).map(|e| decode(&e[..RECORD_WORDS])).enumerate()
    }
}

/// The version in a record's words.
#[inline(always)]
pub(super) fn version_of(words: &[f32]) -> Version {
    match words {
        [lo, hi, ..] => Version(u64::from(lo.to_bits()) | u64::from(hi.to_bits()) << 32),
        _ => Version(0),
    }
}

/// Writes `v` into a record's words.
#[inline(always)]
pub(super) fn set_version(words: &mut [f32], v: Version) {
    if let [lo, hi, ..] = words {
        *lo = f32::from_bits(v.0 as u32);
        *hi = f32::from_bits((v.0 >> 32) as u32);
    }
}

/// The state in a record's last word.
#[inline(always)]
pub(super) fn state_of(words: &[f32]) -> HomeState {
    words.get(STATE_WORD).map_or(HomeState::Untouched, |w| decode_state(w.to_bits()))
}

#[inline(always)]
fn decode_state(w: u32) -> HomeState {
    match w >> 16 {
        1 => HomeState::Owned,
        2 => HomeState::Away,
        _ => HomeState::Untouched,
    }
}

fn encode(h: HomeSlot) -> [f32; RECORD_WORDS] {
    let state = match h.state {
        HomeState::Untouched => 0u32,
        HomeState::Owned => 1,
        HomeState::Away => 2,
    };
    [
        f32::from_bits(h.version.0 as u32),
        f32::from_bits((h.version.0 >> 32) as u32),
        f32::from_bits(h.epoch.0),
        f32::from_bits(u32::from(h.owner.0) | state << 16),
    ]
}

fn decode(words: &[f32]) -> HomeSlot {
    let (epoch, last) = match words {
        [_, _, e, l, ..] => (e.to_bits(), l.to_bits()),
        _ => (0, 0),
    };
    HomeSlot {
        version: version_of(words),
        epoch: Epoch(epoch),
        owner: NodeId(last as u16),
        state: decode_state(last),
    }
}

/// The most keys in a page, and the most floats of values a page aims at (a page of long
/// values holds fewer keys).
pub(super) const PAGE_KEYS_MAX: usize = 256;
pub(super) const PAGE_FLOATS: usize = 1 << 16;

impl Store {
    /// A home key of page `page` of shard `i`, whose page is not allocated and which has no
    /// slot in the table, is touched for the first time. If that makes the page's keys dense
    /// enough, or the shard's table stages as many home keys as it may ([`STAGED_SHARE`]), the
    /// page is allocated and takes the table's slots of its keys, and the answer is true (the
    /// key is then untouched in the page). Otherwise the key counts toward the page and the
    /// caller creates its slot in the table (if that fails, for want of arena room, the page
    /// only comes one key early).
    pub(super) fn first_touch(&self, shard: &mut Shard, i: usize, page: u64) -> bool {
        let Some(at) = usize::try_from(page).ok().filter(|p| (*p as u64) < self.pages_max) else {
            return false;
        };
        if at >= shard.pages.len() {
            shard.pages.resize_with(at + 1, PageEntry::default);
        }
        let keys = self.page_len(i, at as u64);
        let table_keys = usize::from(shard.pages[at].table_keys);
        if table_keys + 1 >= self.promote_at(keys) || self.staging_full(shard, i) {
            self.promote(shard, i, at, keys);
            return true;
        }
        shard.pages[at].table_keys += 1;
        shard.staged += 1;
        false
    }

    /// Whether shard `i` stages as many home keys in its table as it may: [`STAGED_SHARE`] of
    /// its home keys, or one page's worth if that is more (a small shard). Past it, the first
    /// touch of a key in a page not allocated yet allocates the page.
    fn staging_full(&self, shard: &Shard, i: usize) -> bool {
        let shard_keys = self.shard_keys(i);
        let most = (shard_keys / STAGED_SHARE).max(self.promote_at(1 << self.page_bits) as u64);
        u64::from(shard.staged) >= most
    }

    /// How many keys are homed in shard `i`.
    fn shard_keys(&self, i: usize) -> u64 {
        // The shard's home indexes are i, i + shards, i + 2 shards, ... below `homed_on`.
        self.homes.homed_on(self.me).saturating_sub(i as u64).div_ceil(1 << self.shard_bits)
    }

    /// How many keys page `at` of shard `i` has: all but a shard's last page have
    /// `2^page_bits`.
    pub(super) fn page_len(&self, i: usize, at: u64) -> usize {
        let shard_keys = self.shard_keys(i);
        let before = at.saturating_mul(1 << self.page_bits);
        shard_keys.saturating_sub(before).min(1 << self.page_bits) as usize
    }

    /// How many of a page's `keys` must have a slot in the table for the page to take them: the
    /// point where their table slots and arena ranges would take more room than the page.
    pub(super) fn promote_at(&self, keys: usize) -> usize {
        let value = self.page_stride * core::mem::size_of::<f32>();
        let page = keys * (core::mem::size_of::<HomeSlot>() + value);
        page.div_ceil(TABLE_SLOT_BYTES + value).max(1)
    }

    /// Allocates page `at` of shard `i` and moves the slots of its keys from the table into it.
    /// A replica held here of a key that is away stays in the table; its ownership record goes
    /// to the page.
    pub(super) fn promote(&self, shard: &mut Shard, i: usize, at: usize, keys: usize) {
        let mut page = Page::new(keys, self.page_stride);
        for pos in 0..keys {
            let Some(key) = self.page_key(i, at as u64, pos) else { continue };
            let Some(s) = shard.map.get(&key).copied() else { continue };
            let state = match s.state {
                State::Owned => {
                    let (off, len) = (s.off as usize, s.len as usize);
                    if let (Some(to), Some(from)) =
                        (page.value_mut(pos, len), shard.arena.get(off..off + len))
                    {
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
            page.set_record(pos, HomeSlot { version: s.version, epoch: s.epoch, owner: s.owner, state });
        }
        // The entries stay where they are for the store's life (a page is never freed or
        // resized), so the hint stays true once given.
        let hint = at.checked_shl(self.shard_bits).map(|h| h | i).and_then(|h| self.page_hints.get(h));
        if let Some(h) = hint {
            h.store(page.start(), core::sync::atomic::Ordering::Relaxed);
        }
        let entry = core::mem::replace(&mut shard.pages[at], PageEntry { page: Some(page), table_keys: 0 });
        invariant!(shard.staged >= u32::from(entry.table_keys), "a page staged more keys than its shard");
        shard.staged = shard.staged.saturating_sub(u32::from(entry.table_keys));
        Self::compact(shard);
    }

    /// Gives back the spare room of a shard's table and arena once most of it is unused. Keys
    /// leave the table for pages in a burst when a dense model touches its keys; without this
    /// their table buckets and arena ranges would stay allocated for good.
    pub(super) fn compact(shard: &mut Shard) {
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
    pub(super) fn page_key(&self, shard: usize, page: u64, pos: usize) -> Option<Key> {
        let local = (page << self.page_bits) | pos as u64;
        self.homes.key_at(self.me, (local << self.shard_bits) | shard as u64)
    }
}
