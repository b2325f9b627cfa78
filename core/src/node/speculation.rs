//! SparseSSP's speculation (flexps-report.txt §8, Algorithm 1): a worker may pass its gate
//! up to p clocks beyond the staleness bound s while the keys it works on meet none that the
//! workers behind it work on.
//!
//! **Declared keys.** The keys a worker works on at clock t are those of its intents covering
//! t that it signaled while its clock was at most t − p: they are known, here, p clocks before
//! the worker gets there, and no intent signaled later counts for t. That is the contract a
//! program under SparseSSP keeps: at clock t it reads and updates only keys declared for t.
//! Other accesses are allowed and bounded as under SSP(s + p).
//!
//! **The check.** A worker at clock c, with G (the global flushed clock) below c − s, may
//! pass once it would pass SSP(s + p) and, for every node whose flushed clock F is below
//! c − s, no intent of that node's workers covering a clock in [F, c − s) holds a key the
//! worker declared for c. Updates at clocks below F are applied at their main copies; those
//! at clocks in [F, c − s) are made, by the contract, only to keys declared for their clock,
//! which the check saw (the worker behind is at clock F or later, and an intent for a clock
//! below c − s ≤ F + p signaled from now on does not count). This node checks itself (its
//! writes still on their way to main copies elsewhere, and its other workers' intents: the
//! reader sees its node's store at once); every other such node answers a
//! [`Message::Speculate`]. A node whose outbox is full asks nobody: that counts as a conflict. When a declared key is a replica here, a
//! round that began after the last answer must then end clean, as under SSP, so that the
//! replica was refreshed after those updates were applied (a replica made later holds them).
//!
//! **Asking ahead.** With p ≥ 2 the keys a worker declared for clock c + 1 are final once it
//! passes clock c: the node asks about them then, and the answers usually wait for the
//! worker. That is why a node answers with a conflict while one of its workers could still
//! declare a key for a clock below the bound (its clock + p is below it): an answer given
//! early must stay true.
//!
//! The FlexPS report compares the fast worker's parameters with the slowest worker's current
//! ones only; comparing with every clock the workers behind may still update makes the bound
//! hold for speculation beyond one clock too. A speculation that meets a conflict waits as
//! under SSP(s), and asks again each time the global flushed clock grows.

use alloc::vec::Vec;

use hashbrown::HashSet;

use super::gate::{GateState, Waiter};
use super::origin::PendingKind;
use super::Node;
use crate::config::Gate;
use crate::ids::{Key, NodeId, WorkerId};
use crate::wire::Message;

/// An intent recorded for SparseSSP's checks: the keys a worker works on at clocks
/// `[start, end)`, signaled at its clock `signaled`.
#[derive(Debug)]
pub(super) struct Declared {
    signaled: u64,
    start: u64,
    end: u64,
    keys: Vec<Key>,
}

/// A waiting worker's speculation.
#[derive(Clone, Debug)]
pub(super) struct Speculation {
    query: u64,
    /// The global flushed clock when it began.
    global: u64,
    /// Nodes whose answer is still due.
    awaiting: Vec<NodeId>,
    conflict: bool,
    /// `rounds_begun` when the last answer came.
    cleared: Option<u64>,
    /// The keys asked about.
    keys: Vec<Key>,
}

impl GateState {
    /// Whether an intent of `keys` over `[start, end)` signaled at `clock` can be recorded
    /// within `Config::intents_max` and `intent_keys_max` (always, when it needs no record).
    pub(super) fn room_to_declare(
        &self,
        clock: u64,
        start: u64,
        end: u64,
        keys: usize,
        cfg: &crate::Config,
    ) -> bool {
        !self.declares(clock, start, end, keys)
            || (self.declared.iter().map(Vec::len).sum::<usize>() < cfg.intents_max
                && self.declared_keys + keys <= cfg.intent_keys_max)
    }

    fn declares(&self, clock: u64, start: u64, end: u64, keys: usize) -> bool {
        matches!(self.gate, Gate::SparseSsp { .. }) && start < end && clock < end && keys > 0
    }

    /// Records `worker`'s intent (under SparseSSP; nothing otherwise). The caller checked
    /// [`GateState::room_to_declare`].
    pub(super) fn declare(&mut self, worker: WorkerId, clock: u64, start: u64, end: u64, keys: &[Key]) {
        if !self.declares(clock, start, end, keys.len()) {
            return;
        }
        if let Some(d) = self.declared.get_mut(worker.index()) {
            self.declared_keys += keys.len();
            d.push(Declared { signaled: clock, start, end, keys: keys.to_vec() });
        }
    }

    /// An intent ending at `end` was refused (no room): a worker may update keys this node
    /// does not know of at clocks below `end`.
    pub(super) fn refused(&mut self, end: u64) {
        if matches!(self.gate, Gate::SparseSsp { .. }) {
            self.refused_until = self.refused_until.max(end);
        }
    }

    /// Forgets intents that end at or below this node's flushed clock `f`: every update made
    /// under them is applied.
    pub(super) fn prune_declared(&mut self, f: u64) {
        for w in 0..self.declared.len() {
            self.forget_declared(w, |e| e.end <= f);
        }
    }

    /// `worker` retired at `clock`: it updates nothing at a later clock.
    pub(super) fn clip_declared(&mut self, worker: WorkerId, clock: u64) {
        self.forget_declared(worker.index(), |e| e.start > clock);
    }

    /// Drops worker `w`'s intents that `gone` picks, keeping `declared_keys` in step.
    fn forget_declared(&mut self, w: usize, gone: impl Fn(&Declared) -> bool) {
        let Some(d) = self.declared.get_mut(w) else { return };
        let mut keys = 0;
        d.retain(|e| {
            let drop = gone(e);
            keys += if drop { e.keys.len() } else { 0 };
            !drop
        });
        self.declared_keys -= keys;
    }

    /// The keys `worker` declared for `clock`, sorted, without repeats.
    fn declared_for(&self, worker: WorkerId, clock: u64, speculation: u64) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .declared
            .get(worker.index())
            .into_iter()
            .flatten()
            .filter(|e| e.start <= clock && clock < e.end && e.signaled.saturating_add(speculation) <= clock)
            .flat_map(|e| e.keys.iter().copied())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The speculation prepared for `worker` at `clock`, if any (it is taken either way).
    fn take_prepared(&mut self, worker: WorkerId, clock: u64) -> Option<Speculation> {
        let p = self.prepared.get_mut(worker.index())?.take()?;
        (p.0 == clock).then_some(p.1)
    }

    /// Whether a worker here, at one of `clocks`, could still declare a key for a clock
    /// below `below`: an intent counts for clocks p or more beyond the clock it was signaled
    /// at.
    fn may_still_declare(&self, clocks: impl Iterator<Item = u64>, below: u64) -> bool {
        let p = u64::from(self.gate.speculation());
        clocks.zip(&self.retired).any(|(c, r)| !*r && c.saturating_add(p) < below)
    }

    /// Whether a worker of this node (flushed clock `f`, workers at `clocks`) may still have
    /// an update to one of `keys` made at a clock below `below` that is not applied, or may
    /// still make one.
    fn conflicts(&self, f: u64, below: u64, keys: &[Key], clocks: impl Iterator<Item = u64>) -> bool {
        if f >= below {
            return false;
        }
        if self.refused_until > f || self.may_still_declare(clocks, below) {
            return true;
        }
        let keys: HashSet<Key> = keys.iter().copied().collect();
        self.declared
            .iter()
            .flatten()
            .any(|e| e.start < below && e.end > f && e.keys.iter().any(|k| keys.contains(k)))
    }
}

impl Node {
    /// Under SparseSSP: whether waiting worker `w` may pass on speculation. Begins (or begins
    /// again, after a conflict, once the global flushed clock grew) its speculation, asking
    /// the nodes behind; counts a pass.
    pub(super) fn speculation_admits(&mut self, w: &mut Waiter) -> bool {
        let Gate::SparseSsp { staleness, speculation } = self.gate.gate else { return false };
        let need = w.clock.saturating_sub(u64::from(staleness));
        if !self.gate.reached(need.saturating_sub(u64::from(speculation))) {
            return false;
        }
        if w.spec.is_none() {
            w.spec = self.gate.take_prepared(w.worker, w.clock);
        }
        if w.spec.as_ref().is_none_or(|s| s.conflict && self.gate.global > s.global) {
            w.spec = Some(self.begin_speculation(w.worker, w.clock, need));
        }
        let Some(spec) = w.spec.as_mut() else { return false };
        if spec.conflict {
            return false;
        }
        // A node whose flushed clock reached the bound since need not answer any more.
        let flushed = &self.gate.flushed;
        spec.awaiting.retain(|n| flushed.get(n.index()).is_some_and(|f| *f < need));
        if !spec.awaiting.is_empty() {
            return false;
        }
        let asked_at = *spec.cleared.get_or_insert(self.gate.rounds_begun);
        // A replica here may predate the updates; one made from now on holds them.
        let pass = !self.gate.replicas
            || self.gate.clean_begun > asked_at
            || !spec.keys.iter().any(|k| self.keys.has_replica(*k));
        if pass {
            self.stats.gates_speculated += 1;
        }
        pass
    }

    /// Asks about the keys `worker` declared for `clock` (`need` = clock − s): checks this
    /// node, sends a query to every other node whose flushed clock is below `need`.
    fn begin_speculation(&mut self, worker: WorkerId, clock: u64, need: u64) -> Speculation {
        let p = u64::from(self.cfg.gate.speculation());
        let keys = self.gate.declared_for(worker, clock, p);
        self.gate.next_query += 1;
        let query = self.gate.next_query;
        let mut spec = Speculation {
            query,
            global: self.gate.global,
            awaiting: Vec::new(),
            conflict: false,
            cleared: None,
            keys: Vec::new(),
        };
        // Under back-pressure (a full outbox) it sends nothing: that counts as a conflict,
        // asked again when the global flushed clock grows.
        if keys.len() > self.cfg.keys_per_message_max || (!keys.is_empty() && !self.wants_input()) {
            spec.conflict = true;
        } else if !keys.is_empty() {
            for n in 0..self.cfg.nodes {
                let node = NodeId(n);
                let f = self.gate.flushed[node.index()];
                if f >= need {
                    continue;
                }
                if node != self.me {
                    spec.awaiting.push(node);
                } else if self.local_conflicts(worker, f, need, &keys) {
                    spec.conflict = true;
                }
            }
        }
        if spec.conflict {
            spec.awaiting.clear();
            self.stats.speculations_conflicted += 1;
        } else {
            for to in spec.awaiting.clone() {
                self.send(to, Message::Speculate { query, below: need, keys: keys.clone() });
            }
        }
        spec.keys = keys;
        spec
    }

    /// `worker` passed its gate at `clock`. With a speculation p ≥ 2 the keys it declared for
    /// the next clock are final now (an intent signaled from now on counts from clock + 2):
    /// asks about them already, so that the answers are likely in when it gets there.
    pub(super) fn prepare_speculation(&mut self, worker: WorkerId, clock: u64) {
        let Gate::SparseSsp { staleness, speculation } = self.gate.gate else { return };
        let next = clock + 1;
        let need = next.saturating_sub(u64::from(staleness));
        let slot = worker.index();
        if speculation < 2 || self.gate.global >= need || slot >= self.gate.prepared.len() {
            return;
        }
        let spec = self.begin_speculation(worker, next, need);
        self.gate.prepared[slot] = Some((next, spec));
    }

    /// [`GateState::conflicts`] for `reader` on this node (flushed clock `f`), which sees every
    /// update made here in its store at once: what matters are this node's writes still on
    /// their way to a main copy elsewhere, and the intents of its other workers still below
    /// `below` (the reader's own updates it sees, whatever their clock: its accesses never
    /// overtake its own earlier ones).
    fn local_conflicts(&self, reader: WorkerId, f: u64, below: u64, keys: &[Key]) -> bool {
        if f >= below {
            return false;
        }
        let others =
            self.worker_clocks().enumerate().map(|(i, c)| if i == reader.index() { u64::MAX } else { c });
        if self.gate.refused_until > f || self.gate.may_still_declare(others, below) {
            return true;
        }
        let keys: HashSet<Key> = keys.iter().copied().collect();
        let meets = |ks: &[Key]| ks.iter().any(|k| keys.contains(k));
        let sending = self
            .pending
            .values()
            .any(|p| matches!(p.kind, PendingKind::Write) && p.clock < below && meets(&p.keys));
        sending
            || self.gate.declared.iter().zip(&self.sync.workers).enumerate().any(|(i, (d, w))| {
                let c = w.clock.0;
                i != reader.index()
                    && c < below
                    && d.iter().any(|e| e.start < below && e.end > c && meets(&e.keys))
            })
    }

    /// `from` asks whether its worker may read `keys` (see [`Message::Speculate`]).
    pub(super) fn serve_speculate(&mut self, from: NodeId, query: u64, below: u64, keys: &[Key]) {
        let f = self.gate.flushed[self.me.index()];
        let clear = !self.gate.conflicts(f, below, keys, self.worker_clocks());
        self.send(from, Message::SpeculateReply { query, clear });
    }

    /// `from` answered speculation `query`. An answer to a speculation that is over (its
    /// worker passed, gave up or asked again) changes nothing.
    pub(super) fn speculate_answered(&mut self, from: NodeId, query: u64, clear: bool) {
        let gate = &mut self.gate;
        let waiting = gate.waiters.iter_mut().filter_map(|w| w.spec.as_mut());
        let prepared = gate.prepared.iter_mut().filter_map(|p| p.as_mut().map(|p| &mut p.1));
        let Some(spec) = waiting.chain(prepared).find(|s| s.query == query) else { return };
        let Some(i) = spec.awaiting.iter().position(|n| *n == from) else { return };
        spec.awaiting.swap_remove(i);
        if !clear {
            spec.conflict = true;
            spec.awaiting.clear();
            self.stats.speculations_conflicted += 1;
        }
        self.gate_progress();
    }
}

#[cfg(test)]
#[path = "speculation_tests.rs"]
mod tests;
