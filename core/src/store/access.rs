//! The workers' reads and updates (the hottest path of the system: one latch, one lookup, a
//! copy or an add), and what the node asks of its own slots: where a key is, and its value.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::kernels::{add_into, prefetch_line, prefetch_line_for_write};
use super::page::{page_of, page_of_mut, set_version, version_of, RECORD_WORDS};
use super::record::{Held, Spot};
use super::table::Shard;
use super::{add_local, Place, State, Store, Whereabouts};
use crate::ids::{Key, Version};

/// How many keys ahead of its turn a many-key access finds a key's place and prefetches its
/// lines ([`Store::run`]): enough for several misses to overlap, few enough that the lines are
/// still in the cache at the key's turn; and the ring that keeps the places found.
const RUN_AHEAD: usize = 6;
const RUN_RING: usize = 8;
const _: () = assert!(RUN_AHEAD < RUN_RING);

/// `$body` with `$len` bound to `$width`, where the short widths (1 to 16 floats) are each a
/// constant: a run's body is compiled once for each of them, so that its copies and adds are
/// straight moves with no per-key dispatch on the width (for 2 floats, a call of `memcpy`, or
/// a `match` on the length, costs as much as the copy itself). Longer values take the body
/// with the width read at run time; their kernels dispatch once per key, which they amortize.
macro_rules! by_width {
    ($width:expr, |$len:ident| $body:expr) => {
        match $width {
            1 => {
                let $len = 1;
                $body
            }
            2 => {
                let $len = 2;
                $body
            }
            4 => {
                let $len = 4;
                $body
            }
            8 => {
                let $len = 8;
                $body
            }
            16 => {
                let $len = 16;
                $body
            }
            $len => $body,
        }
    };
}

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
        self.with_value_placed::<REPLICA, R>(self.place(key), key, f)
    }

    /// [`Store::with_value`] of `key`, whose place is `place`.
    #[inline(always)]
    fn with_value_placed<const REPLICA: bool, R>(
        &self,
        place: Place,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        match place {
            Place::Table { .. } => self.with_value_at::<REPLICA, R>(place, key, f),
            Place::Page { .. } => self.with_page_value::<REPLICA, R>(place, key, f),
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
        self.with_value_latched::<REPLICA, R>(&mut guard, i, place, key, f)
    }

    /// [`Store::with_value_at`] in shard `i`, `shard`, whose latch the caller holds.
    #[inline(always)]
    fn with_value_latched<const REPLICA: bool, R>(
        &self,
        shard: &mut Shard,
        i: usize,
        place: Place,
        key: Key,
        f: impl FnOnce(&mut [f32], Option<&mut [f32]>, &mut Version) -> R,
    ) -> Option<R> {
        let spot = self.spot(shard, place, key);
        match self.with_slot_value::<REPLICA, R, _>(shard, spot, key, f) {
            Ok(r) => Some(r),
            Err(f) => self.with_value_untouched::<REPLICA, R>(shard, i, spot, key, f),
        }
    }

    /// A worker's read of `key`, whose place is `place`, into `out`: [`Store::read`] with the
    /// common cases written out, so that a hit looks at its slot once and calls nothing. With
    /// `paged` (every key's length is `out.len()`), an owned home key in an allocated page is
    /// copied from its entry; a main copy or replica in a table is copied from its arena
    /// range. Anything else (a first touch, a replica beside its home's page record, a miss)
    /// goes the general way ([`Store::with_value_latched`]) under the same latch, out of line.
    /// No version is read or written.
    #[inline(always)]
    fn read_placed(&self, place: Place, key: Key, out: &mut [f32], paged: bool) -> bool {
        let i = place.shard();
        let mut guard = self.shards[i].lock();
        let shard = &mut *guard;
        match place {
            Place::Page { page, pos, .. } if paged => {
                if let Some(v) = page_of(&shard.pages, page).and_then(|p| p.owned_value(pos, out.len())) {
                    out.copy_from_slice(v);
                    return true;
                }
            }
            Place::Page { .. } => {}
            Place::Table { mix, .. } => {
                if let Some(v) = shard.map.get_mixed(mix, key).and_then(|s| s.value(&shard.arena, out.len()))
                {
                    out.copy_from_slice(v);
                    return true;
                }
            }
        }
        self.read_latched(shard, i, place, key, out)
    }

    /// [`Store::read_placed`] of a key in a page, out of line: for runs of keys in tables,
    /// which then compile to the table's path alone.
    #[inline(never)]
    fn read_paged_apart(&self, place: Place, key: Key, out: &mut [f32], paged: bool) -> bool {
        self.read_placed(place, key, out, paged)
    }

    /// [`Store::add_placed`] of a key in a page, out of line (see [`Store::read_paged_apart`]).
    #[inline(never)]
    fn add_paged_apart(&self, place: Place, key: Key, delta: &[f32], paged: bool) -> bool {
        self.add_placed(place, key, delta, paged)
    }

    /// [`Store::read_placed`]'s general way, out of line.
    #[inline(never)]
    fn read_latched(&self, shard: &mut Shard, i: usize, place: Place, key: Key, out: &mut [f32]) -> bool {
        self.with_value_latched::<true, _>(shard, i, place, key, |v, _, _| copy_checked(out, v))
            .unwrap_or(false)
    }

    /// [`Store::read_placed`] for an update ([`Store::add`]): adds `delta` to an owned home
    /// key's value in its page (one more update in its record), or to a table slot's main copy
    /// (one more update) or replica (and to its unsent delta).
    #[inline(always)]
    fn add_placed(&self, place: Place, key: Key, delta: &[f32], paged: bool) -> bool {
        let i = place.shard();
        let mut guard = self.shards[i].lock();
        let shard = &mut *guard;
        match place {
            Place::Page { page, pos, .. } if paged => {
                let entry =
                    page_of_mut(&mut shard.pages, page).and_then(|p| p.owned_entry_mut(pos, delta.len()));
                if let Some((record, value)) = entry {
                    add_into(value, delta);
                    set_version(record, version_of(record).next());
                    return true;
                }
            }
            Place::Page { .. } => {}
            Place::Table { mix, .. } => {
                if let Some(slot) = shard.map.get_mut_mixed(mix, key) {
                    if slot.add(&mut shard.arena, delta) {
                        return true;
                    }
                }
            }
        }
        self.add_latched(shard, i, place, key, delta)
    }

    /// [`Store::add_placed`]'s general way, out of line.
    #[inline(never)]
    fn add_latched(&self, shard: &mut Shard, i: usize, place: Place, key: Key, delta: &[f32]) -> bool {
        self.with_value_latched::<true, _>(shard, i, place, key, |v, unsent, version| {
            add_local(v, unsent, version, delta)
        })
        .unwrap_or(false)
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

    /// Asks the CPU to fetch the lines a worker's access to the key at `place` will touch: its
    /// shard's latch (to write), and its entry if it is a home key in an allocated page. A
    /// many-key access does this a few keys ahead ([`Store::run`]), so that the misses of
    /// several keys overlap. Without it they queue: no load after a latch's atomic
    /// read-modify-write starts before it completes, so each key's misses are paid in full,
    /// one key after another.
    /// Reads only the page hints (never the shard), and changes nothing a thread can observe.
    #[inline(always)]
    fn prefetch(&self, place: Place) {
        if let Some(latch) = self.shards.get(place.shard()) {
            prefetch_line_for_write(latch as *const _ as usize);
        }
        let Place::Page { shard, page, pos } = place else { return };
        // `shard_bits` is below 64 (`STORE_SHARDS_MAX`): the shift is in range. A page number
        // too high for the hints finds none (or, shifted out, a wrong one: a wasted fetch).
        let hint = usize::try_from(page).ok().and_then(|p| self.page_hints.get(p << self.shard_bits | shard));
        let Some(start) = hint.map(|h| h.load(Ordering::Relaxed)).filter(|s| *s != 0) else { return };
        let entry = (RECORD_WORDS + self.page_stride) * core::mem::size_of::<f32>();
        prefetch_line(start.wrapping_add(pos.wrapping_mul(entry)));
    }

    /// Whether a run over `keys` looks ahead ([`Store::run`]): only where the store has pages
    /// and the run starts with a key homed here. A run of keys in tables (moved in, replicas,
    /// the hashed placement) goes key by key: nothing of theirs can be prefetched without the
    /// latch, and measured, the looking ahead made such runs slower.
    #[inline(always)]
    fn looks_ahead(&self, keys: &[Key]) -> bool {
        !self.page_hints.is_empty() && keys.first().is_some_and(|k| self.page_place(*k).is_some())
    }

    /// The keys in order with their places: each key's place is found once, `RUN_AHEAD` keys
    /// before its turn, and its lines prefetched then ([`Run`]).
    #[inline(always)]
    fn run<'a>(&'a self, keys: &'a [Key]) -> Run<'a> {
        let mut ring = [Place::Table { shard: 0, mix: 0 }; RUN_RING];
        for (j, k) in keys.iter().take(RUN_AHEAD).enumerate() {
            ring[j] = self.place(*k);
            self.prefetch(ring[j]);
        }
        Run { store: self, keys, ring, next: 0 }
    }

    /// A worker's read of many keys of `len` floats each: copies their values into `out`, in
    /// order, until the first key whose main copy or replica is not here. Returns how many
    /// keys it read. Reads the same values as [`Store::read`] key by key, faster: the keys'
    /// cache misses overlap (see the module docs).
    pub fn read_run(&self, keys: &[Key], out: &mut [f32], len: usize) -> usize {
        by_width!(len, |len| self.read_run_of(keys, out, len))
    }

    /// [`Store::read_run`], inlined into each width of [`by_width!`].
    #[inline(always)]
    fn read_run_of(&self, keys: &[Key], out: &mut [f32], len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let keys = &keys[..keys.len().min(out.len().checked_div(len).unwrap_or(0))];
        // With one length for every key, a home key's value in a page has the run's length.
        let paged = self.layout.uniform_len() == Some(len);
        let mut served = 0;
        if !self.looks_ahead(keys) {
            for (k, out) in keys.iter().zip(out.chunks_exact_mut(len)) {
                let read = match self.place(*k) {
                    place @ Place::Table { .. } => self.read_placed(place, *k, out, paged),
                    place @ Place::Page { .. } => self.read_paged_apart(place, *k, out, paged),
                };
                if !read {
                    break;
                }
                served += 1;
            }
            return served;
        }
        let mut run = self.run(keys);
        for out in out.chunks_exact_mut(len) {
            let Some((key, place)) = run.next() else { break };
            if !self.read_placed(place, key, out, paged) {
                break;
            }
            served += 1;
        }
        served
    }

    /// A worker's updates of many keys of `len` floats each: adds each key's `len` floats of
    /// `deltas` ([`Store::add`]), in order, until the first key whose main copy or replica is
    /// not here. Returns how many keys it updated.
    pub fn add_run(&self, keys: &[Key], deltas: &[f32], len: usize) -> usize {
        by_width!(len, |len| self.add_run_of(keys, deltas, len))
    }

    /// [`Store::add_run`], inlined into each width of [`by_width!`].
    #[inline(always)]
    fn add_run_of(&self, keys: &[Key], deltas: &[f32], len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let keys = &keys[..keys.len().min(deltas.len().checked_div(len).unwrap_or(0))];
        let paged = self.layout.uniform_len() == Some(len);
        let mut served = 0;
        if !self.looks_ahead(keys) {
            for (k, delta) in keys.iter().zip(deltas.chunks_exact(len)) {
                let added = match self.place(*k) {
                    place @ Place::Table { .. } => self.add_placed(place, *k, delta, paged),
                    place @ Place::Page { .. } => self.add_paged_apart(place, *k, delta, paged),
                };
                if !added {
                    break;
                }
                served += 1;
            }
            return served;
        }
        let mut run = self.run(keys);
        for delta in deltas.chunks_exact(len) {
            let Some((key, place)) = run.next() else { break };
            if !self.add_placed(place, key, delta, paged) {
                break;
            }
            served += 1;
        }
        served
    }

    /// [`Store::set`] of many keys of `len` floats each, in order, until the first key whose
    /// main copy is not here. Returns how many keys it set.
    pub fn set_run(&self, keys: &[Key], values: &[f32], len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let keys = &keys[..keys.len().min(values.len().checked_div(len).unwrap_or(0))];
        if !self.looks_ahead(keys) {
            return keys.iter().zip(values.chunks_exact(len)).take_while(|(k, v)| self.set(**k, v)).count();
        }
        self.run(keys)
            .zip(values.chunks_exact(len))
            .take_while(|((key, place), values)| {
                self.with_value_placed::<false, _>(*place, *key, |v, _, version| {
                    set_value(v, version, values)
                })
                .unwrap_or(false)
            })
            .count()
    }

    /// A worker's read: copies the value of `key` into `out` if its main copy or a replica is
    /// here. `out.len()` must be the key's length.
    #[inline]
    pub fn read(&self, key: Key, out: &mut [f32]) -> bool {
        self.with_value::<true, _>(key, |v, _, _| copy_checked(out, v)).unwrap_or(false)
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
        self.with_value::<false, _>(key, |v, _, version| set_value(v, version, values)).unwrap_or(false)
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

/// A worker's read of a value `v` into `out`: copied if their lengths match.
#[inline(always)]
fn copy_checked(out: &mut [f32], v: &[f32]) -> bool {
    if v.len() != out.len() {
        return false;
    }
    out.copy_from_slice(v);
    true
}

/// A set of a main copy's value: `values` replace it (one more update) if their length is the
/// value's.
#[inline(always)]
fn set_value(v: &mut [f32], version: &mut Version, values: &[f32]) -> bool {
    if v.len() != values.len() {
        return false;
    }
    v.copy_from_slice(values);
    *version = version.next();
    true
}

/// A run over many keys ([`Store::run`]): yields each key with its place, found `RUN_AHEAD`
/// keys before its turn, when its lines were prefetched. An iterator rather than a loop that
/// calls a closure, so that each run's body is compiled inline, once for each width.
struct Run<'a> {
    store: &'a Store,
    keys: &'a [Key],
    /// The places of keys `next..next + RUN_AHEAD`, at their index modulo `RUN_RING`.
    ring: [Place; RUN_RING],
    next: usize,
}

impl Iterator for Run<'_> {
    type Item = (Key, Place);

    #[inline(always)]
    fn next(&mut self) -> Option<(Key, Place)> {
        let i = self.next;
        let key = *self.keys.get(i)?;
        if let Some(ahead) = self.keys.get(i + RUN_AHEAD) {
            let place = self.store.place(*ahead);
            self.store.prefetch(place);
            self.ring[(i + RUN_AHEAD) % RUN_RING] = place;
        }
        self.next = i + 1;
        Some((key, self.ring[i % RUN_RING]))
    }
}
