//! [`Worker`]: one training thread's handle on its node.
//!
//! The data plane: a key held here is read or updated by the worker thread itself in the
//! [`parma_core::Store`], taking only that key's shard latch. It never goes through the driver
//! thread and never takes a node-wide lock. Only the keys that miss become a command for the
//! node, through the bounded command queue.
//!
//! The path itself (local first, misses as commands, and the rule that an access never
//! overtakes the worker's own earlier remote operation on the same key) is core's
//! [`parma_core::WorkerAccess`], which the simulator and the fuzzer drive too; this file
//! carries it out on a thread, waiting where it says [`parma_core::Hold`].
//!
//! # Duplicate keys in one call
//!
//! Checking every local call for duplicates would cost a hash set on the hot path, so a call
//! may name a key more than once, with the meaning [`parma_core::access`] defines (a pull
//! fills every position, a push adds every delta, a set keeps the last value). Keys sent to the
//! node are always distinct.
//!
//! # Errors
//!
//! Validation errors ([`OpError::KeyOutsideLayout`], [`OpError::ValueLength`]) come before
//! anything changed. Errors after validation (`QueueStalled`, `Closed`, `Timeout`,
//! `PeerFailed`, `Aborted`) may leave a push or set partly applied, as a failed remote write
//! always can.
//!
//! # Back-pressure
//!
//! Every command for the node goes through one bounded queue (`Options::command_queue_max`).
//! A command that finds it full is not refused: the worker wakes the driver and waits for
//! room, at most `Config::request_timeout` (then `OpError::QueueStalled`), counting the wait in
//! `WorkerStats::commands_waited`. So a worker that steps faster than its node's driver takes
//! commands (small steps, a driver thread short of a core) slows down instead of failing.

mod announce;
mod sample;
mod wait;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use parma_core::access::{self, FinalizeStep, PullMisses};
use parma_core::wire::WriteKind;
use parma_core::{
    AccessKind, Clock, Completion, Gate, IntentKind, Key, NodeId, OpError, Sampler, Ticket as CoreTicket,
    WorkerAccess, WorkerId,
};

use crate::driver::Command;
use crate::shared::{Shared, LAZY_QUEUED_MAX};
use crate::stats::WorkerStats;
use announce::check_window;

/// Looks at a full command queue between yields this many times before sleeping between looks.
const SEND_YIELDS: u32 = 64;
/// Sleep between looks at a full command queue, after the yields.
const SEND_SLEEP: StdDuration = StdDuration::from_micros(50);

/// Hashes a key with [`parma_core::mix`]: the worker's scratch maps are looked up for every
/// key of a call, and the default hasher's SipHash (keyed against flooding, which keys chosen by
/// the application itself need no defence from) cost more than the copies they index.
#[derive(Clone, Copy, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = parma_core::mix(Key(self.0 ^ n));
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
}

/// A map from keys, hashed with [`KeyHasher`].
pub(crate) type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

/// A worker's handle on an operation it issued; wait for it with [`Worker::wait`].
///
/// Every ticket should be waited for: the result of one that is dropped stays in the worker's
/// completion slot until the worker is dropped.
#[derive(Debug)]
#[must_use = "wait for the operation with Worker::wait"]
pub struct Ticket {
    id: CoreTicket,
    worker: WorkerId,
    /// False if the operation completed in the worker's own call.
    remote: bool,
}

impl Ticket {
    /// Whether the operation already completed in the call that issued it (every key was
    /// local), so waiting for it returns at once.
    pub fn is_complete(&self) -> bool {
        !self.remote
    }
}

/// A pull whose remote keys are still on their way; holds the caller's value buffer until
/// [`Worker::wait_pull`] fills in the rest. Dropping it leaves those values unwritten (and the
/// node's answer in the worker's slot until the worker is dropped).
#[derive(Debug)]
#[must_use = "finish the pull with Worker::wait_pull"]
pub struct PullTicket<'a> {
    vals: &'a mut [f32],
    ticket: Ticket,
    misses: PullMisses,
}

impl PullTicket<'_> {
    /// Whether every key was local, so the values are complete already.
    pub fn is_complete(&self) -> bool {
        self.ticket.is_complete()
    }

    /// Lets go of the value buffer, keeping what the pull still has to fill in: for a caller
    /// that cannot hold the borrow until the values arrive (a binding whose buffers belong to
    /// another runtime's objects). Finish it with [`Worker::finish_pull`] on a buffer of the
    /// same length, normally the same one: the values of local keys are in it already.
    pub fn detach(self) -> PendingPull {
        PendingPull { len: self.vals.len(), ticket: self.ticket, misses: self.misses }
    }
}

/// A pull detached from its value buffer ([`PullTicket::detach`]): the remote keys still on
/// their way and where their values go.
#[derive(Debug)]
#[must_use = "finish the pull with Worker::finish_pull"]
pub struct PendingPull {
    len: usize,
    ticket: Ticket,
    misses: PullMisses,
}

impl PendingPull {
    /// Whether every key was local, so the values were complete already when it was detached.
    pub fn is_complete(&self) -> bool {
        self.ticket.is_complete()
    }

    /// The length of the value buffer it fills.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it fills no value at all (a pull of no keys).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One training thread's handle on its node. Created by [`crate::NodeRuntime::start`], one per
/// worker id. `Send`: move it to the thread that uses it.
pub struct Worker {
    id: WorkerId,
    shared: Arc<Shared>,
    commands: SyncSender<Command>,
    access: WorkerAccess,
    /// Scratch for one call: distinct keys (localize), keys read (`pull_sample`).
    remote_index: KeyMap<usize>,
    /// Scratch for one `pull_sample`: the values of the samples read where they were drawn.
    sample_values: Vec<f32>,
    next_ticket: u64,
    /// Commands this worker queued without waking the driver since it last woke it.
    lazy_queued: usize,
    /// When `lazy_queued` reaches this, the worker wakes the driver after all.
    lazy_queued_max: usize,
    stats: WorkerStats,
    clock: Clock,
    sampler: Sampler,
    /// `finalize` began: dropping the handle is no longer a worker leaving its siblings.
    finalizing: bool,
}

impl Worker {
    pub(crate) fn new(
        id: WorkerId,
        shared: Arc<Shared>,
        commands: SyncSender<Command>,
        queue_max: usize,
        inflight_max: usize,
        sampler: Sampler,
    ) -> Self {
        // The workers' lazy commands together fill at most half of the queue before one of
        // them wakes the driver.
        let lazy = LAZY_QUEUED_MAX.min(queue_max / 2);
        let lazy_queued_max = (lazy / usize::from(shared.cfg.workers_per_node.max(1))).max(1);
        Worker {
            id,
            shared,
            commands,
            access: WorkerAccess::new(inflight_max),
            remote_index: KeyMap::default(),
            sample_values: Vec::new(),
            next_ticket: 0,
            lazy_queued: 0,
            lazy_queued_max,
            stats: WorkerStats::default(),
            clock: Clock(0),
            sampler,
            finalizing: false,
        }
    }

    /// This worker's id.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// The node this worker belongs to.
    pub fn node(&self) -> NodeId {
        self.shared.me
    }

    /// This worker's counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Remote operations of this worker not yet known to have completed.
    pub fn outstanding(&self) -> usize {
        self.access.outstanding()
    }

    /// Pulls the values of `keys` into `vals` (concatenated in key order) and waits for them.
    pub fn pull(&mut self, keys: &[Key], vals: &mut [f32]) -> Result<(), OpError> {
        let t = self.pull_async(keys, vals)?;
        self.wait_pull(t)
    }

    /// Starts a pull: copies the values of local keys into `vals` now and asks the node for
    /// the rest, which [`Worker::wait_pull`] fills in.
    pub fn pull_async<'a>(&mut self, keys: &[Key], vals: &'a mut [f32]) -> Result<PullTicket<'a>, OpError> {
        // Fast path: with uniform lengths, the right buffer length and no write of this worker
        // in flight to these keys, copy while every key is local (no other validation needed:
        // see `WorkerAccess::pull_fast`). Any other pull is validated in full below, before
        // anything is asked of the node.
        let mut served = 0;
        let uniform = self.shared.cfg.layout.uniform_len();
        if uniform.is_some_and(|l| l.checked_mul(keys.len()) == Some(vals.len())) {
            self.check_open()?;
            served = self.access.pull_fast(&self.shared.store, &self.shared.cfg.layout, keys, vals);
            if served == keys.len() {
                self.stats.keys_pulled_local += keys.len() as u64;
                self.publish();
                return Ok(PullTicket { vals, ticket: self.local_ticket(), misses: PullMisses::default() });
            }
        }
        self.prepare(keys, vals.len(), AccessKind::Pull)?;
        let (store, layout) = (&self.shared.store, &self.shared.cfg.layout);
        let mut misses = self.access.split_pull(store, layout, keys, vals, served, true);
        self.stats.keys_pulled_local += misses.local() as u64;
        self.stats.keys_pulled_remote += misses.keys().len() as u64;
        self.publish();
        if misses.is_empty() {
            return Ok(PullTicket { vals, ticket: self.local_ticket(), misses });
        }
        let cmd = |worker, ticket, keys| Command::Pull { worker, ticket, keys };
        let ticket = self.submit(misses.take_keys(), AccessKind::Pull, cmd)?;
        Ok(PullTicket { vals, ticket, misses })
    }

    /// Finishes a pull: waits for the remote keys' values and copies them into place.
    pub fn wait_pull(&mut self, t: PullTicket<'_>) -> Result<(), OpError> {
        let PullTicket { vals, ticket, misses } = t;
        match self.wait_completion(ticket)? {
            None => Ok(()),
            Some(Completion::Pull(values)) => misses.fill(&values, vals),
            Some(_) => Err(OpError::InvalidArgument),
        }
    }

    /// Finishes a detached pull ([`PullTicket::detach`]): waits for the remote keys' values and
    /// copies them into `vals`, which must have the length of the buffer it was started with
    /// (else `OpError::ValueLength`, and the pull is still waited for, so nothing is left
    /// behind).
    pub fn finish_pull(&mut self, p: PendingPull, vals: &mut [f32]) -> Result<(), OpError> {
        let PendingPull { len, ticket, misses } = p;
        let done = self.wait_completion(ticket)?;
        if vals.len() != len {
            return Err(OpError::ValueLength { expected: len, got: vals.len() });
        }
        match done {
            None => Ok(()),
            Some(Completion::Pull(values)) => misses.fill(&values, vals),
            Some(_) => Err(OpError::InvalidArgument),
        }
    }

    /// Adds `vals` (the keys' deltas, concatenated) to `keys`. Local keys are updated in place
    /// now; the ticket completes when the rest were applied at their owners.
    pub fn push(&mut self, keys: &[Key], vals: &[f32]) -> Result<Ticket, OpError> {
        self.write(keys, vals, WriteKind::Add)
    }

    /// Replaces the values of `keys` with `vals`, like [`Worker::push`].
    pub fn set(&mut self, keys: &[Key], vals: &[f32]) -> Result<Ticket, OpError> {
        self.write(keys, vals, WriteKind::Set)
    }

    fn write(&mut self, keys: &[Key], vals: &[f32], write: WriteKind) -> Result<Ticket, OpError> {
        let kind = AccessKind::from(write);
        self.prepare(keys, vals.len(), kind)?;
        let (store, layout) = (&self.shared.store, &self.shared.cfg.layout);
        let misses = self.access.split_write(store, layout, keys, vals, write, true);
        self.stats.keys_pushed_local += misses.local() as u64;
        self.stats.keys_pushed_remote += misses.keys().len() as u64;
        self.publish();
        if misses.is_empty() {
            return Ok(self.local_ticket());
        }
        let (keys, values) = misses.into_parts();
        self.submit(keys, kind, move |worker, ticket, keys| Command::Write {
            worker,
            ticket,
            write,
            keys,
            values,
        })
    }

    /// Copies the values of `keys` into `vals` only if every key is held here now, without
    /// involving the node; returns whether it did. It checks first and copies after, so a key
    /// that moves away in between makes it return `Ok(false)` with `vals` partly written. It
    /// also returns `Ok(false)` rather than overtake this worker's own outstanding writes to
    /// any of the keys.
    pub fn pull_if_local(&mut self, keys: &[Key], vals: &mut [f32]) -> Result<bool, OpError> {
        self.validate(keys, vals.len())?;
        if self.access.conflicts(keys, AccessKind::Pull) {
            self.reap();
            if self.access.conflicts(keys, AccessKind::Pull) {
                return Ok(false);
            }
        }
        let store = &self.shared.store;
        if !keys.iter().all(|k| store.is_local(*k)) {
            return Ok(false);
        }
        let mut all = true;
        access::walk(&self.shared.cfg.layout, keys, 0, |k, off, len| {
            all = all && store.read(k, &mut vals[off..off + len]);
        });
        if all {
            self.stats.keys_pulled_local += keys.len() as u64;
            self.publish();
        }
        Ok(all)
    }

    /// Asks the node to move `keys` here (relocation); the ticket completes when all of them
    /// are held here. Under static partitioning it completes without moving anything. Keys
    /// whose main copy is already here are not sent to the node (it would answer them at once,
    /// as it does for every key under a technique that does not relocate): a localize of keys
    /// all held here completes in the worker's own call, without a trip through the driver.
    pub fn localize(&mut self, keys: &[Key]) -> Result<Ticket, OpError> {
        self.validate_keys(keys)?;
        let remote = self.access.split_localize(&self.shared.store, self.shared.cfg.technique, keys, true);
        if remote.is_empty() {
            return Ok(self.local_ticket());
        }
        self.make_room()?;
        self.submit(remote, AccessKind::Other, |worker, ticket, keys| Command::Localize {
            worker,
            ticket,
            keys,
        })
    }

    /// Signals that this worker will access `keys` while its clock is in `[start, end)`
    /// (start inclusive, end exclusive; an empty window is `OpError::IntentWindow`). Cheap and never blocks: the node acts on it in a
    /// later sync round, as early as action timing says it must (the driver thread is not
    /// even woken for it: it takes the intent when the next round is due). Where the node
    /// would not act on it (`Config::acts_on_intents`: one node, or a technique without sync
    /// rounds, and no SparseSSP) the keys are validated and nothing is sent. A full command
    /// queue makes it wait for room (see the module docs); an intent the node itself has no
    /// room for is counted in `DriverStats::intents_dropped` (accessing the keys then still
    /// works, maybe remotely).
    pub fn intent(&mut self, keys: &[Key], start: Clock, end: Clock) -> Result<(), OpError> {
        self.intent_of_kind(keys, start, end, IntentKind::ReadWrite)
    }

    /// [`Worker::intent`] with the kind of access (recorded in the node's statistics).
    pub fn intent_of_kind(
        &mut self,
        keys: &[Key],
        start: Clock,
        end: Clock,
        kind: IntentKind,
    ) -> Result<(), OpError> {
        check_window(start, end)?;
        self.validate_keys(keys)?;
        if !self.shared.cfg.acts_on_intents() {
            // The node would only count it (one node, or a technique without sync rounds):
            // no copy of the keys, no command, no wake of the driver.
            return Ok(());
        }
        self.send(Command::Intent { worker: self.id, keys: keys.to_vec(), start, end, kind })?;
        self.nudge_lazily();
        Ok(())
    }

    /// Advances this worker's clock by one and returns the new clock. Cheap: a counter here
    /// and a message to the node, queued behind this worker's earlier intents (like them, it
    /// does not wake the driver thread: the node reads clocks when a sync round starts).
    ///
    /// Under a clock gate (`Config::gate` other than `Async`) it then waits until the gate lets
    /// the worker go on at its new clock (`Node::gate`): under SSP with bound s, until every
    /// update any worker made at clocks up to the new clock − s − 1 is visible here. Like a
    /// barrier, it waits as long as every peer is alive, or at most `Options::barrier_timeout`
    /// if one is set. An error (`GateTimeout`, `PeerFailed`, `Closed`, `Aborted`) leaves the
    /// clock advanced; calling `gate` waits again.
    pub fn advance_clock(&mut self) -> Result<Clock, OpError> {
        self.check_open()?;
        self.send(Command::AdvanceClock { worker: self.id })?;
        self.clock = Clock(self.clock.0 + 1);
        if self.shared.cfg.gate == Gate::Async {
            self.nudge_lazily();
            return Ok(self.clock);
        }
        self.gate()?;
        Ok(self.clock)
    }

    /// Waits until the clock gate lets this worker go on at its current clock (at once
    /// without a gate), as `advance_clock` does: as long as every peer is alive, or at most
    /// `Options::barrier_timeout` (`GateTimeout`). `advance_clock` calls it.
    pub fn gate(&mut self) -> Result<(), OpError> {
        self.check_open()?;
        if self.shared.cfg.gate == Gate::Async {
            return Ok(());
        }
        let id = self.new_ticket();
        self.send(Command::Gate { worker: self.id, ticket: id })?;
        self.access.record(id, Vec::new(), AccessKind::Other);
        self.shared.nudge_driver();
        let deadline = self.shared.opts.barrier_timeout.map(|t| StdInstant::now() + t);
        self.wait_barrier(id, deadline).map(|_| ()).map_err(|e| {
            if e == OpError::Timeout {
                OpError::GateTimeout
            } else {
                e
            }
        })
    }

    /// What this worker shares with its node (for `checkpoint`).
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// This worker's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Returns after two more sync rounds of this node have ended (at once under techniques
    /// without sync rounds): every replica here was then synchronized with its owner at least
    /// once after the call.
    pub fn wait_sync(&mut self) -> Result<(), OpError> {
        self.check_open()?;
        let ticket = self.submit(Vec::new(), AccessKind::Other, |worker, ticket, _| Command::WaitSync {
            worker,
            ticket,
        })?;
        self.wait(ticket)
    }

    /// Waits for an operation of this worker.
    pub fn wait(&mut self, t: Ticket) -> Result<(), OpError> {
        self.wait_completion(t).map(|_| ())
    }

    /// Waits until every outstanding operation of this worker completed, then enters the
    /// cluster-wide barrier and waits until every worker of every node has entered it.
    ///
    /// Another worker may compute for as long as it needs before it enters: the wait ends
    /// only when the barrier passes, a peer fails (`PeerFailed`: the transport's peer timeout
    /// turns a silent peer into a failed one), a worker of this node is dropped without
    /// `finalize` (`WorkerLeft`), the node's waits are aborted (`Aborted`) or the node closes,
    /// or, if `Options::barrier_timeout` is set, when it runs out (`BarrierTimeout`).
    pub fn barrier(&mut self) -> Result<(), OpError> {
        self.check_open()?;
        self.wait_all()?;
        let ticket = self
            .submit(Vec::new(), AccessKind::Other, |worker, ticket, _| Command::Barrier { worker, ticket })?;
        let deadline = self.shared.opts.barrier_timeout.map(|t| StdInstant::now() + t);
        self.wait_barrier(ticket.id, deadline).map(|_| ()).map_err(|e| {
            if e == OpError::Timeout {
                OpError::BarrierTimeout
            } else {
                e
            }
        })
    }

    /// Finishes this worker: waits for its outstanding operations, passes a last barrier with
    /// every other worker, and releases the handle (graceful shutdown waits for this).
    ///
    /// Under techniques with sync rounds it first ends this worker's intents; after the
    /// barrier it waits for two sync rounds (every replica's last delta reaches its owner)
    /// and passes one more barrier, so that when any worker's `finalize` returns, no node
    /// holds an update another has not merged.
    ///
    /// A worker that is dropped instead never enters a barrier again: the barriers of the
    /// other workers of its node then end with `OpError::WorkerLeft`.
    ///
    /// A last barrier follows, whose failure is not an error: it keeps this node from
    /// shutting down before every node has passed the barriers above. Without it, a node that
    /// shuts down at once closes its transport while another node may still wait for the
    /// release of the last barrier above, and that node's transport reports the closed peer
    /// failed, failing its barrier. Everything `finalize` promises is established before it.
    pub fn finalize(mut self) -> Result<(), OpError> {
        self.finalizing = true;
        for step in access::finalize_steps(self.shared.cfg.technique, self.shared.cfg.gate) {
            match step {
                FinalizeStep::Retire => {
                    self.check_open()?;
                    self.send(Command::Retire { worker: self.id })?;
                    self.shared.nudge_driver();
                }
                FinalizeStep::EndIntents => {
                    self.check_open()?;
                    self.send(Command::EndIntents { worker: self.id })?;
                    self.shared.nudge_driver();
                }
                FinalizeStep::Barrier => self.barrier()?,
                FinalizeStep::WaitSync => self.wait_sync()?,
                FinalizeStep::LastBarrier => {
                    let _ = self.barrier();
                }
            }
        }
        Ok(())
    }

    // ----- internals -----

    fn check_open(&self) -> Result<(), OpError> {
        if let Some(why) = self.shared.aborted.get() {
            return Err(*why);
        }
        if self.shared.closed.load(SeqCst) {
            return Err(OpError::Closed);
        }
        Ok(())
    }

    /// Queues `cmd` for the node; a full queue is back-pressure (see the module docs).
    fn send(&mut self, cmd: Command) -> Result<(), OpError> {
        match self.commands.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(cmd)) => self.send_when_room(cmd),
            Err(TrySendError::Disconnected(_)) => Err(OpError::Closed),
        }
    }

    /// The queue was full: wakes the driver and offers `cmd` again, yielding the core between
    /// looks and later sleeping, until it fits or `Config::request_timeout` passes.
    #[cold]
    fn send_when_room(&mut self, mut cmd: Command) -> Result<(), OpError> {
        self.stats.commands_waited += 1;
        self.publish();
        self.lazy_queued = 0;
        self.shared.wake_driver();
        let timeout = StdDuration::from_micros(self.shared.cfg.request_timeout.as_micros());
        let deadline = StdInstant::now() + timeout;
        let mut looks = 0u32;
        loop {
            self.check_open()?;
            if looks < SEND_YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(SEND_SLEEP);
            }
            looks = looks.saturating_add(1);
            match self.commands.try_send(cmd) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(c)) => cmd = c,
                Err(TrySendError::Disconnected(_)) => return Err(OpError::Closed),
            }
            if StdInstant::now() >= deadline {
                return Err(OpError::QueueStalled);
            }
            // Should a wake have been lost (the driver parked between two looks), another.
            if looks % SEND_YIELDS == 0 {
                self.shared.wake_driver();
            }
        }
    }

    fn validate_keys(&self, keys: &[Key]) -> Result<usize, OpError> {
        self.check_open()?;
        self.shared.cfg.layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })
    }

    fn validate(&self, keys: &[Key], got: usize) -> Result<(), OpError> {
        self.check_open()?;
        access::validate(&self.shared.cfg.layout, keys, got)
    }

    /// Everything before a pull or write touches anything: validation, then waiting for this
    /// worker's own operations it must not overtake, then for room in its in-flight bound.
    fn prepare(&mut self, keys: &[Key], got: usize, kind: AccessKind) -> Result<(), OpError> {
        self.validate(keys, got)?;
        if self.access.conflicts(keys, kind) {
            self.settle(keys, kind)?;
        }
        self.make_room()
    }

    fn new_ticket(&mut self) -> CoreTicket {
        self.next_ticket += 1;
        CoreTicket(self.next_ticket)
    }

    fn local_ticket(&mut self) -> Ticket {
        Ticket { id: self.new_ticket(), worker: self.id, remote: false }
    }

    /// Queues the command `make(worker, ticket, keys)` and records `keys` as in flight.
    fn submit(
        &mut self,
        keys: Vec<Key>,
        kind: AccessKind,
        make: impl FnOnce(WorkerId, CoreTicket, Vec<Key>) -> Command,
    ) -> Result<Ticket, OpError> {
        let id = self.new_ticket();
        let tracked = if kind == AccessKind::Other { Vec::new() } else { keys.clone() };
        self.send(make(self.id, id, keys))?;
        self.access.record(id, tracked, kind);
        self.shared.nudge_driver();
        Ok(Ticket { id, worker: self.id, remote: true })
    }

    /// After queueing a command that the node needs only when its next sync round starts (an
    /// intent, a clock advance): wakes the driver only every so many of them, so that it does
    /// not wake for every step of every worker.
    ///
    /// This delays nothing the node does. It looks at intents and clocks only when a sync
    /// round starts, which is a timeout of the node: the driver wakes for it by itself, and in
    /// each turn it takes the queued commands before it handles a due timeout. Under a
    /// technique without sync rounds these commands only count (intents are ignored, the clock
    /// is not read). Each worker wakes the driver after its share of [`LAZY_QUEUED_MAX`] such
    /// commands, so that together they stay within the room the command queue has for them:
    /// they neither crowd out the workers' operations nor block a worker while the driver
    /// sleeps.
    fn nudge_lazily(&mut self) {
        self.lazy_queued += 1;
        if self.lazy_queued >= self.lazy_queued_max {
            self.lazy_queued = 0;
            self.shared.nudge_driver();
        }
    }

    fn publish(&self) {
        self.shared.counters[self.id.index()].publish(&self.stats);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.finalizing && self.check_open().is_ok() {
            // Its siblings' barriers can never pass now: they end with `WorkerLeft`.
            self.shared.worker_left(self.id);
            if self.shared.cfg.gate != Gate::Async {
                // It advances its clock no more: the gates stop waiting for it.
                let _ = self.send(Command::Retire { worker: self.id });
            }
        }
        self.publish();
        self.shared.workers_live.fetch_sub(1, SeqCst);
        self.shared.wake_driver();
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("node", &self.shared.me)
            .field("id", &self.id)
            .field("outstanding", &self.access.outstanding())
            .finish()
    }
}
