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
//!   and epoch the home node knows of (the home node's ownership table *is* these slots).
//!
//! Keys are sparse: a home node creates a key's slot on first touch, with the configured
//! initial value. Keys never touched take no memory.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::HashMap;

use crate::config::{Config, Init};
use crate::ids::{mix, Epoch, Key, NodeId, Version};
use crate::layout::Layout;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Owned,
    Away,
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

struct Shard {
    map: HashMap<Key, Slot>,
    arena: Vec<f32>,
    /// Free arena ranges by length.
    free: HashMap<u32, Vec<u32>>,
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
    shards: Box<[spin::Mutex<Shard>]>,
    shard_shift: u32,
    layout: Layout,
    me: NodeId,
    nodes: u16,
    init: Init,
    seed: u64,
    held: AtomicUsize,
    held_max: usize,
}

/// The home node of `key` in a cluster of `nodes` nodes.
#[inline]
pub fn home_of(key: Key, nodes: u16) -> NodeId {
    NodeId((mix(key) % u64::from(nodes.max(1))) as u16)
}

impl Store {
    /// An empty store for node `me` of the cluster `cfg` describes.
    pub fn new(cfg: &Config, me: NodeId) -> Store {
        let n = cfg.store_shards.max(1).next_power_of_two();
        let shards = (0..n)
            .map(|_| spin::Mutex::new(Shard { map: HashMap::new(), arena: Vec::new(), free: HashMap::new() }))
            .collect();
        Store {
            shards,
            shard_shift: 64 - n.trailing_zeros(),
            layout: cfg.layout.clone(),
            me,
            nodes: cfg.nodes,
            init: cfg.init,
            seed: cfg.seed,
            held: AtomicUsize::new(0),
            held_max: cfg.store_keys_max,
        }
    }

    /// The layout of the keys.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Main copies held here now.
    pub fn keys_held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    #[inline]
    fn shard(&self, key: Key) -> &spin::Mutex<Shard> {
        // High bits of the mix: independent of `home_of`, which uses it modulo the node count.
        let i =
            if self.shard_shift >= 64 { 0 } else { (mix(key).rotate_left(17) >> self.shard_shift) as usize };
        &self.shards[i & (self.shards.len() - 1)]
    }

    #[inline]
    fn is_home(&self, key: Key) -> bool {
        home_of(key, self.nodes) == self.me
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

    /// Runs `f` on the value of `key` if this node holds its main copy, creating it first if
    /// this is the key's home node and the key was never touched. Returns whether it ran.
    #[inline(always)]
    fn with_value<R>(&self, key: Key, f: impl FnOnce(&mut [f32], &mut Slot) -> R) -> Option<R> {
        let mut guard = self.shard(key).lock();
        let shard = &mut *guard;
        if let Some(slot) = shard.map.get_mut(&key) {
            return Self::apply(&mut shard.arena, slot, f);
        }
        if !self.is_home(key) {
            return None;
        }
        self.materialize(shard, key)?;
        let slot = shard.map.get_mut(&key)?;
        Self::apply(&mut shard.arena, slot, f)
    }

    #[inline(always)]
    fn apply<R>(arena: &mut [f32], slot: &mut Slot, f: impl FnOnce(&mut [f32], &mut Slot) -> R) -> Option<R> {
        if slot.state != State::Owned {
            return None;
        }
        let (off, len) = (slot.off as usize, slot.len as usize);
        let value = arena.get_mut(off..off + len)?;
        Some(f(value, slot))
    }

    fn materialize<'s>(&self, shard: &'s mut Shard, key: Key) -> Option<&'s mut Slot> {
        let len = self.layout.len_of(key)?;
        if !self.reserve() {
            return None;
        }
        let Some(off) = alloc_range(shard, len) else {
            self.release();
            return None;
        };
        for (i, v) in shard.arena[off as usize..off as usize + len].iter_mut().enumerate() {
            *v = Self::initial_value(self.init, self.seed, key, i);
        }
        let slot = Slot {
            version: Version(0),
            off,
            len: len as u32,
            epoch: Epoch(0),
            owner: self.me,
            state: State::Owned,
        };
        Some(shard.map.entry(key).insert(slot).into_mut())
    }

    fn reserve(&self) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| (h < self.held_max).then_some(h + 1))
            .is_ok()
    }

    fn release(&self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }

    /// Copies the value of `key` into `out` if held here. `out.len()` must be the key's length.
    #[inline]
    pub fn read(&self, key: Key, out: &mut [f32]) -> bool {
        self.with_value(key, |v, _| {
            if v.len() != out.len() {
                return false;
            }
            out.copy_from_slice(v);
            true
        })
        .unwrap_or(false)
    }

    /// Adds `delta` to the value of `key` if held here.
    #[inline]
    pub fn add(&self, key: Key, delta: &[f32]) -> bool {
        self.with_value(key, |v, slot| {
            if v.len() != delta.len() {
                return false;
            }
            add_into(v, delta);
            slot.version = slot.version.next();
            true
        })
        .unwrap_or(false)
    }

    /// Replaces the value of `key` with `values` if held here.
    #[inline]
    pub fn write(&self, key: Key, values: &[f32]) -> bool {
        self.with_value(key, |v, slot| {
            if v.len() != values.len() {
                return false;
            }
            v.copy_from_slice(values);
            slot.version = slot.version.next();
            true
        })
        .unwrap_or(false)
    }

    /// Appends the value of `key` to `out` if held here.
    pub fn read_append(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.with_value(key, |v, _| out.extend_from_slice(v)).is_some()
    }

    /// Whether the main copy of `key` is here (a never-touched key at its home counts).
    pub fn holds(&self, key: Key) -> bool {
        matches!(self.whereabouts(key), Whereabouts::Here(_))
    }

    /// Where `key` is, as far as this node knows from its own slots.
    pub fn whereabouts(&self, key: Key) -> Whereabouts {
        let shard = self.shard(key).lock();
        match shard.map.get(&key) {
            Some(s) if s.state == State::Owned => Whereabouts::Here(s.epoch),
            Some(s) => Whereabouts::Away(s.owner, s.epoch),
            None if self.is_home(key) => Whereabouts::Here(Epoch(0)),
            None => Whereabouts::Unknown,
        }
    }

    /// Removes the main copy of `key` to hand it to `to`: appends the value to `out` and
    /// returns the new epoch and the version. On the home node the slot becomes "away at `to`".
    pub fn take(&self, key: Key, to: NodeId, out: &mut Vec<f32>) -> Option<(Epoch, Version)> {
        let mut guard = self.shard(key).lock();
        let shard = &mut *guard;
        if !shard.map.contains_key(&key) && self.is_home(key) {
            self.materialize(shard, key)?;
        }
        let slot = *shard.map.get(&key)?;
        if slot.state != State::Owned {
            return None;
        }
        let (off, len) = (slot.off as usize, slot.len as usize);
        out.extend_from_slice(shard.arena.get(off..off + len)?);
        shard.free.entry(slot.len).or_default().push(slot.off);
        let epoch = slot.epoch.next();
        if self.is_home(key) {
            let away = Slot { state: State::Away, owner: to, epoch, off: 0, len: 0, ..slot };
            shard.map.insert(key, away);
        } else {
            shard.map.remove(&key);
        }
        self.release();
        Some((epoch, slot.version))
    }

    /// Installs the main copy of `key` that arrived from another node.
    pub fn install(
        &self,
        key: Key,
        epoch: Epoch,
        version: Version,
        values: &[f32],
    ) -> Result<(), InstallError> {
        if self.layout.len_of(key) != Some(values.len()) {
            return Err(InstallError::Length);
        }
        let mut guard = self.shard(key).lock();
        let shard = &mut *guard;
        match shard.map.get(&key) {
            Some(s) if s.state == State::Owned => return Err(InstallError::AlreadyOwned),
            None if self.is_home(key) => return Err(InstallError::AlreadyOwned),
            _ => {}
        }
        if !self.reserve() {
            return Err(InstallError::Full);
        }
        let Some(off) = alloc_range(shard, values.len()) else {
            self.release();
            return Err(InstallError::ArenaFull);
        };
        shard.arena[off as usize..off as usize + values.len()].copy_from_slice(values);
        let slot =
            Slot { version, off, len: values.len() as u32, epoch, owner: self.me, state: State::Owned };
        shard.map.insert(key, slot);
        Ok(())
    }

    /// Home node only: records that `owner` holds `key` as of `epoch`, if that is newer than
    /// what is known. Returns whether the record changed.
    pub fn record_owner(&self, key: Key, owner: NodeId, epoch: Epoch) -> bool {
        if !self.is_home(key) {
            return false;
        }
        let mut shard = self.shard(key).lock();
        match shard.map.get_mut(&key) {
            Some(s) if s.state == State::Away && epoch > s.epoch => {
                s.owner = owner;
                s.epoch = epoch;
                true
            }
            _ => false,
        }
    }

    /// Calls `f` for every main copy held here (in no particular order) with its epoch,
    /// version and value. Takes each shard's latch in turn.
    pub fn for_each_owned(&self, mut f: impl FnMut(Key, Epoch, Version, &[f32])) {
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for (k, s) in shard.map.iter().filter(|(_, s)| s.state == State::Owned) {
                let (off, len) = (s.off as usize, s.len as usize);
                if let Some(v) = shard.arena.get(off..off + len) {
                    f(*k, s.epoch, s.version, v);
                }
            }
        }
    }

    /// Bytes of bookkeeping per key (slot and map entry), beyond the value itself.
    pub const fn slot_bytes() -> usize {
        core::mem::size_of::<(Key, Slot)>() + 1
    }
}

/// `dst[i] += src[i]` over equal lengths known only at run time, in fixed-width chunks the
/// compiler turns into vector adds.
#[inline(always)]
fn add_into(dst: &mut [f32], src: &[f32]) {
    const W: usize = 16;
    let mut d = dst.chunks_exact_mut(W);
    let mut s = src.chunks_exact(W);
    for (a, b) in (&mut d).zip(&mut s) {
        for i in 0..W {
            a[i] += b[i];
        }
    }
    for (a, b) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *a += *b;
    }
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
