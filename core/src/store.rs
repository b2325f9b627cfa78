//! The parameter store: the values this node holds, shared by worker threads and the node's
//! protocol state.
//!
//! Sharded by key hash; each shard is a `hashbrown` map behind one `spin` latch, with values in
//! one contiguous arena per shard. A worker's local access takes exactly one latch (its key's
//! shard) and copies or adds in place; it never waits for the protocol. A worker's pull or push
//! of many keys goes through them as a *run* ([`Store::read_run`], [`Store::add_run`]): each
//! key's place is found a few keys ahead of its turn and its lines prefetched then (its
//! shard's latch, and its page entry), so that the keys' cache misses overlap instead of
//! queueing behind each latch's atomic operation.
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
//! it, a page of up to 256 keys and a position in the page. A page holds, for each of its keys,
//! one entry: the key's home record (state, owner, epoch, version: 16 bytes) followed by room
//! for its value, so that an access to a short value touches one cache line; the key itself is
//! not stored. A page key is untouched (implicitly held here, with its initial value), owned, or
//! away. A replica held at the home node of a key that is away lives in the shard's table
//! beside the page. Keys homed elsewhere (moved in, or replicas) are in the tables as under
//! [`Placement::Hashed`].
//!
//! A page is allocated only once enough of its keys are touched: until then its touched keys
//! have slots in the shard's table, exactly as home keys do under the hashed placement, and
//! the shard counts them. When their slots would take more room than the whole page (about
//! half of the page's keys for short values, more for long ones), the page is allocated and
//! takes them, and the table and arena give back the room they leave. A shard's table stages
//! at most an eighth of the shard's home keys, though: past that, touching a key of a page
//! not allocated yet allocates the page (the placement spreads every model's keys evenly over
//! the pages, so without the bound they would all wait and then be allocated at once, with
//! most keys still in the tables: see `page::STAGED_SHARE`). A model that touches most of its
//! range ends with its home keys in pages; one that touches its range sparsely (hashed feature
//! ids) keeps them in tables and pays what the hashed placement pays. A range too wide to
//! index (more than 2^16 pages per shard) keeps every key in tables.
//!
//! The code follows the seams: `table` (a shard's table of slots, its latch and its arena),
//! `page` (the pages and when a page takes its keys), `record` (the one interface over both
//! kinds of slot: where a key's record is, what it says, and the transitions between its
//! states), `access` (the workers' reads and updates, and what the node asks of its slots),
//! `protocol` (the node's moves of main copies and replicas, `pub(crate)`: see invariant 1)
//! and `enumerate` (walks over every shard).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::HashMap;

use crate::config::{Config, Init, Placement};
use crate::ids::{mix, Epoch, Key, NodeId, Version};
use crate::layout::Layout;
use crate::placement::Homes;
use kernels::{add_into, add_into_both};
#[cfg(test)]
use page::page_of;
use page::{PAGES_PER_SHARD_MAX, PAGE_FLOATS, PAGE_HINTS_MAX, PAGE_KEYS_MAX};
use table::{Latched, Shard, SlotMap};

mod access;
mod enumerate;
mod kernels;
mod page;
mod protocol;
mod record;
mod standalone;
mod table;

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

/// Where a key's slot is.
#[derive(Clone, Copy)]
enum Place {
    /// In the shard's table (whether this node is the key's home: `Store::table_home_mix`).
    Table { shard: usize, mix: u64 },
    /// A home key in a page (`Placement::Dense`).
    Page { shard: usize, page: u64, pos: usize },
}

impl Place {
    /// The shard that has the key's slot.
    #[inline(always)]
    fn shard(self) -> usize {
        match self {
            Place::Table { shard, .. } | Place::Page { shard, .. } => shard,
        }
    }
}

impl Slot {
    /// A worker's read: the value of a main copy or replica of `len` floats in `arena`; `None`
    /// for another length or an away slot.
    #[inline(always)]
    fn value<'a>(&self, arena: &'a [f32], len: usize) -> Option<&'a [f32]> {
        let off = self.off as usize;
        match self.state {
            State::Owned | State::Replica if self.len as usize == len => arena.get(off..off + len),
            _ => None,
        }
    }

    /// A worker's update ([`add_local`]): adds `delta` to a main copy (one more update) or to a
    /// replica and its unsent delta; false (nothing changed) for another length or an away slot.
    #[inline(always)]
    fn add(&mut self, arena: &mut [f32], delta: &[f32]) -> bool {
        let (off, len) = (self.off as usize, delta.len());
        if self.len as usize != len {
            return false;
        }
        match self.state {
            State::Owned => match arena.get_mut(off..off + len) {
                Some(v) => {
                    add_into(v, delta);
                    self.version = self.version.next();
                    true
                }
                None => false,
            },
            State::Replica => match arena.get_mut(off..off + 2 * len) {
                Some(both) => {
                    let (v, unsent) = both.split_at_mut(len);
                    add_into_both(v, unsent, delta);
                    true
                }
                None => false,
            },
            State::Away => false,
        }
    }

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

impl core::fmt::Display for InstallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            InstallError::Full => "the store already holds Config::store_keys_max keys",
            InstallError::AlreadyOwned => "the key's main copy is already here: a second would be created",
            InstallError::Length => "the values' length does not match the key's value length in the layout",
            InstallError::ArenaFull => "the shard's value arena cannot grow further",
        })
    }
}

impl core::error::Error for InstallError {}

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
    /// Where each allocated page's entries start (0 until it is), by `page << shard_bits |
    /// shard`, for the first `PAGE_HINTS_MAX` pages: what a worker prefetches ahead of a
    /// many-key access, read without the shard's latch (see [`Store::prefetch`]).
    page_hints: Box<[AtomicUsize]>,
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

        let hints = usize::try_from(pages_max).unwrap_or(usize::MAX).saturating_mul(n).min(PAGE_HINTS_MAX);
        let shards = (0..n)
            .map(|_| {
                Latched(spin::Mutex::new(Shard {
                    map: SlotMap::default(),
                    arena: Vec::new(),
                    free: HashMap::default(),
                    pages: Vec::new(),
                    staged: 0,
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
            page_hints: (0..hints).map(|_| AtomicUsize::new(0)).collect(),
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
        &self.shards[self.place(key).shard()]
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

    /// Writes the initial value of `key` into `value`.
    fn initialize(&self, key: Key, value: &mut [f32]) {
        for (i, v) in value.iter_mut().enumerate() {
            *v = Self::initial_value(self.init, self.seed, key, i);
        }
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

#[cfg(test)]
mod tests;
