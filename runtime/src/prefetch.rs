//! Keeping a worker's announcements a fixed number of steps ahead of its work.
//!
//! A training loop under adaptive management tells its node which keys each coming step will
//! use, well before the step ([`Worker::announce`]): the node's action timing then relocates
//! or replicates them in time, and the step finds them local. [`Prefetch`] is that loop's
//! bookkeeping: each step is one clock, the keys of step `i + lookahead` are announced while
//! step `i` runs, a relocation's `localize` is waited for only when its step begins, and the
//! worker's clock advances when a step ends.

use std::collections::VecDeque;

use parma_core::{Clock, Key, OpError};

use crate::{Error, Ticket, Worker};

/// Examples whose keys a loop announces ahead by default ([`Prefetch::lookahead_for`]).
///
/// Announcing early costs nothing until action timing acts on it; announcing later than a
/// sync round's round trip leaves keys remote when their step comes. Measured on the KGE task
/// across two processes at one example per step, 8 steps ahead sent 4.5 times the bytes and
/// took 3 times as long per epoch as 1,024 examples ahead (`docs/performance.md`, "Small
/// steps against AdaPM"; AdaPM's own KGE application announces about 1,000 examples ahead).
pub const LOOKAHEAD_EXAMPLES: usize = 1024;

/// The largest look-ahead, in steps, a [`Prefetch`] accepts (it keeps one entry per step).
pub const LOOKAHEAD_MAX: usize = 1 << 16;

/// The default look-ahead in steps for steps of `examples_per_step` examples:
/// [`LOOKAHEAD_EXAMPLES`] examples' worth, at least 8 steps and at most 1,024.
pub fn default_lookahead(examples_per_step: usize) -> usize {
    LOOKAHEAD_EXAMPLES.div_ceil(examples_per_step.max(1)).clamp(8, 1024)
}

/// A worker's announcements kept `lookahead` steps ahead of the step it works on.
///
/// Each step is one clock of the worker: [`Prefetch::next_step`] ends the step before (it
/// calls [`Worker::advance_clock`], so do not call it yourself in such a loop), announces the
/// keys of the steps up to `lookahead` beyond the one it begins, waits for that step's
/// `localize` if the technique relocates, and hands back its keys. `B` is whatever holds a
/// step's keys (`Vec<Key>`, a slice, your batch type that can be seen as keys).
///
/// ```
/// # use parma_core::{Config, Key, Layout, NodeId};
/// # use parma_runtime::{default_lookahead, NodeRuntime, Prefetch};
/// # use parma_transport_loopback::threaded::{cluster, ThreadedOptions};
/// # let cfg = Config::new(1, 1, Layout::uniform(100, 1).unwrap());
/// # let t = cluster(1, ThreadedOptions::default()).pop().unwrap();
/// # let (node, mut workers) = NodeRuntime::start(cfg, NodeId(0), t).unwrap();
/// # let mut w = workers.pop().unwrap();
/// let mut batches = (0..50u64).map(|i| vec![Key(i), Key(i + 50)]);
/// let mut steps = Prefetch::new(default_lookahead(2)).unwrap();
/// let mut vals = [0.0f32; 2];
/// while let Some(keys) = steps.next_step(&mut w, &mut batches).unwrap() {
///     w.pull(&keys, &mut vals).unwrap();
///     let t = w.push(&keys, &[0.5, 0.5]).unwrap();
///     w.wait(t).unwrap();
/// }
/// assert_eq!(w.clock().0, 50); // one clock per step
/// # w.finalize().unwrap();
/// # node.shutdown().unwrap();
/// ```
#[derive(Debug)]
pub struct Prefetch<B> {
    lookahead: usize,
    /// Steps announced and not begun, oldest first, with their `localize` tickets.
    queue: VecDeque<(B, Option<Ticket>)>,
    /// Whether a step was handed out and its clock not yet advanced.
    in_step: bool,
}

impl<B: AsRef<[Key]>> Prefetch<B> {
    /// A prefetcher that announces `lookahead` steps beyond the current one (0: each step's
    /// keys are announced when it begins, which under relocation still moves them before the
    /// step's first access). At most [`LOOKAHEAD_MAX`].
    pub fn new(lookahead: usize) -> Result<Self, Error> {
        if lookahead > LOOKAHEAD_MAX {
            return Err(Error::Option { name: "Prefetch lookahead", why: "must be at most 65,536 steps" });
        }
        Ok(Prefetch { lookahead, queue: VecDeque::with_capacity(lookahead.min(1024) + 1), in_step: false })
    }

    /// Steps announced beyond the current one.
    pub fn lookahead(&self) -> usize {
        self.lookahead
    }

    /// Steps announced and not yet begun.
    pub fn announced(&self) -> usize {
        self.queue.len()
    }

    /// Whether [`Prefetch::announce`] takes another step now.
    pub fn has_room(&self) -> bool {
        self.queue.len() < self.lookahead + usize::from(!self.in_step)
    }

    /// Announces `keys` as the next step not yet announced (for the explicit form of the
    /// loop, where the caller decides when to announce; [`Prefetch::next_step`] with an empty
    /// source then begins the announced steps in order). `Busy` if `lookahead` steps beyond
    /// the current one are announced already ([`Prefetch::has_room`]); the errors of
    /// [`Worker::announce`] otherwise, and nothing is queued then.
    pub fn announce(&mut self, w: &mut Worker, keys: B) -> Result<(), OpError> {
        if !self.has_room() {
            return Err(OpError::Busy);
        }
        self.push(w, keys)
    }

    fn push(&mut self, w: &mut Worker, keys: B) -> Result<(), OpError> {
        // The queue's first step runs at the worker's next clock if one is under way, else at
        // its current clock; each later one a clock after.
        let start = w.clock().0 + u64::from(self.in_step) + self.queue.len() as u64;
        let ticket = w.announce(keys.as_ref(), Clock(start), Clock(start + 1))?;
        self.queue.push_back((keys, ticket));
        Ok(())
    }

    /// Ends the current step (advancing the worker's clock), announces steps from `source`
    /// until `lookahead` steps beyond the next one are announced, begins the next step (waiting
    /// for its `localize` under relocation) and returns its keys. `None` once `source` and the
    /// announced steps are used up; the last step's clock is advanced then.
    ///
    /// An error leaves the prefetcher consistent: a failed `advance_clock` (a gate's timeout,
    /// a failed peer) has still ended the step; a failed announcement queued nothing and may be
    /// retried by calling again; a failed `localize` wait has begun the step anyway (its keys
    /// may be remote, which accesses handle).
    pub fn next_step(
        &mut self,
        w: &mut Worker,
        source: &mut impl Iterator<Item = B>,
    ) -> Result<Option<B>, OpError> {
        if self.in_step {
            self.in_step = false;
            w.advance_clock()?;
        }
        while self.queue.len() <= self.lookahead {
            let Some(keys) = source.next() else { break };
            self.push(w, keys)?;
        }
        let Some((keys, ticket)) = self.queue.pop_front() else { return Ok(None) };
        self.in_step = true;
        if let Some(t) = ticket {
            w.wait(t)?;
        }
        Ok(Some(keys))
    }

    /// Ends the current step, if one is under way, and forgets the steps announced beyond it
    /// (waiting for their `localize`s, so that no ticket is left outstanding). Call it when a
    /// loop stops early; a loop that ran until `next_step` returned `None` has nothing left.
    pub fn finish(&mut self, w: &mut Worker) -> Result<(), OpError> {
        let mut first = None;
        for (_, ticket) in self.queue.drain(..) {
            if let Some(Err(e)) = ticket.map(|t| w.wait(t)) {
                first.get_or_insert(e);
            }
        }
        if std::mem::take(&mut self.in_step) {
            if let Err(e) = w.advance_clock() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
