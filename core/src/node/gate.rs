//! Clock gates ([`crate::Gate`]): when a worker that advanced its clock may go on.
//!
//! **Flushed clock.** A node's flushed clock F is the highest t such that every update its
//! workers made at clocks below t is applied at its main copy. Three things bound it:
//! - the lowest clock of its workers that have not retired (updates at that clock may still
//!   come);
//! - the clock of its oldest write request still waiting for an owner's answer;
//! - under techniques with replicas, the lowest worker clock at the start of the last sync
//!   round that ended clean: a round sends every replica's delta and ends once every owner
//!   answered, so the deltas of updates made before it started are applied then.
//!
//! **Global flushed clock.** Each node sends its F to every peer whenever it grows
//! ([`Message::Flushed`]); G, the minimum over all nodes, only grows.
//!
//! **SSP(s) and BSP (s = 0).** A worker at clock c passes once G ≥ c − s: every update made
//! at a clock below c − s is at its main copy. A main copy here and a remote key (read at its
//! owner) then show them. A replica shows them once it was refreshed by an owner's answer
//! given after that: every replica held at a round's start gets an entry in that round, and
//! a replica installed during a round comes from an answer given after the round started. So
//! the node also needs a round that started when G ≥ c − s was known here to have ended
//! clean.
//!
//! **Bounded delay τ.** A worker at clock c passes once none of its own requests issued at a
//! clock below c − τ is outstanding. Other workers are not waited for.
//!
//! **SparseSSP(s, p).** A worker passes as under SSP(s), or earlier, on speculation
//! (`super::speculation`): once it would pass SSP(s + p), and no node whose flushed clock is
//! below c − s has an update to a key the worker declared for c that may still be unapplied
//! or made at a clock below c − s.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use super::speculation::{Declared, Speculation};
use super::Node;
use crate::config::Gate;
use crate::error::OpError;
use crate::ids::{NodeId, Ticket, WorkerId};
use crate::time::Instant;
use crate::wire::Message;

/// A worker waiting at its gate.
#[derive(Clone, Debug)]
pub(super) struct Waiter {
    pub(super) worker: WorkerId,
    ticket: Ticket,
    pub(super) clock: u64,
    /// Under SparseSSP: its speculation, once begun.
    pub(super) spec: Option<Speculation>,
}

/// Outstanding requests of one worker issued at one clock.
#[derive(Clone, Copy, Debug, Default)]
struct Issued {
    requests: u32,
    writes: u32,
}

pub(super) struct GateState {
    pub(super) gate: Gate,
    pub(super) replicas: bool,
    /// Per local worker: its outstanding requests by the clock they were issued at.
    issued: Vec<BTreeMap<u64, Issued>>,
    pub(super) retired: Vec<bool>,
    /// Per node: the highest flushed clock it announced (this node's own at its index).
    pub(super) flushed: Vec<u64>,
    /// The global flushed clock: the minimum of `flushed`.
    pub(super) global: u64,
    /// The lowest clock of this node's live workers, `global`, and the round's number (of
    /// `rounds_begun`), when the open round started; `None` once that round was abandoned.
    round_start: Option<(u64, u64, u64)>,
    /// The first two of the last round that ended clean.
    round_clean: (u64, u64),
    /// Rounds begun, and the number of the last one that ended clean.
    pub(super) rounds_begun: u64,
    pub(super) clean_begun: u64,
    pub(super) waiters: Vec<Waiter>,
    /// Under SparseSSP: per local worker, the intents it signaled that may still matter, and
    /// the keys in all of them.
    pub(super) declared: Vec<Vec<Declared>>,
    pub(super) declared_keys: usize,
    /// The end of the latest-ending intent this node refused under SparseSSP.
    pub(super) refused_until: u64,
    /// The last speculation query number used.
    pub(super) next_query: u64,
    /// Per local worker: a speculation begun ahead for the clock it names.
    pub(super) prepared: Vec<Option<(u64, Speculation)>>,
}

impl GateState {
    pub(super) fn new(cfg: &crate::Config) -> GateState {
        let workers = usize::from(cfg.workers_per_node);
        GateState {
            gate: cfg.gate,
            replicas: cfg.technique.uses_replicas(),
            issued: vec![BTreeMap::new(); workers],
            retired: vec![false; workers],
            flushed: vec![0; usize::from(cfg.nodes)],
            global: 0,
            round_start: None,
            round_clean: (0, 0),
            rounds_begun: 0,
            clean_begun: 0,
            waiters: Vec::new(),
            declared: (0..workers).map(|_| Vec::new()).collect(),
            declared_keys: 0,
            refused_until: 0,
            next_query: 0,
            prepared: vec![None; workers],
        }
    }

    fn off(&self) -> bool {
        self.gate == Gate::Async
    }

    /// Workers waiting at their gates.
    pub(super) fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// The global flushed clock known here.
    pub(super) fn global(&self) -> u64 {
        self.global
    }

    /// A request of `worker` issued at `clock` is outstanding.
    // (Tracked under every gate but `Async`: bounded delay counts requests, the others writes.)
    pub(super) fn request_started(&mut self, worker: WorkerId, clock: u64, write: bool) {
        if self.off() {
            return;
        }
        if let Some(m) = self.issued.get_mut(worker.index()) {
            let e = m.entry(clock).or_default();
            e.requests += 1;
            e.writes += u32::from(write);
        }
    }

    /// That request ended (answered or failed).
    pub(super) fn request_ended(&mut self, worker: WorkerId, clock: u64, write: bool) {
        if self.off() {
            return;
        }
        let Some(m) = self.issued.get_mut(worker.index()) else { return };
        if let Some(e) = m.get_mut(&clock) {
            e.requests = e.requests.saturating_sub(1);
            e.writes = e.writes.saturating_sub(u32::from(write));
            if e.requests == 0 {
                m.remove(&clock);
            }
        }
    }

    /// The lowest clock of the workers that have not retired (`u64::MAX` when all have).
    fn lowest_clock(&self, clocks: impl Iterator<Item = u64>) -> u64 {
        clocks.zip(&self.retired).filter(|(_, r)| !**r).map(|(c, _)| c).min().unwrap_or(u64::MAX)
    }

    /// This node's flushed clock, given its workers' clocks.
    fn flushed_here(&self, lowest: u64) -> u64 {
        let oldest_write = self
            .issued
            .iter()
            .filter_map(|m| m.iter().find(|(_, e)| e.writes > 0).map(|(c, _)| *c))
            .min()
            .unwrap_or(u64::MAX);
        let mut f = lowest.min(oldest_write);
        if self.replicas {
            f = f.min(self.round_clean.0);
        }
        f
    }

    /// Whether `worker` at `clock` may go on.
    fn admits(&self, worker: WorkerId, clock: u64) -> bool {
        match self.gate {
            Gate::Async => true,
            Gate::BoundedDelay { delay } => {
                let need = clock.saturating_sub(u64::from(delay));
                self.issued.get(worker.index()).and_then(|m| m.keys().next()).is_none_or(|c| *c >= need)
            }
            g => self.reached(clock.saturating_sub(u64::from(g.staleness().unwrap_or(0)))),
        }
    }

    /// Whether every update made at a clock below `need` is applied at its main copy and
    /// every replica here was refreshed after that.
    pub(super) fn reached(&self, need: u64) -> bool {
        self.global >= need && (!self.replicas || self.round_clean.1 >= need)
    }

    /// Whether the gate waits for other nodes (then a failed peer ends the waits).
    pub(super) fn waits_for_peers(&self) -> bool {
        self.gate.staleness().is_some()
    }
}

impl Node {
    /// Completes with [`super::Completion::Gate`] once `worker`, at its current clock, may go
    /// on under [`crate::Config::gate`] (at once under [`Gate::Async`]). Call it after
    /// [`Node::advance_clock`] and before the reads of the new clock. A worker has one wait at
    /// a time: a second call ends the first with `Timeout` (its caller gave up on it).
    ///
    /// Fails with `PeerFailed` (at once, or later for a waiting worker) when the gate waits
    /// for other nodes and one of them failed: its updates will never be flushed.
    pub fn gate(&mut self, now: Instant, worker: WorkerId, ticket: Ticket) -> Result<(), OpError> {
        if worker.0 >= self.cfg.workers_per_node {
            return Err(OpError::InvalidArgument);
        }
        self.sync.now = now;
        let clock = self.clock(worker).0;
        if self.gate.admits(worker, clock) {
            self.complete(worker, ticket, Ok(super::Completion::Gate));
            self.prepare_speculation(worker, clock);
            return Ok(());
        }
        if self.gate.waits_for_peers() {
            if let Some(peer) = self.first_failed {
                return Err(OpError::PeerFailed { node: peer });
            }
        }
        if let Some(i) = self.gate.waiters.iter().position(|w| w.worker == worker) {
            let old = self.gate.waiters.swap_remove(i);
            self.complete(old.worker, old.ticket, Err(OpError::Timeout));
        }
        let mut waiter = Waiter { worker, ticket, clock, spec: None };
        if self.speculation_admits(&mut waiter) {
            self.complete(worker, ticket, Ok(super::Completion::Gate));
            self.prepare_speculation(worker, clock);
            return Ok(());
        }
        self.gate.waiters.push(waiter);
        Ok(())
    }

    /// `worker` advances its clock no more (it finished): gates stop waiting for it. Its
    /// outstanding requests still count until they end.
    pub fn retire(&mut self, now: Instant, worker: WorkerId) -> Result<(), OpError> {
        let r = self.gate.retired.get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        *r = true;
        self.sync.now = now;
        let clock = self.clock(worker).0;
        self.gate.clip_declared(worker, clock);
        self.gate.prepared[worker.index()] = None;
        self.gate_progress();
        self.drain_loopback(now);
        Ok(())
    }

    /// The global flushed clock known here: every update any worker made at a clock below it
    /// is applied at its main copy (0 under [`Gate::Async`], which does not track it).
    pub fn flushed_clock(&self) -> u64 {
        self.gate.global()
    }

    pub(super) fn worker_clocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.sync.workers.iter().map(|w| w.clock.0)
    }

    /// Something that bounds a flushed clock or a gate changed: recomputes this node's
    /// flushed clock (announcing it when it grew), the global one, and lets waiters pass.
    pub(super) fn gate_progress(&mut self) {
        if self.gate.off() {
            return;
        }
        if self.gate.waits_for_peers() {
            let lowest = self.gate.lowest_clock(self.worker_clocks());
            let f = self.gate.flushed_here(lowest);
            let me = self.me.index();
            if f > self.gate.flushed[me] {
                self.gate.flushed[me] = f;
                self.gate.prune_declared(f);
                for n in 0..self.cfg.nodes {
                    let to = NodeId(n);
                    if to == self.me || self.failed_peers.contains(&to) {
                        continue;
                    }
                    // One flushed clock per peer waits in the outbox: a newer one replaces it
                    // (it is true when it leaves), so an input that lets the clock grow twice
                    // sends it once.
                    let queued = self.outbox.iter_mut().rev().find_map(|t| match &mut t.msg {
                        Message::Flushed { clock } if t.to == to => Some(clock),
                        _ => None,
                    });
                    match queued {
                        Some(clock) => *clock = f,
                        None => self.send(to, Message::Flushed { clock: f }),
                    }
                }
            }
            self.gate.global = self.gate.flushed.iter().copied().min().unwrap_or(0);
        }
        if !self.gate.waiters.is_empty() {
            self.admit_waiters();
        }
    }

    fn admit_waiters(&mut self) {
        let mut waiters = core::mem::take(&mut self.gate.waiters);
        let mut passed = Vec::new();
        let mut i = 0;
        while i < waiters.len() {
            let w = &mut waiters[i];
            if self.gate.admits(w.worker, w.clock) || self.speculation_admits(w) {
                let w = waiters.remove(i);
                passed.push((w.worker, w.ticket, w.clock));
            } else {
                i += 1;
            }
        }
        // Nothing above adds waiters: `gate` is a worker's call, not one made from here.
        self.gate.waiters = waiters;
        for (w, t, clock) in passed {
            self.complete(w, t, Ok(super::Completion::Gate));
            self.prepare_speculation(w, clock);
        }
    }

    /// `from` announced its flushed clock.
    pub(super) fn flushed_from(&mut self, from: NodeId, clock: u64) {
        if self.gate.off() {
            self.stats.messages_rejected += 1;
            return;
        }
        if let Some(f) = self.gate.flushed.get_mut(from.index()) {
            *f = (*f).max(clock);
        }
        self.gate_progress();
    }

    pub(super) fn gate_round_started(&mut self) {
        if !self.gate.waits_for_peers() {
            return;
        }
        let lowest = self.gate.lowest_clock(self.worker_clocks());
        self.gate.rounds_begun += 1;
        self.gate.round_start = Some((lowest, self.gate.global, self.gate.rounds_begun));
    }

    /// The open round was abandoned: its deltas are not known to be applied.
    pub(super) fn gate_round_abandoned(&mut self) {
        self.gate.round_start = None;
    }

    /// The open round ended (clean, unless `gate_round_abandoned` was called since it
    /// started).
    pub(super) fn gate_round_finished(&mut self) {
        if !self.gate.waits_for_peers() {
            return;
        }
        if let Some(s) = self.gate.round_start.take() {
            self.gate.round_clean = (self.gate.round_clean.0.max(s.0), self.gate.round_clean.1.max(s.1));
            self.gate.clean_begun = self.gate.clean_begun.max(s.2);
        }
        self.gate_progress();
    }

    /// `peer` failed: workers waiting for the flushed clocks fail with it.
    pub(super) fn gate_peer_failed(&mut self, peer: NodeId) {
        if !self.gate.waits_for_peers() {
            return;
        }
        for w in core::mem::take(&mut self.gate.waiters) {
            self.stats.ops_failed += 1;
            self.complete(w.worker, w.ticket, Err(OpError::PeerFailed { node: peer }));
        }
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
pub(super) mod tests;
