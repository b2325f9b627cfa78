//! One worker's sampler: its open handles, its pool streams and its random generator.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;
use alloc::vec::Vec;

use hashbrown::HashSet;

use super::pool::Pool;
use super::rng::SampleRng;
use super::{Registered, Registry, SampleError, SamplingOptions, Scheme};
use crate::ids::{DistId, Key, SampleHandle};
use crate::layout::Layout;

/// Most draws local sampling tries by rejection before it scans the support for a local key.
/// Rejection is exact; the scan is not, so it only runs when the local keys' total
/// probability `m` is so small that this many draws missed them all (chance `(1 − m)^65536`:
/// below 10⁻⁶ for `m ≥ 2.2·10⁻⁴`). Each costs at most one look-up of `is_local` per key tried.
const LOCAL_TRIES: u32 = 1 << 16;
/// Most keys of the support one scan of local sampling looks at.
const LOCAL_SCAN_MAX: u64 = 1 << 20;
/// Draws a sample without replacement tries before it scans for a key not yet in the handle.
const DISTINCT_TRIES: u32 = 64;

/// Counters of one sampler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplingStats {
    /// Handles prepared.
    pub handles_prepared: u64,
    /// Independent draws from the distributions (pool draws included).
    pub iid_draws: u64,
    /// Pools drawn.
    pub pools_drawn: u64,
    /// Samples returned by `pull`.
    pub samples_pulled: u64,
    /// Of those, keys that were local (owned or a ready replica) when returned.
    pub samples_local: u64,
    /// Of those, keys that were not: their values need the network.
    pub samples_remote: u64,
    /// Samples postponed to the end of their handle (LONG-TERM).
    pub samples_postponed: u64,
    /// Postponed samples not pulled when their handle finished, carried to the front of the
    /// worker's next handle of the same distribution (LONG-TERM).
    pub samples_carried: u64,
    /// Postponed samples dropped at `finish` because the carry was full
    /// (`SamplingOptions::sample_size_max` per distribution).
    pub samples_dropped: u64,
    /// Local draws that fell back to scanning the support for a local key (NON-CONFORM).
    pub local_scans: u64,
}

impl core::ops::AddAssign for SamplingStats {
    fn add_assign(&mut self, o: SamplingStats) {
        self.handles_prepared += o.handles_prepared;
        self.iid_draws += o.iid_draws;
        self.pools_drawn += o.pools_drawn;
        self.samples_pulled += o.samples_pulled;
        self.samples_local += o.samples_local;
        self.samples_remote += o.samples_remote;
        self.samples_postponed += o.samples_postponed;
        self.samples_carried += o.samples_carried;
        self.samples_dropped += o.samples_dropped;
        self.local_scans += o.local_scans;
    }
}

/// The state of one prepared sample.
#[derive(Clone, Debug)]
struct Handle {
    dist: DistId,
    reg: Arc<Registered>,
    /// Samples not yet pulled.
    left: u64,
    /// The prepared samples not yet pulled, each with whether it was postponed already
    /// (empty under local sampling, which draws at pull time).
    queue: VecDeque<(Key, bool)>,
    /// Keys returned so far, under local sampling without replacement.
    seen: HashSet<Key>,
}

/// One worker's sampling state. See the module docs of [`crate::sampling`].
#[derive(Debug)]
pub struct Sampler {
    registry: Arc<Registry>,
    opts: SamplingOptions,
    rng: SampleRng,
    handles: BTreeMap<SampleHandle, Handle>,
    /// LONG-TERM: per distribution, postponed samples of finished handles that were never
    /// pulled; the next handle of the distribution starts with them. Dropping them instead
    /// would bias the worker towards local keys whenever it pulls only part of its handles.
    carried: BTreeMap<DistId, VecDeque<Key>>,
    next: u64,
    stats: SamplingStats,
}

impl Sampler {
    /// The sampler of a worker of the node whose distributions are `registry`; `rng` is its
    /// generator (see [`SampleRng::new`]).
    pub fn new(registry: Arc<Registry>, rng: SampleRng) -> Sampler {
        let opts = registry.options();
        Sampler {
            registry,
            opts,
            rng,
            handles: BTreeMap::new(),
            carried: BTreeMap::new(),
            next: 0,
            stats: SamplingStats::default(),
        }
    }

    /// The distributions this sampler draws from (its node's).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Counters.
    pub fn stats(&self) -> SamplingStats {
        self.stats
    }

    /// Handles prepared and not finished.
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// Samples `handle` has left to pull.
    pub fn left(&self, handle: SampleHandle) -> Result<u64, SampleError> {
        self.handles.get(&handle).map(|h| h.left).ok_or(SampleError::UnknownHandle { handle })
    }

    /// Prepares `n` samples of `dist`. Returns the handle and the distinct keys drawn, sorted,
    /// for which the caller signals intent over the handle's clock window (none under local
    /// sampling, which draws at pull time).
    pub fn prepare(&mut self, dist: DistId, n: u64) -> Result<(SampleHandle, Vec<Key>), SampleError> {
        let reg = self.registry.get(dist)?;
        if let Some(node) = reg.mismatch() {
            return Err(SampleError::DistributionMismatch { dist, node });
        }
        let support = reg.dist.support_len();
        if n == 0 || n > self.opts.sample_size_max || (!self.opts.with_replacement && n > support) {
            return Err(SampleError::BadSize { n });
        }
        if self.handles.len() >= self.opts.handles_max {
            return Err(SampleError::TooManyHandles);
        }
        let (queue, keys): (VecDeque<(Key, bool)>, Vec<Key>) = match reg.conformity.scheme() {
            Scheme::Independent => (VecDeque::new(), self.draw_independent(&reg, n as usize)),
            Scheme::PoolReuse => (VecDeque::new(), self.draw_pooled(&reg, n as usize, &[])),
            Scheme::PoolReusePostpone => {
                let carried = self.take_carried(dist, n as usize);
                let fresh = self.draw_pooled(&reg, n as usize - carried.len(), &carried);
                (carried.into_iter().map(|k| (k, true)).collect(), fresh)
            }
            Scheme::Local => (VecDeque::new(), Vec::new()),
        };
        let mut queue = queue;
        queue.extend(keys.into_iter().map(|k| (k, false)));
        let mut intent: Vec<Key> = queue.iter().map(|(k, _)| *k).collect();
        intent.sort_unstable();
        intent.dedup();
        self.next += 1;
        let handle = SampleHandle(self.next);
        self.handles.insert(handle, Handle { dist, reg, left: n, queue, seen: HashSet::new() });
        self.stats.handles_prepared += 1;
        Ok((handle, intent))
    }

    /// Fills `keys` with the next `keys.len()` samples of `handle`. `values_len` is the length
    /// of the caller's value buffer, which must hold the keys' values (per `layout`);
    /// `is_local` says whether a key is local now. On an error nothing changed.
    pub fn pull(
        &mut self,
        handle: SampleHandle,
        keys: &mut [Key],
        values_len: usize,
        layout: &Layout,
        mut is_local: impl FnMut(Key) -> bool,
    ) -> Result<(), SampleError> {
        let h = self.handles.get(&handle).ok_or(SampleError::UnknownHandle { handle })?;
        let count = keys.len() as u64;
        if count > h.left {
            return Err(SampleError::CountBeyondSample { count, left: h.left });
        }
        if let Some(len) = layout.uniform_len() {
            let expected = keys.len() * len;
            if values_len != expected {
                return Err(SampleError::BufferLength { expected, got: values_len });
            }
        }
        // With lengths per key, the buffer can only be checked once the keys are known.
        let undo = layout.uniform_len().is_none().then(|| h.clone());
        let (rng, stats) = (self.rng, self.stats);
        if let Err(e) = self.pull_keys(handle, keys, &mut is_local) {
            (self.rng, self.stats) = (rng, stats);
            return Err(e);
        }
        if let Some(h) = undo {
            let expected = layout.total_len(keys).unwrap_or(usize::MAX);
            if expected != values_len {
                self.handles.insert(handle, h);
                (self.rng, self.stats) = (rng, stats);
                return Err(SampleError::BufferLength { expected, got: values_len });
            }
        }
        Ok(())
    }

    /// Ends `handle`. Samples not pulled are dropped, except under LONG-TERM those that were
    /// postponed: the worker's next handle of the distribution starts with them (up to
    /// `SamplingOptions::sample_size_max` per distribution), so that postponing never drops
    /// the non-local samples a partly pulled handle leaves behind.
    pub fn finish(&mut self, handle: SampleHandle) -> Result<(), SampleError> {
        let h = self.handles.remove(&handle).ok_or(SampleError::UnknownHandle { handle })?;
        if h.reg.conformity.scheme() == Scheme::PoolReusePostpone {
            let room = self.opts.sample_size_max as usize;
            let carried = self.carried.entry(h.dist).or_default();
            for (k, _) in h.queue.into_iter().filter(|(_, postponed)| *postponed) {
                if carried.len() < room {
                    carried.push_back(k);
                    self.stats.samples_carried += 1;
                } else {
                    self.stats.samples_dropped += 1;
                }
            }
        }
        Ok(())
    }

    /// Postponed samples of `dist` waiting to be pulled: carried from finished handles.
    pub fn carried(&self, dist: DistId) -> usize {
        self.carried.get(&dist).map_or(0, VecDeque::len)
    }

    // ----- internals -----

    /// Up to `n` carried samples of `dist` for a new handle (distinct ones, without
    /// replacement; repeats stay carried).
    fn take_carried(&mut self, dist: DistId, n: usize) -> Vec<Key> {
        let Some(carried) = self.carried.get_mut(&dist) else { return Vec::new() };
        if self.opts.with_replacement {
            let take = n.min(carried.len());
            return carried.drain(..take).collect();
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut kept = VecDeque::new();
        for k in carried.drain(..) {
            if out.len() < n && seen.insert(k) {
                out.push(k);
            } else {
                kept.push_back(k);
            }
        }
        *carried = kept;
        out
    }

    fn pull_keys(
        &mut self,
        handle: SampleHandle,
        keys: &mut [Key],
        is_local: &mut impl FnMut(Key) -> bool,
    ) -> Result<(), SampleError> {
        let Some(mut h) = self.handles.remove(&handle) else {
            return Err(SampleError::UnknownHandle { handle });
        };
        let r = match h.reg.conformity.scheme() {
            Scheme::Local => self.pull_local(&mut h, keys, is_local),
            Scheme::PoolReusePostpone => {
                self.pull_postponing(&mut h, keys, is_local);
                Ok(())
            }
            _ => {
                let count = keys.len();
                for (out, (k, _)) in keys.iter_mut().zip(h.queue.drain(..count)) {
                    *out = k;
                }
                Ok(())
            }
        };
        if r.is_ok() {
            h.left -= keys.len() as u64;
            for k in keys.iter() {
                let local = is_local(*k);
                self.stats.samples_local += u64::from(local);
                self.stats.samples_remote += u64::from(!local);
            }
            self.stats.samples_pulled += keys.len() as u64;
        }
        self.handles.insert(handle, h);
        r
    }

    /// LONG-TERM: a sample that is not local moves to the end of the handle, once.
    fn pull_postponing(&mut self, h: &mut Handle, keys: &mut [Key], is_local: &mut impl FnMut(Key) -> bool) {
        // Each sample is moved back at most once, so this ends within `left + count` steps.
        let mut i = 0;
        while i < keys.len() {
            let Some((k, postponed)) = h.queue.pop_front() else { break };
            if postponed || is_local(k) {
                keys[i] = k;
                i += 1;
            } else {
                h.queue.push_back((k, true));
                self.stats.samples_postponed += 1;
            }
        }
    }

    /// NON-CONFORM: draws among the keys local now.
    fn pull_local(
        &mut self,
        h: &mut Handle,
        keys: &mut [Key],
        is_local: &mut impl FnMut(Key) -> bool,
    ) -> Result<(), SampleError> {
        let distinct = !self.opts.with_replacement;
        let mut taken: HashSet<Key> = HashSet::new();
        for out in keys.iter_mut() {
            let seen = &h.seen;
            let fresh = |k: &Key| !(distinct && (seen.contains(k) || taken.contains(k)));
            let k = self.draw_local(&h.reg, |k| fresh(&k) && is_local(k)).ok_or(SampleError::NoLocalKey)?;
            *out = k;
            if distinct {
                taken.insert(k);
            }
        }
        h.seen.extend(taken);
        Ok(())
    }

    /// A draw from `reg` restricted to the keys `ok` accepts: by rejection, which is exact,
    /// and only after `LOCAL_TRIES` misses by a scan from a random position of the support,
    /// which favours keys after long runs of rejected ones.
    fn draw_local(&mut self, reg: &Registered, mut ok: impl FnMut(Key) -> bool) -> Option<Key> {
        for _ in 0..LOCAL_TRIES {
            let (k, _) = reg.dist.draw(&mut self.rng);
            self.stats.iid_draws += 1;
            if ok(k) {
                return Some(k);
            }
        }
        self.stats.local_scans += 1;
        let support = reg.dist.support_len();
        let start = self.rng.below(support);
        (0..support.min(LOCAL_SCAN_MAX)).map(|j| reg.dist.key_at((start + j) % support)).find(|k| ok(*k))
    }

    /// CONFORM: `n` iid draws (distinct ones without replacement).
    fn draw_independent(&mut self, reg: &Registered, n: usize) -> Vec<Key> {
        self.stats.iid_draws += n as u64;
        if self.opts.with_replacement {
            return (0..n).map(|_| reg.dist.draw(&mut self.rng).0).collect();
        }
        let mut seen = HashSet::with_capacity(n);
        (0..n)
            .map(|_| {
                let k = self.draw_distinct(reg, &seen);
                seen.insert(k);
                k
            })
            .collect()
    }

    /// A draw not in `seen`, which must leave a key of the support out: by rejection, then
    /// by a scan from the last draw (it ends within `seen.len() + 1` steps).
    fn draw_distinct(&mut self, reg: &Registered, seen: &HashSet<Key>) -> Key {
        let mut at = 0;
        for _ in 0..DISTINCT_TRIES {
            let (k, i) = reg.dist.draw(&mut self.rng);
            if !seen.contains(&k) {
                return k;
            }
            at = i;
        }
        let support = reg.dist.support_len();
        (1..=support)
            .map(|j| reg.dist.key_at((at + j) % support))
            .find(|k| !seen.contains(k))
            .unwrap_or(Key(0))
    }

    /// BOUNDED and LONG-TERM: the next `n` keys of the node's pool stream of `reg`, none of
    /// them in `have` without replacement. Without replacement, stream keys the handle has
    /// already are carried over to later handles (up to `G` of them), and the stream is
    /// abandoned for independent draws if it cannot fill the handle in `4n + 2·U·G` steps.
    fn draw_pooled(&mut self, reg: &Registered, n: usize, have: &[Key]) -> Vec<Key> {
        let (g, u) = (self.opts.pool_size, self.opts.reuse);
        let mut out = Vec::with_capacity(n);
        let mut pool = reg.pool.lock();
        let stats = &mut self.stats;
        let mut next = |pool: &mut Pool| {
            let (k, drawn) = pool.next(&reg.dist, g, u);
            stats.pools_drawn += u64::from(drawn);
            stats.iid_draws += if drawn { u64::from(g) } else { 0 };
            k
        };
        if self.opts.with_replacement {
            (0..n).for_each(|_| out.push(next(&mut pool)));
            return out;
        }
        let mut seen: HashSet<Key> = have.iter().copied().collect();
        let mut kept = VecDeque::new();
        for k in core::mem::take(&mut pool.carry) {
            if out.len() < n && seen.insert(k) {
                out.push(k);
            } else {
                kept.push_back(k);
            }
        }
        for _ in 0..4 * n + 2 * (g * u) as usize {
            if out.len() == n {
                break;
            }
            let k = next(&mut pool);
            if seen.insert(k) {
                out.push(k);
            } else if kept.len() < g as usize {
                kept.push_back(k);
            }
        }
        pool.carry = kept;
        drop(pool);
        while out.len() < n {
            let k = self.draw_distinct(reg, &seen);
            self.stats.iid_draws += 1;
            seen.insert(k);
            out.push(k);
        }
        out
    }
}
