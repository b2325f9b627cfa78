//! The clock gates of the `cluster_schedule` target (see the parent module's docs): waits,
//! what a pass promises, each worker's finalize, and the wait that nothing will end.
//!
//! The read check is the simulator's (`conformance/src/sim/workload.rs`, `check_gate`): values
//! are sums of small integer adds, so under BSP and SSP(s) a read by a worker that passed its
//! gate at clock c is at least the sum of the adds issued at clocks below c − s, per float.

use alloc::vec::Vec;

use super::{Cluster, Op, OpKind, Seat, LEN};
use crate::access::{finalize_steps, FinalizeStep};
use crate::config::Gate;
use crate::error::OpError;
use crate::ids::{Key, Ticket, WorkerId};
use crate::node::Completion;

/// What the gates did in a run: waits that did not pass at once, and reads checked against a
/// gate's bound above zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateTally {
    /// Waits that did not pass at once.
    pub waited: u32,
    /// Reads checked against a gate's bound above zero.
    pub checked: u32,
}

/// A fault the harness's own tests put into a run, which its checks must catch.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::fuzzing) enum Mutation {
    /// A wait at the gate passes at once, without asking the node: reads come too early.
    SkipGates,
    /// The heal's finalize does not retire: a worker ahead of the others waits for ever.
    SkipRetires,
}

/// [`super::cluster_schedule`] with `mutation`, telling what the gates did.
#[cfg(test)]
pub(in crate::fuzzing) fn cluster_schedule_tally(data: &[u8], mutation: Option<Mutation>) -> GateTally {
    super::run(data, |c| c.mutation = mutation).tally.get()
}

/// A quiet stretch of the heal, for [`Cluster::check_stuck_gates`].
pub(super) struct Quiet {
    /// Each node's global flushed clock, and the waits under way (every operation under way
    /// is one), when it began.
    gates: (Vec<u64>, usize),
    /// The rounds each node must reach before the waits count as stuck.
    target: Vec<u64>,
}

impl Cluster {
    fn seat(&mut self, i: usize, worker: WorkerId) -> &mut Seat {
        &mut self.seats[i][worker.index()]
    }

    /// Whether worker `worker` of node `i` waits at its gate (then it issues nothing).
    pub(super) fn waits(&self, i: usize, worker: WorkerId) -> bool {
        self.seats[i][worker.index()].waiting.is_some()
    }

    /// The worker waits at its gate at its current clock; it is not waiting already.
    pub(super) fn gate(&mut self, i: usize, worker: WorkerId) {
        assert!(!self.waits(i, worker), "the harness let worker {worker} of node {i} wait twice");
        let ticket = self.ticket();
        let clock = self.nodes[i].clock(worker).0;
        #[cfg(test)]
        if self.mutation == Some(super::Mutation::SkipGates) {
            self.seat(i, worker).passed = Some(clock);
            return;
        }
        let now = self.now[i];
        self.seat(i, worker).waiting = Some(ticket);
        self.ops.insert(ticket, Op { node: i, worker, issued: now, clock, kind: OpKind::Gate });
        if let Err(e) = self.nodes[i].gate(now, worker, ticket) {
            panic!("node {i} refused worker {worker}'s wait at its gate at clock {clock} with {e:?}");
        }
        self.drain(i);
        if self.waits(i, worker) {
            let t = self.tally.get();
            self.tally.set(GateTally { waited: t.waited + 1, ..t });
        }
    }

    /// The wait `ticket` of a worker at `clock` ended with `result`: only a pass may end it (no
    /// peer fails here, and no worker waits twice at once).
    pub(super) fn gate_ended(
        &mut self,
        i: usize,
        worker: WorkerId,
        ticket: Ticket,
        clock: u64,
        result: Result<Completion, OpError>,
    ) {
        let seat = self.seat(i, worker);
        assert_eq!(
            seat.waiting,
            Some(ticket),
            "node {i} ended worker {worker}'s wait {ticket:?}, not under way"
        );
        assert!(
            matches!(result, Ok(Completion::Gate)),
            "node {i}: worker {worker}'s wait at its gate at clock {clock} ended with {result:?}"
        );
        seat.waiting = None;
        seat.passed = Some(clock);
        self.passed.push((i, worker, clock));
    }

    /// The clock below which every add must be seen by a pull the worker issues now: under
    /// BSP and SSP(s), c − s for the clock c at which its gate last let it pass; under
    /// SparseSSP(s, p), c − s − p (what it promises for keys not declared, which this harness
    /// does not track); else 0.
    pub(super) fn gate_bound(&self, i: usize, worker: WorkerId) -> u64 {
        let s = self.cfg.gate.staleness().map(|s| u64::from(s) + u64::from(self.cfg.gate.speculation()));
        match (s, self.seats[i][worker.index()].passed) {
            (Some(s), Some(c)) => c.saturating_sub(s),
            _ => 0,
        }
    }

    /// A value `v` read of key `k` by a pull issued with gate bound `bound`: at least the sum
    /// of the adds issued at clocks below it (unless an add to the key failed: it may never
    /// have been applied).
    pub(super) fn check_gate_read(&self, k: Key, v: &[f32], bound: u64) {
        let m = &self.keys[k.0 as usize];
        if bound == 0 || m.uncertain || m.sets > 0 {
            return;
        }
        let t = self.tally.get();
        self.tally.set(GateTally { checked: t.checked + 1, ..t });
        let mut due = [0.0f32; LEN];
        for sum in m.at.range(..bound).map(|(_, s)| s) {
            super::add(&mut due, sum);
        }
        assert!(
            (0..LEN).all(|e| v[e] >= due[e]),
            "{:?}: key {k} read as {v:?} by a pull issued after its worker passed the gate, below the \
             {due:?} added at clocks below {bound}",
            self.cfg.gate
        );
    }

    /// Under bounded delay τ: a worker that passed at `clock` has no request of its own issued
    /// at a clock below `clock − τ` still under way.
    pub(super) fn check_bounded_delay(&self, i: usize, worker: WorkerId, clock: u64) {
        let Gate::BoundedDelay { delay } = self.cfg.gate else { return };
        let need = clock.saturating_sub(u64::from(delay));
        let request = |op: &&Op| {
            matches!(op.kind, OpKind::Pull { .. } | OpKind::Write { .. } | OpKind::Localize { .. })
        };
        let late = self
            .ops
            .values()
            .filter(request)
            .find(|op| (op.node, op.worker) == (i, worker) && op.clock < need);
        if let Some(op) = late {
            panic!("node {i}: worker {worker} passed its bounded-delay gate at clock {clock} with {op:?} under way");
        }
    }

    /// Runs the finalize of every worker that has not and does not wait at its gate (see the
    /// module docs); whether it ran any.
    pub(super) fn finalize_ready(&mut self) -> bool {
        let steps = finalize_steps(self.cfg.technique, self.cfg.gate);
        let mut any = false;
        for i in 0..self.n {
            for w in (0..self.cfg.workers_per_node).map(WorkerId) {
                let seat = self.seat(i, w);
                if seat.finalized || seat.waiting.is_some() {
                    continue;
                }
                seat.finalized = true;
                any = true;
                let now = self.now[i];
                for step in steps {
                    #[cfg(test)]
                    if *step == FinalizeStep::Retire && self.mutation == Some(super::Mutation::SkipRetires) {
                        continue;
                    }
                    let r = match step {
                        FinalizeStep::Retire => self.nodes[i].retire(now, w),
                        FinalizeStep::EndIntents => self.nodes[i].end_intents(now, w),
                        // The heal's delivery until settled stands in for these.
                        FinalizeStep::Barrier | FinalizeStep::WaitSync | FinalizeStep::LastBarrier => Ok(()),
                    };
                    assert_eq!(r, Ok(()), "node {i}: {step:?} of worker {w}");
                }
                self.drain(i);
            }
        }
        any
    }

    /// Whether every worker's finalize ran.
    pub(super) fn all_finalized(&self) -> bool {
        self.seats.iter().flatten().all(|s| s.finalized)
    }

    /// In the heal, with nothing in flight and every worker that does not wait finalized:
    /// panics if a wait will never end (see the module docs). `quiet` holds, while all is
    /// quiet, what the gates stood at when the quiet began and the rounds each node must reach
    /// before the waits count as stuck.
    ///
    /// A wait that ends, or a global flushed clock that grows, begins the quiet again: under
    /// BSP and SSP one wait's end lets the next go only a few rounds later (its worker retires,
    /// its node's next round raises its flushed clock, and the waiting node needs a round that
    /// started once the new global clock was known there), so a chain of waits at successive
    /// clocks may take more than [`super::GATE_QUIET_ROUNDS`] rounds in all while each link
    /// takes far fewer.
    pub(super) fn check_stuck_gates(&self, quiet: &mut Option<Quiet>) {
        let still = self.nodes.iter().all(|n| {
            n.pending_requests() == 0
                && n.keys_incoming() == 0
                && n.waiting_ops() == 0
                && n.forwarding_pointers() == 0
        }) && self.ops.values().all(|op| matches!(op.kind, OpKind::Gate));
        if !still {
            *quiet = None;
            return;
        }
        let gates = (self.nodes.iter().map(|n| n.flushed_clock()).collect::<Vec<_>>(), self.ops.len());
        if quiet.as_ref().is_some_and(|q| q.gates != gates) {
            *quiet = None;
        }
        let rounds = || self.nodes.iter().map(|n| n.sync_rounds_done() + super::GATE_QUIET_ROUNDS).collect();
        let target = &quiet.get_or_insert_with(|| Quiet { gates, target: rounds() }).target;
        let timers = self.nodes.iter().any(|n| n.poll_timeout().is_some());
        let rounds_ran = self.nodes.iter().zip(target.iter()).all(|(n, t)| n.sync_rounds_done() >= *t);
        if !timers || rounds_ran {
            panic!(
                "{:?}: workers wait at their gates with nothing due ({}): every other worker finalized, no \
                 frame, request or move under way, {}{}",
                self.cfg.gate,
                self.waiters(),
                if timers { "and every node ran more rounds" } else { "and no timer" },
                self.summary()
            );
        }
    }

    /// The workers waiting at their gates, for failure messages.
    pub(super) fn waiters(&self) -> alloc::string::String {
        use core::fmt::Write as _;
        let mut out = alloc::string::String::new();
        for op in self.ops.values().filter(|op| matches!(op.kind, OpKind::Gate)) {
            let global = self.nodes[op.node].flushed_clock();
            let _ = write!(
                out,
                "node {} worker {} at clock {} (global flushed clock {global}); ",
                op.node, op.worker, op.clock
            );
        }
        out
    }
}
