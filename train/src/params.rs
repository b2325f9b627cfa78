//! Where a training thread reads and updates its parameters: the [`Params`] trait, with one
//! implementation on a parma [`Worker`] ([`ParmaParams`]) and one on a plain shared-memory array
//! without parma ([`HogwildParams`], Hogwild!). The model code is written once against the trait,
//! so the two engines run the same arithmetic in the same order and their ratio isolates what
//! parma costs.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use parma::{Clock, DistId, Distribution, Key, OpError, SampleError, SampleHandle};
use parma::{Ticket, Worker};
use rand::rngs::StdRng;
use rand::Rng;

use super::TrainError;

/// One training thread's access to the model's parameters. A step `s` is the thread's clock:
/// its keys are announced with [`Params::announce`] some steps ahead, then pulled, updated and
/// the clock advanced.
pub trait Params {
    /// Says that step `step` will access `keys` (sorted, distinct) and asks for `negatives`
    /// negative samples (entity keys) to be ready for it.
    fn announce(&mut self, step: u64, keys: &[Key], negatives: u64) -> Result<(), TrainError>;
    /// Copies the values of `keys` (announced for `step`) into `vals`.
    fn pull(&mut self, step: u64, keys: &[Key], vals: &mut [f32]) -> Result<(), TrainError>;
    /// Fills `keys` with step `step`'s negative samples and `vals` with their values.
    fn pull_negatives(&mut self, step: u64, keys: &mut [Key], vals: &mut [f32]) -> Result<(), TrainError>;
    /// Adds `deltas` to the values of `keys`.
    fn push(&mut self, step: u64, keys: &[Key], deltas: &[f32]) -> Result<(), TrainError>;
    /// Ends step `step`: the thread's clock moves on.
    fn advance(&mut self, step: u64) -> Result<(), TrainError>;
    /// Advances the thread's clock for a step it does not run (its part of the epoch is
    /// shorter than another thread's), so that every thread ends the epoch at the same clock.
    fn pad(&mut self, _step: u64) -> Result<(), TrainError> {
        Ok(())
    }
    /// Waits until every update this thread made is merged everywhere its values are kept, and
    /// its copies hold the others' updates merged so far (parma: two sync rounds).
    fn sync(&mut self, step: u64) -> Result<(), TrainError>;
    /// Waits until every training thread has called it (after its own updates are applied).
    fn barrier(&mut self) -> Result<(), TrainError>;
    /// Writes a checkpoint of the whole model to `dir` with `extra` in its manifest
    /// (collective: every thread calls it at the same point). Only parma has checkpoints.
    fn checkpoint(&mut self, _dir: &Path, _extra: &BTreeMap<String, String>) -> Result<(), TrainError> {
        Err(TrainError::Options("checkpoints need --engine parma".into()))
    }
    /// Replaces the whole model with the checkpoint in `dir` (collective, like
    /// [`Params::checkpoint`]).
    fn restore(&mut self, _dir: &Path) -> Result<(), TrainError> {
        Err(TrainError::Options("--resume needs --engine parma".into()))
    }
}

/// The distribution negatives are drawn from: uniform over the keys `0..n`, or over
/// `start..start + weights.len()` with the given weights (word vectors: unigram^0.75). The
/// sampling manager gets it as a [`Distribution`]; the baseline and the fallback draws of
/// [`ParmaParams`] draw from it directly.
#[derive(Clone, Debug)]
pub struct NegSampler {
    start: u64,
    n: u64,
    /// Cumulative weights, for the weighted case.
    cum: Option<Arc<[f64]>>,
}

impl NegSampler {
    /// Uniform over `0..n` (`n` ≥ 1).
    pub fn uniform(n: u64) -> NegSampler {
        NegSampler { start: 0, n: n.max(1), cum: None }
    }

    /// Over `start..start + weights.len()`, proportional to `weights` (finite, ≥ 0, not all 0).
    pub fn weighted(start: u64, weights: &[f64]) -> NegSampler {
        let mut total = 0.0;
        let cum: Vec<f64> = weights
            .iter()
            .map(|w| {
                total += w;
                total
            })
            .collect();
        NegSampler { start, n: weights.len() as u64, cum: Some(cum.into()) }
    }

    /// One draw.
    pub fn draw(&self, rng: &mut StdRng) -> Key {
        match &self.cum {
            None => Key(self.start + rng.gen_range(0..self.n)),
            Some(cum) => {
                let r = rng.gen::<f64>() * cum.last().copied().unwrap_or(0.0);
                let i = cum.partition_point(|c| *c <= r).min(cum.len().saturating_sub(1));
                Key(self.start + i as u64)
            }
        }
    }

    /// The same distribution for the sampling manager.
    pub fn distribution(&self) -> Result<Distribution, SampleError> {
        match &self.cum {
            None => Distribution::uniform(Key(self.start), Key(self.start + self.n)),
            Some(cum) => {
                let keys: Vec<Key> = (0..self.n).map(|i| Key(self.start + i)).collect();
                let weights: Vec<f64> =
                    cum.iter().scan(0.0, |prev, c| Some(c - std::mem::replace(prev, *c))).collect();
                Distribution::weighted(&keys, &weights)
            }
        }
    }
}

/// Pushes a worker keeps in flight before it waits for the oldest.
const PUSHES_IN_FLIGHT: usize = 8;

/// A parma worker as [`Params`]: intents (or, under relocation, `localize`) for announced
/// keys, negatives drawn by the sampling manager from `dist`.
///
/// Under local sampling (NON-CONFORM) a node may hold no entity at all for a moment (under
/// relocation another node can take every entity it is about to use); the sampling manager
/// then refuses the draw (`NoLocalKey`), and the step's negatives are drawn uniformly over
/// the entities by this thread instead and pulled wherever they are. [`ParmaParams::fallbacks`]
/// counts those steps.
pub struct ParmaParams<'w> {
    w: &'w mut Worker,
    dist: Option<DistId>,
    /// The negatives' distribution, for the fallback draws.
    sampler: NegSampler,
    rng: StdRng,
    /// Steps whose negatives were drawn by the fallback.
    pub fallbacks: u64,
    /// Clocks advanced by `pad`: a step's clock is the step plus this.
    padded: u64,
    /// Announced steps not yet pulled, oldest first: step, localize ticket, sample handle.
    ahead: VecDeque<(u64, Option<Ticket>, Option<SampleHandle>)>,
    pushes: VecDeque<(u64, Ticket)>,
}

impl<'w> ParmaParams<'w> {
    /// Wraps `w`; negatives are drawn from `dist` (registered on every node as `sampler`'s
    /// distribution; `None` for tasks without negatives); `rng` serves the fallback draws.
    pub fn new(w: &'w mut Worker, dist: Option<DistId>, sampler: NegSampler, rng: StdRng) -> Self {
        ParmaParams {
            w,
            dist,
            sampler,
            rng,
            fallbacks: 0,
            padded: 0,
            ahead: VecDeque::new(),
            pushes: VecDeque::new(),
        }
    }

    fn fail(&self, step: u64, op: &'static str) -> impl Fn(OpError) -> TrainError {
        let (node, worker) = (self.w.node().0, self.w.id().0);
        move |error| TrainError::Worker { node, worker, step, op, error }
    }

    fn entry(&mut self, step: u64) -> Result<(Option<Ticket>, Option<SampleHandle>), TrainError> {
        match self.ahead.front() {
            Some(&(s, _, _)) if s == step => {
                let (_, t, h) = self.ahead.pop_front().expect("front exists");
                Ok((t, h))
            }
            _ => Err(TrainError::Internal(format!("step {step} was not announced in order"))),
        }
    }

    /// Waits for every outstanding push.
    fn drain(&mut self) -> Result<(), TrainError> {
        while let Some((s, t)) = self.pushes.pop_front() {
            self.w.wait(t).map_err(self.fail(s, "push"))?;
        }
        Ok(())
    }
}

impl Params for ParmaParams<'_> {
    fn announce(&mut self, step: u64, keys: &[Key], negatives: u64) -> Result<(), TrainError> {
        let window = (Clock(step + self.padded), Clock(step + self.padded + 1));
        // An intent, a localize (whose ticket the step's first pull waits for) or nothing, as
        // the configuration says (under SparseSSP an intent under every technique).
        let ticket = self.w.announce(keys, window.0, window.1).map_err(self.fail(step, "announce"))?;
        let handle = match (negatives, self.dist) {
            (0, _) => None,
            (n, Some(dist)) => Some(
                self.w
                    .prepare_sample(dist, n, window.0, window.1)
                    .map_err(self.fail(step, "prepare_sample"))?,
            ),
            (_, None) => {
                return Err(TrainError::Internal("negatives asked for without a distribution".into()))
            }
        };
        self.ahead.push_back((step, ticket, handle));
        Ok(())
    }

    fn pull(&mut self, step: u64, keys: &[Key], vals: &mut [f32]) -> Result<(), TrainError> {
        if let Some(&(s, Some(_), _)) = self.ahead.front() {
            if s == step {
                let t = self.ahead.front_mut().expect("front exists").1.take().expect("ticket");
                self.w.wait(t).map_err(self.fail(step, "localize"))?;
            }
        }
        self.w.pull(keys, vals).map_err(self.fail(step, "pull"))
    }

    fn pull_negatives(&mut self, step: u64, keys: &mut [Key], vals: &mut [f32]) -> Result<(), TrainError> {
        let (ticket, handle) = self.entry(step)?;
        if let Some(t) = ticket {
            self.w.wait(t).map_err(self.fail(step, "localize"))?;
        }
        let Some(h) = handle else {
            return if keys.is_empty() {
                Ok(())
            } else {
                Err(TrainError::Internal(format!("step {step} has no negatives prepared")))
            };
        };
        match self.w.pull_sample(h, keys, vals) {
            Ok(()) => {}
            Err(OpError::Sampling(SampleError::NoLocalKey)) => {
                self.fallbacks += 1;
                for k in keys.iter_mut() {
                    *k = self.sampler.draw(&mut self.rng);
                }
                self.w.pull(keys, vals).map_err(self.fail(step, "pull"))?;
            }
            Err(e) => return Err(self.fail(step, "pull_sample")(e)),
        }
        self.w.finish_sample(h).map_err(self.fail(step, "finish_sample"))
    }

    fn push(&mut self, step: u64, keys: &[Key], deltas: &[f32]) -> Result<(), TrainError> {
        let t = self.w.push(keys, deltas).map_err(self.fail(step, "push"))?;
        if !t.is_complete() {
            self.pushes.push_back((step, t));
        } else {
            self.w.wait(t).map_err(self.fail(step, "push"))?;
        }
        while self.pushes.len() > PUSHES_IN_FLIGHT {
            let (s, t) = self.pushes.pop_front().expect("not empty");
            self.w.wait(t).map_err(self.fail(s, "push"))?;
        }
        Ok(())
    }

    fn advance(&mut self, step: u64) -> Result<(), TrainError> {
        self.w.advance_clock().map_err(self.fail(step, "advance_clock"))?;
        Ok(())
    }

    fn pad(&mut self, step: u64) -> Result<(), TrainError> {
        self.padded += 1;
        self.advance(step)
    }

    fn sync(&mut self, step: u64) -> Result<(), TrainError> {
        self.w.wait_sync().map_err(self.fail(step, "wait_sync"))
    }

    fn barrier(&mut self) -> Result<(), TrainError> {
        self.drain()?;
        let step = self.w.clock().0;
        self.w.barrier().map_err(self.fail(step, "barrier"))
    }

    fn checkpoint(&mut self, dir: &Path, extra: &BTreeMap<String, String>) -> Result<(), TrainError> {
        self.drain()?;
        self.w.checkpoint(dir, extra).map_err(TrainError::Checkpoint)
    }

    fn restore(&mut self, dir: &Path) -> Result<(), TrainError> {
        self.drain()?;
        self.w.restore(dir).map(|_| ()).map_err(TrainError::Checkpoint)
    }
}

impl Drop for ParmaParams<'_> {
    /// Ends the sample handles of steps announced but never run (after a failure, or the
    /// look-ahead past the last step), so the worker's handle table does not fill up.
    fn drop(&mut self) {
        for (_, _, h) in self.ahead.drain(..) {
            if let Some(h) = h {
                let _ = self.w.finish_sample(h);
            }
        }
    }
}

/// The model as one plain shared array of `f32`s, `len` per key, for Hogwild!: every thread
/// reads and adds to it without locks.
///
/// Safety argument (there is no `unsafe` here): each `f32` is an [`AtomicU32`] holding its bits,
/// read and written with `Relaxed` loads and stores, which compile to the same plain moves as
/// `f32` accesses on x86-64 and AArch64. An update is a load, an add and a store, not an atomic
/// read-modify-write, so two threads adding to the same element at once can lose one of the
/// additions, and a thread can read a row while another writes it, seeing some elements old and
/// some new. That is exactly Hogwild!'s race (Niu et al. 2011), which SGD tolerates when updates
/// are sparse; it is never undefined behaviour, because every access is atomic.
pub struct HogwildStore {
    vals: Vec<AtomicU32>,
    len: usize,
}

impl HogwildStore {
    /// `keys` rows of `len` zeros.
    pub fn new(keys: u64, len: usize) -> HogwildStore {
        let n = keys as usize * len;
        HogwildStore { vals: (0..n).map(|_| AtomicU32::new(0)).collect(), len }
    }

    fn row(&self, k: Key) -> &[AtomicU32] {
        let at = k.0 as usize * self.len;
        &self.vals[at..at + self.len]
    }

    /// Copies the rows of `keys` into `out`.
    pub fn read(&self, keys: &[Key], out: &mut [f32]) {
        for (k, o) in keys.iter().zip(out.chunks_exact_mut(self.len)) {
            for (a, v) in self.row(*k).iter().zip(o) {
                *v = f32::from_bits(a.load(Ordering::Relaxed));
            }
        }
    }

    /// Adds `deltas` to the rows of `keys` (racy, see the type's documentation).
    pub fn add(&self, keys: &[Key], deltas: &[f32]) {
        for (k, d) in keys.iter().zip(deltas.chunks_exact(self.len)) {
            for (a, v) in self.row(*k).iter().zip(d) {
                let old = f32::from_bits(a.load(Ordering::Relaxed));
                a.store((old + v).to_bits(), Ordering::Relaxed);
            }
        }
    }

    /// Replaces the rows of `keys` with `vals`.
    pub fn write(&self, keys: &[Key], vals: &[f32]) {
        for (k, d) in keys.iter().zip(vals.chunks_exact(self.len)) {
            for (a, v) in self.row(*k).iter().zip(d) {
                a.store(v.to_bits(), Ordering::Relaxed);
            }
        }
    }
}

/// Why a [`ThreadBarrier`] wait ended without the barrier passing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierEnd {
    /// Its timeout ran out.
    TimedOut,
    /// [`ThreadBarrier::abort`] was called: a thread failed.
    Aborted,
}

/// A barrier for `n` threads (the baseline's): a wait lasts until every thread arrived, the
/// barrier is aborted (a thread failed and will never arrive) or its timeout, if any, runs out.
pub struct ThreadBarrier {
    n: usize,
    timeout: Option<Duration>,
    /// Threads arrived, the generation, and whether it was aborted.
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl ThreadBarrier {
    /// A barrier for `n` threads.
    pub fn new(n: usize, timeout: Option<Duration>) -> ThreadBarrier {
        ThreadBarrier { n, timeout, state: Mutex::new((0, 0, false)), cv: Condvar::new() }
    }

    /// Ends every wait, present and future, with [`BarrierEnd::Aborted`].
    pub fn abort(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cv.notify_all();
    }

    /// Waits for the other threads.
    pub fn wait(&self) -> Result<(), BarrierEnd> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.2 {
            return Err(BarrierEnd::Aborted);
        }
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.n {
            *g = (0, generation + 1, false);
            self.cv.notify_all();
            return Ok(());
        }
        let waiting = |s: &mut (usize, u64, bool)| s.1 == generation && !s.2;
        let g = match self.timeout {
            Some(t) => self.cv.wait_timeout_while(g, t, waiting).unwrap_or_else(|e| e.into_inner()).0,
            None => self.cv.wait_while(g, waiting).unwrap_or_else(|e| e.into_inner()),
        };
        match (g.1 != generation, g.2) {
            (true, _) => Ok(()),
            (false, true) => Err(BarrierEnd::Aborted),
            (false, false) => Err(BarrierEnd::TimedOut),
        }
    }
}

/// One thread of the Hogwild! baseline: reads and adds straight in the shared array; negatives
/// are drawn uniformly from `0..entities` by the thread's own generator when the step is
/// announced, as the sampling manager's independent draws (CONFORM) would be.
pub struct HogwildParams<'a> {
    store: &'a HogwildStore,
    barrier: &'a ThreadBarrier,
    rng: StdRng,
    sampler: NegSampler,
    /// Announced steps' negatives, oldest first.
    ahead: VecDeque<(u64, Vec<Key>)>,
}

impl<'a> HogwildParams<'a> {
    /// A thread on `store`; negatives drawn from `sampler` with `rng`.
    pub fn new(
        store: &'a HogwildStore,
        barrier: &'a ThreadBarrier,
        rng: StdRng,
        sampler: NegSampler,
    ) -> Self {
        HogwildParams { store, barrier, rng, sampler, ahead: VecDeque::new() }
    }
}

impl Params for HogwildParams<'_> {
    fn announce(&mut self, step: u64, _keys: &[Key], negatives: u64) -> Result<(), TrainError> {
        let keys = (0..negatives).map(|_| self.sampler.draw(&mut self.rng)).collect();
        self.ahead.push_back((step, keys));
        Ok(())
    }

    fn pull(&mut self, _step: u64, keys: &[Key], vals: &mut [f32]) -> Result<(), TrainError> {
        self.store.read(keys, vals);
        Ok(())
    }

    fn pull_negatives(&mut self, step: u64, keys: &mut [Key], vals: &mut [f32]) -> Result<(), TrainError> {
        match self.ahead.pop_front() {
            Some((s, drawn)) if s == step && drawn.len() == keys.len() => {
                keys.copy_from_slice(&drawn);
                self.store.read(keys, vals);
                Ok(())
            }
            _ => Err(TrainError::Internal(format!("step {step}'s negatives were not announced in order"))),
        }
    }

    fn push(&mut self, _step: u64, keys: &[Key], deltas: &[f32]) -> Result<(), TrainError> {
        self.store.add(keys, deltas);
        Ok(())
    }

    fn advance(&mut self, _step: u64) -> Result<(), TrainError> {
        Ok(())
    }

    /// One array: every update is in place at once.
    fn sync(&mut self, _step: u64) -> Result<(), TrainError> {
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), TrainError> {
        self.barrier.wait().map_err(|e| match e {
            BarrierEnd::Aborted => TrainError::Aborted,
            BarrierEnd::TimedOut => TrainError::Options(
                "a baseline thread did not reach the barrier within --barrier-timeout".into(),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hogwild_store_reads_what_was_added() {
        let s = HogwildStore::new(4, 2);
        s.write(&[Key(1), Key(3)], &[1.0, 2.0, 3.0, 4.0]);
        s.add(&[Key(3)], &[0.5, -4.0]);
        let mut out = [9.0; 6];
        s.read(&[Key(0), Key(1), Key(3)], &mut out);
        assert_eq!(out, [0.0, 0.0, 1.0, 2.0, 3.5, 0.0]);
    }

    #[test]
    fn weighted_negatives_follow_their_weights() {
        use rand::SeedableRng;
        let s = NegSampler::weighted(10, &[1.0, 0.0, 3.0]);
        let mut rng = StdRng::seed_from_u64(1);
        let mut counts = [0u32; 3];
        for _ in 0..4000 {
            counts[(s.draw(&mut rng).0 - 10) as usize] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((2700..3300).contains(&counts[2]), "{counts:?}");
        // A key of weight 0 is not part of the sampling manager's support.
        assert_eq!(s.distribution().unwrap().support_len(), 2);
    }

    #[test]
    fn thread_barrier_passes_together_gives_up_alone_and_ends_when_aborted() {
        let b = ThreadBarrier::new(2, None);
        std::thread::scope(|s| {
            let h = s.spawn(|| b.wait().and_then(|()| b.wait()));
            assert_eq!(b.wait().and_then(|()| b.wait()), Ok(()));
            assert_eq!(h.join().unwrap(), Ok(()));
        });
        let lonely = ThreadBarrier::new(2, Some(Duration::from_millis(10)));
        assert_eq!(lonely.wait(), Err(BarrierEnd::TimedOut));
        let aborted = ThreadBarrier::new(2, None);
        std::thread::scope(|s| {
            let h = s.spawn(|| aborted.wait());
            std::thread::sleep(Duration::from_millis(5));
            aborted.abort();
            assert_eq!(h.join().unwrap(), Err(BarrierEnd::Aborted));
        });
        assert_eq!(aborted.wait(), Err(BarrierEnd::Aborted));
    }
}
