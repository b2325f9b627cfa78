//! A worker's access path: local first through the shared [`Store`], else a command for the
//! node, and never ahead of the worker's own earlier remote operation on the same key.
//!
//! Every driver runs this one type for every worker: the runtime on the worker's thread (it
//! waits where this type says [`Hold`]), the simulator and the fuzzer from their one thread (a
//! held access is not issued yet). So the three run the same path, and what the simulator and
//! the fuzzer check is what the runtime does.
//!
//! # The ordering rule
//!
//! A worker's access to a key must not take effect before that worker's own earlier operations
//! on the key (per-key sequential consistency per worker; `DESIGN.md` invariant 4: a worker's
//! pull after its own push sees that push). The node keeps no order between a local access,
//! which never reaches it, and a remote one it is still serving; nor between two remote ones
//! that take different routes. So the worker holds back an access to a key while one of its
//! own remote operations on that key is in flight, unless the two commute: two pulls commute,
//! and so do two adds. A set commutes with nothing. [`WorkerAccess::record`] notes an operation
//! handed to the node, [`WorkerAccess::complete`] its completion; [`WorkerAccess::conflicts`]
//! says whether an access would overtake one.
//!
//! Replicated keys do not promise more than the rule gives: a replica is a snapshot of its
//! owner plus this node's own updates, so a pull served by a replica sees the worker's pushes
//! through that replica, not necessarily other nodes' pushes it has not been refreshed with.
//!
//! # Duplicate keys in one call
//!
//! A call may name a key more than once: a pull fills every position of the key, an add adds
//! every delta (on the remote path the deltas are summed into one), a set keeps the last value.
//! The keys handed to the node are always distinct.

use alloc::vec::Vec;
use core::hash::BuildHasherDefault;

use hashbrown::HashMap;

use crate::config::{Config, Gate, Technique};
use crate::error::OpError;
use crate::ids::{Key, MixHasher, Ticket, WorkerId};
use crate::layout::Layout;
use crate::node::Node;
use crate::store::Store;
use crate::time::Instant;
use crate::wire::WriteKind;

type Map<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

/// What an operation does to the values of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// Reads them.
    Pull,
    /// Adds to them.
    Add,
    /// Replaces them.
    Set,
    /// Neither reads nor changes them (localize, wait for sync rounds, barrier): counts against
    /// the in-flight bound only.
    Other,
}

impl From<WriteKind> for AccessKind {
    fn from(w: WriteKind) -> AccessKind {
        match w {
            WriteKind::Add => AccessKind::Add,
            WriteKind::Set => AccessKind::Set,
        }
    }
}

/// Why an access can't start yet. The driver waits for completions of the worker's own
/// operations (or, single-threaded, issues the access later) and asks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hold {
    /// It would overtake one of the worker's own remote operations on one of its keys.
    Overtakes,
    /// The worker has as many operations in flight as its bound allows.
    Full,
}

/// In-flight operations of each kind on one key.
#[derive(Clone, Copy, Debug, Default)]
struct Uses {
    pulls: u32,
    adds: u32,
    sets: u32,
}

impl Uses {
    fn count(&mut self, kind: AccessKind) -> Option<&mut u32> {
        match kind {
            AccessKind::Pull => Some(&mut self.pulls),
            AccessKind::Add => Some(&mut self.adds),
            AccessKind::Set => Some(&mut self.sets),
            AccessKind::Other => None,
        }
    }

    /// Whether a new access of `kind` must wait for these (the ordering rule).
    #[inline]
    fn blocks(&self, kind: AccessKind) -> bool {
        match kind {
            AccessKind::Pull => self.adds + self.sets > 0,
            AccessKind::Add => self.pulls + self.sets > 0,
            AccessKind::Set => self.pulls + self.adds + self.sets > 0,
            AccessKind::Other => false,
        }
    }

    fn is_empty(&self) -> bool {
        self.pulls + self.adds + self.sets == 0
    }
}

#[derive(Debug)]
struct Inflight {
    keys: Vec<Key>,
    kind: AccessKind,
}

/// Where one position of a pull that the node serves goes: `len` floats from `src` of the
/// node's answer to `dst` of the caller's buffer; `pos` is its index in the call's keys.
#[derive(Clone, Copy, Debug)]
struct Place {
    pos: usize,
    dst: usize,
    src: usize,
    len: usize,
}

/// The part of a pull the store could not serve: the distinct keys for the node, and where
/// their values go once it answers ([`PullMisses::fill`]).
#[derive(Debug, Default)]
pub struct PullMisses {
    keys: Vec<Key>,
    places: Vec<Place>,
    local: usize,
}

impl PullMisses {
    /// The distinct keys left to the node, in first-seen order.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Takes the keys for the node's command (the places stay for [`PullMisses::fill`]).
    pub fn take_keys(&mut self) -> Vec<Key> {
        core::mem::take(&mut self.keys)
    }

    /// Whether the store served every position.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// Positions of the call served from the store.
    pub fn local(&self) -> usize {
        self.local
    }

    /// Positions of the call (indices into its keys) left to the node, in order.
    pub fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.places.iter().map(|p| p.pos)
    }

    /// Copies the node's answer (the values of [`PullMisses::keys`], concatenated) into the
    /// caller's buffer; `InvalidArgument` if the answer does not fit.
    pub fn fill(&self, answer: &[f32], vals: &mut [f32]) -> Result<(), OpError> {
        for p in &self.places {
            let (Some(from), Some(to)) =
                (answer.get(p.src..p.src + p.len), vals.get_mut(p.dst..p.dst + p.len))
            else {
                return Err(OpError::InvalidArgument);
            };
            to.copy_from_slice(from);
        }
        Ok(())
    }
}

/// The part of a push or set the store could not apply: distinct keys and their values (the
/// deltas of a key named twice summed, the last value of a key set twice).
#[derive(Debug, Default)]
pub struct WriteMisses {
    /// The keys for the node.
    keys: Vec<Key>,
    /// Their values, concatenated.
    values: Vec<f32>,
    /// Positions of the call applied in the store.
    local: usize,
}

impl WriteMisses {
    /// The distinct keys left to the node.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Their values, concatenated in the order of [`WriteMisses::keys`].
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Whether the store applied every position.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Positions of the call applied in the store.
    pub fn local(&self) -> usize {
        self.local
    }

    /// The keys and their values, for the node's command.
    pub fn into_parts(self) -> (Vec<Key>, Vec<f32>) {
        (self.keys, self.values)
    }
}

/// What became of a valid access started through [`WorkerAccess::pull_via`],
/// [`WorkerAccess::write_via`] or [`WorkerAccess::other_via`] (an invalid one is an `Err` that
/// touched nothing).
#[derive(Debug)]
pub enum Issue<M> {
    /// The store served all of it; no command was issued.
    Local(M),
    /// The misses went to the node under the caller's ticket.
    Sent(M),
    /// The store served what it could, and the node refused the misses (e.g. `Busy`): a write
    /// may be partly applied, as a failed remote write always can.
    Refused(M, OpError),
    /// Nothing was done: issue it again after the worker's own operations completed.
    Held(Hold),
}

/// Calls `f(key, offset, len)` for every key; offsets are prefix sums of the lengths from
/// `start` (`start + i * len` when lengths are uniform). Keys must be inside the layout.
#[inline]
pub fn walk(layout: &Layout, keys: &[Key], start: usize, mut f: impl FnMut(Key, usize, usize)) {
    match layout.uniform_len() {
        Some(len) => {
            for (i, &k) in keys.iter().enumerate() {
                f(k, start + i * len, len);
            }
        }
        None => {
            let mut off = start;
            for &k in keys {
                let len = layout.len_of(k).unwrap_or(0);
                f(k, off, len);
                off += len;
            }
        }
    }
}

/// Checks a call before anything is touched: every key inside the layout, and `got` values
/// where the keys need that many.
pub fn validate(layout: &Layout, keys: &[Key], got: usize) -> Result<(), OpError> {
    let expected = layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
    if expected != got {
        return Err(OpError::ValueLength { expected, got });
    }
    Ok(())
}

/// Checks the keys of a call that carries no values: every key inside the layout.
pub fn validate_keys(layout: &Layout, keys: &[Key]) -> Result<usize, OpError> {
    layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })
}

/// A worker's bound on operations in flight under `cfg`: its share of the node's
/// `requests_pending_max`, so that the node never refuses its workers as `Busy` (the runtime
/// may lower it further).
pub fn inflight_max(cfg: &Config) -> usize {
    (cfg.requests_pending_max / usize::from(cfg.workers_per_node.max(1))).max(1)
}

/// One step of a worker's `finalize` (see [`finalize_steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizeStep {
    /// Under a clock gate: the worker advances its clock no more, so that the gates stop
    /// waiting for it ([`Node::retire`]).
    Retire,
    /// End every intent of the worker ([`Node::end_intents`]).
    EndIntents,
    /// Wait for every own operation, then pass a cluster-wide barrier; a failure is the
    /// finalize's error.
    Barrier,
    /// Wait for two more sync rounds ([`Node::wait_sync`]): every replica's last delta reaches
    /// its owner.
    WaitSync,
    /// A last barrier whose failure is not an error: it keeps this node from shutting down
    /// (and its transport from closing) before every node passed the barriers before it.
    LastBarrier,
}

/// The steps of a worker's `finalize` under `technique` and `gate`, in order. When any worker's
/// finalize has passed its last `Barrier`, no node holds an update another has not merged.
pub fn finalize_steps(technique: Technique, gate: Gate) -> &'static [FinalizeStep] {
    use FinalizeStep::*;
    match (technique.uses_rounds(), gate == Gate::Async) {
        (true, true) => &[EndIntents, Barrier, WaitSync, Barrier, LastBarrier],
        (true, false) => &[Retire, EndIntents, Barrier, WaitSync, Barrier, LastBarrier],
        (false, true) => &[Barrier, LastBarrier],
        (false, false) => &[Retire, Barrier, LastBarrier],
    }
}

/// One worker's access path: its remote operations in flight and their keys (the ordering
/// rule), its in-flight bound, and scratch for splitting calls into local and remote parts.
#[derive(Debug)]
pub struct WorkerAccess {
    inflight: Map<Ticket, Inflight>,
    keys: Map<Key, Uses>,
    /// Scratch for one call: a key for the node → its index among the call's misses.
    index: Map<Key, usize>,
    inflight_max: usize,
}

impl WorkerAccess {
    /// A worker with nothing in flight that may have `inflight_max` (at least one) operations
    /// in flight.
    pub fn new(inflight_max: usize) -> WorkerAccess {
        WorkerAccess {
            inflight: Map::default(),
            keys: Map::default(),
            index: Map::default(),
            inflight_max: inflight_max.max(1),
        }
    }

    /// Operations in flight.
    pub fn outstanding(&self) -> usize {
        self.inflight.len()
    }

    /// Whether one more operation fits in the in-flight bound.
    pub fn has_room(&self) -> bool {
        self.inflight.len() < self.inflight_max
    }

    /// Whether an access of `kind` to any of `keys` would overtake an operation in flight.
    /// Free while nothing that touches values is in flight.
    #[inline]
    pub fn conflicts(&self, keys: &[Key], kind: AccessKind) -> bool {
        if self.keys.is_empty() || kind == AccessKind::Other {
            return false;
        }
        keys.iter().any(|k| self.keys.get(k).is_some_and(|u| u.blocks(kind)))
    }

    /// Whether an access of `kind` to `keys` may start now.
    pub fn admit(&self, keys: &[Key], kind: AccessKind) -> Result<(), Hold> {
        if self.conflicts(keys, kind) {
            return Err(Hold::Overtakes);
        }
        if !self.has_room() {
            return Err(Hold::Full);
        }
        Ok(())
    }

    /// Operation `ticket`, of `kind` on `keys` (distinct), was handed to the node.
    pub fn record(&mut self, ticket: Ticket, keys: Vec<Key>, kind: AccessKind) {
        debug_assert!(!self.inflight.contains_key(&ticket), "ticket {ticket:?} recorded twice");
        if kind != AccessKind::Other {
            for k in &keys {
                if let Some(n) = self.keys.entry(*k).or_default().count(kind) {
                    *n += 1;
                }
            }
        }
        self.inflight.insert(ticket, Inflight { keys, kind });
    }

    /// Operation `ticket` completed (or the worker gave up on it); false if it was not in
    /// flight (completing twice changes nothing).
    pub fn complete(&mut self, ticket: Ticket) -> bool {
        let Some(op) = self.inflight.remove(&ticket) else { return false };
        for k in &op.keys {
            if let Some(u) = self.keys.get_mut(k) {
                if let Some(n) = u.count(op.kind) {
                    debug_assert!(*n > 0, "key {k} of {ticket:?} was not counted");
                    *n = n.saturating_sub(1);
                }
                if u.is_empty() {
                    self.keys.remove(k);
                }
            }
        }
        true
    }

    /// Whether `ticket` is in flight.
    pub fn is_in_flight(&self, ticket: Ticket) -> bool {
        self.inflight.contains_key(&ticket)
    }

    /// The local fast path of a pull: with uniform lengths, `vals` of the right length and
    /// no conflict, copies values from the store while every key is local; returns how many
    /// positions it served (0 if it could not start). A key the store holds is inside the
    /// layout, so a pull served entirely here needs no other validation.
    #[inline]
    pub fn pull_fast(&self, store: &Store, layout: &Layout, keys: &[Key], vals: &mut [f32]) -> usize {
        let Some(len) = layout.uniform_len().filter(|l| l.checked_mul(keys.len()) == Some(vals.len())) else {
            return 0;
        };
        if self.conflicts(keys, AccessKind::Pull) {
            return 0;
        }
        store.read_run(keys, vals, len)
    }

    /// Serves positions `from..` of a validated pull (the first `from` were served by
    /// [`WorkerAccess::pull_fast`]) from the store where it can; the rest are misses. Only
    /// `local_first` reads the store (the fuzzer passes false to stand for a key that became
    /// local after the worker looked).
    pub fn split_pull(
        &mut self,
        store: &Store,
        layout: &Layout,
        keys: &[Key],
        vals: &mut [f32],
        from: usize,
        local_first: bool,
    ) -> PullMisses {
        let from = if layout.uniform_len().is_some() { from.min(keys.len()) } else { 0 };
        let index = &mut self.index;
        if !index.is_empty() {
            index.clear();
        }
        let start = from * layout.uniform_len().unwrap_or(0);
        let mut remote: Vec<Key> = Vec::new();
        let mut places: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut pos = from;
        walk(layout, &keys[from..], start, |k, off, len| {
            let at = pos;
            pos += 1;
            if !index.is_empty() {
                if let Some(&j) = index.get(&k) {
                    places.push((at, off, j, len));
                    return;
                }
            }
            if !(local_first && store.read(k, &mut vals[off..off + len])) {
                index.insert(k, remote.len());
                places.push((at, off, remote.len(), len));
                remote.push(k);
            }
        });
        let mut src = Vec::with_capacity(remote.len());
        walk(layout, &remote, 0, |_, off, _| src.push(off));
        let places: Vec<Place> =
            places.into_iter().map(|(pos, dst, j, len)| Place { pos, dst, src: src[j], len }).collect();
        PullMisses { local: keys.len() - places.len(), keys: remote, places }
    }

    /// Applies a validated push or set in the store where the keys are local (all of them, if
    /// `local_first` is false: see [`WorkerAccess::split_pull`]); returns the rest.
    #[inline]
    pub fn split_write(
        &mut self,
        store: &Store,
        layout: &Layout,
        keys: &[Key],
        vals: &[f32],
        write: WriteKind,
        local_first: bool,
    ) -> WriteMisses {
        let apply = |k: Key, v: &[f32]| match write {
            WriteKind::Add => store.add(k, v),
            WriteKind::Set => store.set(k, v),
        };
        // Fast path: with uniform lengths, apply while every key is local.
        let mut served = 0;
        if let Some(len) = layout.uniform_len().filter(|_| local_first) {
            served = match write {
                WriteKind::Add => store.add_run(keys, vals, len),
                WriteKind::Set => store.set_run(keys, vals, len),
            };
        }
        if served == keys.len() {
            return WriteMisses { keys: Vec::new(), values: Vec::new(), local: served };
        }
        let index = &mut self.index;
        if !index.is_empty() {
            index.clear();
        }
        let start = served * layout.uniform_len().unwrap_or(0);
        let (mut remote, mut values, mut offs) = (Vec::new(), Vec::new(), Vec::new());
        let mut local = served;
        walk(layout, &keys[served..], start, |k, off, len| {
            let v = &vals[off..off + len];
            if !index.is_empty() {
                if let Some(&j) = index.get(&k) {
                    let dst: &mut [f32] = &mut values[offs[j]..offs[j] + len];
                    match write {
                        WriteKind::Add => dst.iter_mut().zip(v).for_each(|(a, d)| *a += *d),
                        WriteKind::Set => dst.copy_from_slice(v),
                    }
                    return;
                }
            }
            if local_first && apply(k, v) {
                local += 1;
            } else {
                index.insert(k, remote.len());
                offs.push(values.len());
                remote.push(k);
                values.extend_from_slice(v);
            }
        });
        WriteMisses { keys: remote, values, local }
    }

    /// The keys of a validated `localize` that the node must be asked for: each key once, and
    /// only those whose main copy is not here (the node would answer the others at once).
    /// Empty when `technique` does not move keys on request: the localize is then complete
    /// without the node. With `local_first` false every key goes to the node, once (the
    /// fuzzer's stand-in for a key that left after the worker looked).
    pub fn split_localize(
        &mut self,
        store: &Store,
        technique: Technique,
        keys: &[Key],
        local_first: bool,
    ) -> Vec<Key> {
        if local_first && !technique.uses_localize() {
            return Vec::new();
        }
        let index = &mut self.index;
        if !index.is_empty() {
            index.clear();
        }
        let mut remote = Vec::new();
        for &k in keys {
            if index.insert(k, 0).is_none() && !(local_first && store.holds(k)) {
                remote.push(k);
            }
        }
        remote
    }

    /// A whole localize for a driver that owns its node, as [`WorkerAccess::pull_via`]: the
    /// keys [`WorkerAccess::split_localize`] keeps go to [`Node::localize`] under `ticket`.
    #[allow(clippy::too_many_arguments)]
    pub fn localize_via(
        &mut self,
        node: &mut Node,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        keys: &[Key],
        local_first: bool,
    ) -> Result<Issue<Vec<Key>>, OpError> {
        validate_keys(&node.config().layout, keys)?;
        if let Err(hold) = self.admit(&[], AccessKind::Other) {
            return Ok(Issue::Held(hold));
        }
        let store = node.store().clone();
        let technique = node.config().technique;
        let remote = self.split_localize(&store, technique, keys, local_first);
        if remote.is_empty() {
            return Ok(Issue::Local(remote));
        }
        if let Err(e) = node.localize(now, worker, ticket, &remote) {
            return Ok(Issue::Refused(remote, e));
        }
        self.record(ticket, Vec::new(), AccessKind::Other);
        Ok(Issue::Sent(remote))
    }

    /// A whole pull for a driver that owns its node (the simulator, the fuzzer): admits it,
    /// serves what the store holds, and issues the misses as [`Node::pull`] under `ticket`.
    #[allow(clippy::too_many_arguments)]
    pub fn pull_via(
        &mut self,
        node: &mut Node,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        keys: &[Key],
        vals: &mut [f32],
        local_first: bool,
    ) -> Result<Issue<PullMisses>, OpError> {
        let layout = node.config().layout.clone();
        validate(&layout, keys, vals.len())?;
        if let Err(hold) = self.admit(keys, AccessKind::Pull) {
            return Ok(Issue::Held(hold));
        }
        let store = node.store().clone();
        let misses = self.split_pull(&store, &layout, keys, vals, 0, local_first);
        if misses.is_empty() {
            return Ok(Issue::Local(misses));
        }
        if let Err(e) = node.pull(now, worker, ticket, misses.keys()) {
            return Ok(Issue::Refused(misses, e));
        }
        self.record(ticket, misses.keys().to_vec(), AccessKind::Pull);
        Ok(Issue::Sent(misses))
    }

    /// A whole push or set for a driver that owns its node, as [`WorkerAccess::pull_via`].
    #[allow(clippy::too_many_arguments)]
    pub fn write_via(
        &mut self,
        node: &mut Node,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        write: WriteKind,
        keys: &[Key],
        vals: &[f32],
        local_first: bool,
    ) -> Result<Issue<WriteMisses>, OpError> {
        let layout = node.config().layout.clone();
        validate(&layout, keys, vals.len())?;
        if let Err(hold) = self.admit(keys, write.into()) {
            return Ok(Issue::Held(hold));
        }
        let store = node.store().clone();
        let misses = self.split_write(&store, &layout, keys, vals, write, local_first);
        if misses.keys.is_empty() {
            return Ok(Issue::Local(misses));
        }
        if let Err(e) = node.push(now, worker, ticket, write, &misses.keys, &misses.values) {
            return Ok(Issue::Refused(misses, e));
        }
        self.record(ticket, misses.keys.clone(), write.into());
        Ok(Issue::Sent(misses))
    }

    /// A command that touches no values (localize, wait for sync rounds, barrier) for a driver
    /// that owns its node: admitted against the in-flight bound, issued by `issue`, recorded
    /// under `ticket` if it was.
    pub fn other_via(
        &mut self,
        ticket: Ticket,
        issue: impl FnOnce() -> Result<(), OpError>,
    ) -> Result<Issue<()>, OpError> {
        if let Err(hold) = self.admit(&[], AccessKind::Other) {
            return Ok(Issue::Held(hold));
        }
        if let Err(e) = issue() {
            return Ok(Issue::Refused((), e));
        }
        self.record(ticket, Vec::new(), AccessKind::Other);
        Ok(Issue::Sent(()))
    }
}

#[cfg(test)]
mod tests;
