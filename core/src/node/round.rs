//! Sync rounds at the origin (adapm-cikm23.txt Appendix B.2.2). A round sends one grouped
//! [`Message::Sync`] per peer: intent starts and ends, every replica's version and delta, and
//! ownership changes for the peer as home node. Owners answer with one grouped
//! [`Message::SyncReply`]: moved keys, new or refreshed replicas, acknowledgements. Entries for
//! keys the receiver does not own are forwarded like requests (the same routing, hop limit and
//! pointers), and answered by the owner directly (`super::owner`). A round ends when every
//! entry is answered; the next starts at once (or after the configured minimum period; after
//! an idle interval if a round had nothing to send). At most one entry per key is outstanding,
//! so a replica's delta is never in flight twice.
//!
//! Every order that reaches a message is key order: the keys of a round are sorted (only those
//! that need a message), and so are the replicas synced in it.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::dispatch::Budget;
use super::intents::WorkerIntents;
use super::keymap::KeyMap;
use super::owner::{Policy, ReplyOut};
use super::record::{ReplicaMeta, ANNOUNCED, OUTSTANDING, RESERVED};
use super::Node;
use crate::action_timing::ActionTimer;
use crate::error::OpError;
use crate::ids::{Key, NodeId, Ticket, WorkerId};
use crate::store::Whereabouts;
use crate::time::{Duration, Instant};
use crate::wire::{Message, Moved, OwnerChange, Refresh, ReplicaSync};

/// Bytes a sync entry may take besides its value, generously.
pub(super) const ENTRY_BYTES: usize = 32;

/// Largest buffer (in entries) a round keeps for the next one; a larger one is freed, so that
/// one round that touched a million keys does not pin its buffer for the rest of the run.
pub(super) const BUFFER_KEEP_MAX: usize = 1 << 16;

/// A touched key that needs an entry in the round's messages (see `Node::settle_quiet`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Kept {
    pub(super) key: Key,
    /// The node its entry goes to, where known already.
    pub(super) to: Option<NodeId>,
}

/// A worker waiting in `wait_sync`.
#[derive(Clone, Copy, Debug)]
pub(super) struct SyncWaiter {
    pub(super) worker: WorkerId,
    pub(super) ticket: Ticket,
    pub(super) rounds: u64,
    pub(super) deadline: Instant,
}

/// One grouped sync request being built for a peer.
#[derive(Debug, Default)]
pub(super) struct SyncOut {
    pub(super) starts: Vec<Key>,
    pub(super) ends: Vec<Key>,
    pub(super) replicas: Vec<ReplicaSync>,
    pub(super) deltas: Vec<f32>,
    pub(super) owners: Vec<OwnerChange>,
}

/// The node's state for intents, rounds and replicas.
pub(super) struct SyncState {
    pub(super) timer: ActionTimer,
    pub(super) workers: Vec<WorkerIntents>,
    pub(super) seq: u64,
    pub(super) intents: usize,
    pub(super) intent_keys: usize,
    /// Keys whose aggregated intent changed, or that need another try, at the next round. A key
    /// may be in it more than once; the round sorts it and drops the repeats.
    pub(super) touched: Vec<Key>,
    /// The touched keys a round makes entries for (a buffer kept from round to round).
    pub(super) kept: Vec<Kept>,
    /// Keys that moved here, with the number of rounds this node had completed then. A key
    /// moves on only after one more round here: requests that trail it (forwarded along its
    /// path, at most about a round behind) then catch it instead of chasing it from node to
    /// node while several nodes ask for it in turn.
    pub(super) arrived: KeyMap<(u64, Instant)>,
    /// The time of the latest message or timer input (for the rules that need it deep
    /// inside, where no `now` is passed).
    pub(super) now: Instant,
    /// Ownership changes for home nodes, sent with the next round.
    pub(super) owner_updates: Vec<(NodeId, OwnerChange)>,
    pub(super) round: u32,
    pub(super) open: bool,
    /// The open round carries more than version checks of replicas with nothing to add: an
    /// intent start or end, a delta, a final delta, or an ownership change.
    pub(super) dirty: bool,
    pub(super) rounds_done: u64,
    pub(super) started_at: Instant,
    pub(super) next_at: Option<Instant>,
    pub(super) permanent_done: bool,
    pub(super) waiters: Vec<SyncWaiter>,
}

impl SyncState {
    pub(super) fn new(cfg: &crate::Config) -> SyncState {
        let workers = usize::from(cfg.workers_per_node);
        SyncState {
            timer: ActionTimer::new(workers, cfg.timing),
            workers: (0..workers).map(|_| WorkerIntents::default()).collect(),
            seq: 0,
            intents: 0,
            intent_keys: 0,
            touched: Vec::new(),
            kept: Vec::new(),
            arrived: KeyMap::default(),
            now: Instant(0),
            owner_updates: Vec::new(),
            round: 0,
            open: false,
            dirty: false,
            rounds_done: 0,
            started_at: Instant(0),
            // The first round starts at the first call to `handle_timeout`.
            next_at: cfg.technique.uses_rounds().then_some(Instant(0)),
            permanent_done: false,
            waiters: Vec::new(),
        }
    }

    /// When this state next needs `handle_timeout`.
    pub(super) fn next_timeout(&self, request_timeout: Duration) -> Option<Instant> {
        let round = if self.open { Some(self.started_at + request_timeout) } else { self.next_at };
        let waiter = self.waiters.iter().map(|w| w.deadline).min();
        match (round, waiter) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Nothing open but version checks (replicas kept for the whole run check their owners
    /// every round, for ever), and the next round would find nothing else to do: no worker
    /// waiting for rounds in `wait_sync`, no ownership change to report, no key to revisit,
    /// no acted intent past its end, no intent inside its window.
    pub(super) fn is_idle(&self) -> bool {
        !(self.open && self.dirty)
            && self.waiters.is_empty()
            && self.owner_updates.is_empty()
            && self.touched.is_empty()
            && self.workers.iter().enumerate().all(|(w, wi)| {
                wi.active.peek().is_none_or(|a| a.end > wi.clock)
                    && wi.signaled.peek().is_none_or(|f| f.start >= self.timer.horizon(w) && f.end > wi.clock)
            })
    }
}

impl Node {
    /// Completes with [`super::Completion::Sync`] after two more sync rounds have ended (at
    /// once under techniques without rounds); fails with `Timeout` after the request timeout.
    pub fn wait_sync(&mut self, now: Instant, worker: WorkerId, ticket: Ticket) -> Result<(), OpError> {
        if worker.index() >= self.sync.workers.len() {
            return Err(OpError::InvalidArgument);
        }
        if !self.cfg.technique.uses_rounds() {
            self.complete(worker, ticket, Ok(super::Completion::Sync));
            return Ok(());
        }
        if self.sync.waiters.len() >= 4 * self.sync.workers.len() {
            return Err(OpError::Busy);
        }
        // A round already open started before the call: it does not count.
        let rounds = self.sync.rounds_done + 2 + u64::from(self.sync.open);
        let deadline = now + self.cfg.request_timeout;
        self.sync.waiters.push(SyncWaiter { worker, ticket, rounds, deadline });
        // Rounds on demand (one node, see `finish_round`): this wait wants them now.
        if !self.sync.open && self.sync.next_at.is_none() {
            self.sync.next_at = Some(now);
        }
        Ok(())
    }

    /// Sync rounds this node has completed.
    pub fn sync_rounds_done(&self) -> u64 {
        self.sync.rounds_done
    }

    /// The keys of this node's open sync round still waiting for an answer, in key order.
    pub fn sync_outstanding(&self) -> Vec<Key> {
        sorted(self.keys.map.iter().filter(|(_, e)| e.outstanding()).map(|(k, _)| *k).collect())
    }

    pub(super) fn sync_timeout(&mut self, now: Instant) {
        if !self.cfg.technique.uses_rounds() {
            return;
        }
        // Waiters past their deadline fail.
        let mut i = 0;
        while i < self.sync.waiters.len() {
            if self.sync.waiters[i].deadline <= now {
                let w = self.sync.waiters.swap_remove(i);
                self.stats.ops_failed += 1;
                self.complete(w.worker, w.ticket, Err(OpError::Timeout));
            } else {
                i += 1;
            }
        }
        if self.sync.open && self.sync.started_at + self.cfg.request_timeout <= now {
            self.abandon_round(now);
        }
        if !self.sync.open && self.sync.next_at.is_some_and(|t| t <= now) {
            self.start_round(now);
        }
    }

    /// Gives up on the open round: its answers may never come (a peer failed, or they are
    /// late). Late answers are still applied when they arrive.
    pub(super) fn abandon_round(&mut self, now: Instant) {
        if !self.sync.open {
            return;
        }
        self.stats.sync_rounds_abandoned += 1;
        let touched = &mut self.sync.touched;
        self.keys.map.retain(|k, e| {
            if e.outstanding() {
                touched.push(*k);
            }
            e.set(OUTSTANDING, false);
            e.set_final_to(None);
            !e.is_idle()
        });
        self.keys.outstanding = 0;
        self.gate_round_abandoned();
        self.finish_round(now, true);
    }

    /// Starts a sync round: action timing, aggregation, and one grouped request per peer.
    pub(super) fn start_round(&mut self, now: Instant) {
        let s = &mut self.sync;
        s.round = s.round.wrapping_add(1);
        s.started_at = now;
        s.next_at = None;
        self.stats.sync_rounds += 1;
        self.gate_round_started();
        if !self.sync.permanent_done {
            self.register_permanent();
        }
        self.act_on_intents();

        // The staleness of every replica held at the start of the round is sampled once: of
        // those that go before the pass over the replicas below, where they go; of the rest,
        // in that pass (one pass over the replicas per round, not two).
        let mut out: BTreeMap<NodeId, SyncOut> = BTreeMap::new();
        self.drop_replicas_of_failed_owners(now);
        let touched = core::mem::take(&mut self.sync.touched);
        let kept = self.settle_quiet(&touched);
        recycle(&mut self.sync.touched, touched);
        for &Kept { key: k, to } in &kept {
            let l = self.keys.get(k);
            if l.count > 0 {
                // Not here: `settle_quiet` took the keys that are, and nothing in this loop
                // brings a key here. The answer may be the key itself: make sure there is
                // room for it.
                let to = to.unwrap_or_else(|| self.route(k));
                if self.failed_peers.contains(&to) {
                    // The key's way leads through a failed node: accesses will fail with
                    // `PeerFailed`; asking again every round would only spin. A slot reserved
                    // for an answer the failed node will never give goes back.
                    self.stats.starts_abandoned += 1;
                    self.release_reservation(k);
                    continue;
                }
                let reserve = self.cfg.technique.moves_keys() && !l.reserved();
                if reserve && !self.store.reserve_slots(1) {
                    self.stats.starts_deferred += 1;
                    self.sync.touched.push(k);
                    continue;
                }
                out.entry(to).or_default().starts.push(k);
                self.keys.update(k, |e| {
                    e.flags |= OUTSTANDING | ANNOUNCED | (if reserve { RESERVED } else { 0 });
                });
                continue;
            }
            // The intent ended: the replica goes with its final delta, or the owner hears of
            // the end; either entry is outstanding until answered.
            let (mut outstanding, mut final_to) = (false, None);
            if let Some(meta) = self.keys.remove_replica(k) {
                self.stats.sample_staleness(now, meta.refreshed);
                let o = out.entry(meta.owner).or_default();
                if let Some(t) = self.store.drop_replica(k, &mut o.deltas) {
                    let flags = ReplicaSync::FINAL | if t.nonzero { ReplicaSync::DELTA } else { 0 };
                    o.replicas.push(ReplicaSync { key: k, version: t.version, flags });
                    (outstanding, final_to) = (true, Some(meta.owner));
                    self.stats.replicas_destroyed += 1;
                    self.stats.deltas_sent += u64::from(t.nonzero);
                }
            } else if l.announced() {
                let to = to.unwrap_or_else(|| self.route(k));
                if !self.failed_peers.contains(&to) {
                    out.entry(to).or_default().ends.push(k);
                    outstanding = true;
                } else {
                    self.release_reservation(k);
                }
            }
            self.keys.update(k, |e| {
                e.count = 0;
                e.set(ANNOUNCED, false);
                if outstanding {
                    e.set(OUTSTANDING, true);
                }
                if final_to.is_some() {
                    e.set_final_to(final_to);
                }
            });
        }
        recycle(&mut self.sync.kept, kept);
        let mut replicas: Vec<(Key, NodeId)> = Vec::with_capacity(self.keys.replicas);
        let stats = &mut self.stats;
        self.keys.for_each_replica(|k, m| {
            stats.sample_staleness(now, m.refreshed);
            replicas.push((k, m.owner));
        });
        for (k, owner) in replicas {
            // One look at the key's hot part: skipped while its entry is outstanding, else
            // marked outstanding with room for an upgrade reserved where the policy allows.
            let adaptive = self.policy(k) == Policy::Adaptive;
            let store = &self.store;
            let Some(room) = self.keys.update(k, |e| Node::replica_entry(e, adaptive, store)) else {
                continue;
            };
            let o = out.entry(owner).or_default();
            if let Some(t) = self.store.take_delta(k, &mut o.deltas) {
                let flags = if t.nonzero { ReplicaSync::DELTA } else { 0 } | room;
                o.replicas.push(ReplicaSync { key: k, version: t.version, flags });
                self.stats.deltas_sent += u64::from(t.nonzero);
            } else {
                // The store lost the replica (it became the main copy): forget it, and the
                // entry that was not sent.
                self.keys.update(k, |e| e.set(OUTSTANDING, false));
                self.keys.remove_replica(k);
            }
        }
        let updates = core::mem::take(&mut self.sync.owner_updates);
        let mine: Vec<OwnerChange> = updates.iter().filter(|(h, _)| *h == self.me).map(|(_, c)| *c).collect();
        if !mine.is_empty() {
            self.record_owners(self.me, &mine);
        }
        for &(h, c) in updates.iter().filter(|(h, _)| *h != self.me) {
            out.entry(h).or_default().owners.push(c);
        }
        recycle(&mut self.sync.owner_updates, updates);
        let sent_any = !out.is_empty();
        self.sync.dirty = out.values().any(|o| {
            !(o.starts.is_empty() && o.ends.is_empty() && o.owners.is_empty())
                || o.replicas.iter().any(|r| r.flags != 0)
        });
        let round = self.sync.round;
        let me = self.me;
        for (to, o) in out {
            self.send_sync(to, round, me, 0, o);
        }
        if self.keys.outstanding == 0 {
            self.finish_round(now, sent_any);
        } else {
            self.sync.open = true;
        }
    }

    /// Gives back the store slot reserved for `key`'s main copy, if one is. A key that comes
    /// after all is installed without it, or sent on to its home (see `install_moved`).
    pub(super) fn release_reservation(&mut self, key: Key) {
        if self.keys.take_reserved(key) {
            self.store.unreserve_slots(1);
        }
    }

    /// Settles the touched keys whose change needs no message and returns the others in key
    /// order, the order their entries take in the messages, each with the node its entry goes
    /// to where the store was asked on the way. A key is quiet if it has
    /// intent and is here already, or if its intent ended with nothing to tell another node (no
    /// replica, and no start sent or the key's main copy is here). Settling one quiet key
    /// depends on no other key, so the quiet ones are settled in the order they were touched,
    /// without sorting them. Nothing the round does with one kept key changes another's state,
    /// so the routes found here still hold when its entry is made.
    pub(super) fn settle_quiet(&mut self, touched: &[Key]) -> Vec<Kept> {
        let mut kept = core::mem::take(&mut self.sync.kept);
        for &k in touched {
            let l = self.keys.get(k);
            if l.count > 0 {
                let Some(w) = self.store.whereabouts_if_remote(k) else { continue };
                kept.push(Kept { key: k, to: Some(self.route_with(k, w)) });
            } else if !self.keys.has_replica(k) {
                if l.announced() {
                    let w = self.store.whereabouts(k);
                    if !matches!(w, Whereabouts::Here(_)) {
                        kept.push(Kept { key: k, to: Some(self.route_with(k, w)) });
                        continue;
                    }
                    // The key's owner is this node (the key came here for the intent, or
                    // later): the end is the owner's to apply, here and now, rather than
                    // after a trip to the key's home and back.
                    self.holder_gone(k, self.me);
                }
                self.keys.forget_intent(k);
            } else {
                // Its replica goes, to the replica's owner.
                kept.push(Kept { key: k, to: None });
            }
        }
        kept.sort_unstable_by_key(|e| e.key);
        kept.dedup_by_key(|e| e.key);
        kept
    }

    pub(super) fn finish_round(&mut self, now: Instant, sent_any: bool) {
        let s = &mut self.sync;
        s.open = false;
        s.rounds_done += 1;
        let done = s.rounds_done;
        let hold = self.cfg.relocation_hold;
        s.arrived.retain(|_, (r, t)| *r + 1 >= done || *t + hold > now);
        let period = self.cfg.sync_rounds_per_sec_max.map_or(0, |r| 1_000_000 / u64::from(r.max(1)));
        // Rounds take at least a microsecond, so that time moves even where the network
        // answers instantly (loopback, simulation).
        let next = if sent_any {
            (s.started_at + Duration(period.max(1))).max(now)
        } else {
            now + self.cfg.sync_idle_interval.max(Duration(period))
        };
        let mut ready = Vec::new();
        s.waiters.retain(|w| {
            if w.rounds <= done {
                ready.push((w.worker, w.ticket));
                false
            } else {
                true
            }
        });
        // One node has nothing to exchange (no peer, no replica, no intent kept): a round
        // there only completes `wait_sync`s, so it runs only while one waits (a clock gate
        // with a staleness bound moves on with rounds, so keeps them). Its driver then sleeps
        // through training instead of waking every `sync_idle_interval`.
        let on_demand = self.cfg.nodes == 1 && !self.gate.waits_for_peers();
        let s = &mut self.sync;
        s.next_at = (!on_demand || !s.waiters.is_empty()).then_some(next);
        for (w, t) in ready {
            self.complete(w, t, Ok(super::Completion::Sync));
        }
        self.gate_round_finished();
    }

    /// Sends `o` to `to` as one or more sync requests within the frame and key bounds.
    pub(super) fn send_sync(&mut self, to: NodeId, round: u32, origin: NodeId, hops: u8, o: SyncOut) {
        let mut budget = Budget::new(&self.cfg);
        // Usually it all fits one message: send it as it is, without copying it entry by entry.
        let delta_bytes = 4 * o.deltas.len();
        let entries = o.starts.len() + o.ends.len() + o.replicas.len() + o.owners.len();
        if budget.fits(entries, ENTRY_BYTES * entries + delta_bytes) {
            if entries > 0 {
                let SyncOut { starts, ends, replicas, deltas, owners } = o;
                self.send(to, Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners });
            }
            return;
        }
        let mut cur = SyncOut::default();
        let flush = |node: &mut Node, c: SyncOut| {
            if c.starts.len() + c.ends.len() + c.replicas.len() + c.owners.len() > 0 {
                let SyncOut { starts, ends, replicas, deltas, owners } = c;
                node.send(to, Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners });
            }
        };
        for k in o.starts {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.starts.push(k);
        }
        for k in o.ends {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.ends.push(k);
        }
        let mut at = 0;
        for r in o.replicas {
            let len = if r.has_delta() { self.cfg.layout.len_of(r.key).unwrap_or(0) } else { 0 };
            if budget.take(ENTRY_BYTES + 4 * len) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.replicas.push(r);
            cur.deltas.extend_from_slice(o.deltas.get(at..at + len).unwrap_or(&[]));
            at += len;
        }
        for c in o.owners {
            if budget.take(ENTRY_BYTES) {
                flush(self, core::mem::take(&mut cur));
            }
            cur.owners.push(c);
        }
        flush(self, cur);
    }

    /// The answer to (part of) this node's sync request of round `round`, from `from`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sync_answered(
        &mut self,
        now: Instant,
        from: NodeId,
        round: u32,
        relocated: &[Moved],
        refreshed: &[Refresh],
        acks: &[Key],
        failed: &[Key],
        values: &[f32],
    ) {
        let mut at = 0;
        let current = round == self.sync.round;
        // Each answered key but the relocated ones, which are settled on the way.
        let mut answered: Vec<Key> = Vec::with_capacity(refreshed.len() + acks.len() + failed.len());
        for m in relocated {
            let len = self.cfg.layout.len_of(m.key).unwrap_or(0);
            let v = values.get(at..at + len).unwrap_or(&[]);
            at += len;
            // One look at the key's record before the install: its reservation goes with the
            // install (which uses it or gives it back), and an answer in this round settles its
            // entry.
            let (had, count) = self.keys.update(m.key, |e| settle(e, current));
            let reserved = if had { super::dispatch::Reserved::Round } else { super::dispatch::Reserved::No };
            let change = self.install_moved(from, m, v, reserved);
            let Some(change) = change else {
                // Intent that is still not served locally is tried again next round.
                if count > 0 && !self.store.is_local(m.key) {
                    self.sync.touched.push(m.key);
                }
                continue;
            };
            // Reported to the home node with the next round's grouped request.
            self.sync.owner_updates.push(change);
            self.arrived(now, m.key);
        }
        for f in refreshed {
            let len = self.cfg.layout.len_of(f.key).unwrap_or(0);
            let v = values.get(at..at + len).unwrap_or(&[]);
            at += len;
            answered.push(f.key);
            self.learn_owner(f.key, from);
            if self.store.holds(f.key) {
                continue;
            }
            if let Some(meta) = self.keys.replica_mut(f.key) {
                meta.refreshed = now;
                self.store.refresh_replica(f.key, f.version, v);
            } else if self.local_count(f.key) > 0 {
                match self.store.install_replica(f.key, from, f.version, v) {
                    Ok(()) => {
                        self.keys.add_replica(f.key, ReplicaMeta { owner: from, refreshed: now });
                        self.stats.replicas_created += 1;
                    }
                    Err(_) => {
                        self.stats.replicas_refused += 1;
                        self.sync.touched.push(f.key);
                    }
                }
            } else {
                // The intent ended while the answer was on its way: tell the owner.
                self.sync.touched.push(f.key);
            }
        }
        for &k in acks {
            answered.push(k);
            if let Some(meta) = self.keys.replica_mut(k) {
                meta.refreshed = now;
            }
            if from != self.me {
                self.learn_owner(k, from);
            }
        }
        for &k in failed {
            answered.push(k);
            self.stats.sync_entries_failed += 1;
            self.sync.touched.push(k);
        }
        for k in answered {
            // One look at the key's record: its reservation goes back, and an answer in this
            // round settles its entry.
            let (unreserve, count) = self.keys.update(k, |e| settle(e, current));
            if unreserve {
                self.store.unreserve_slots(1);
            }
            // Intent that is still not served locally is tried again next round.
            if count > 0 && !self.store.is_local(k) {
                self.sync.touched.push(k);
            }
        }
        if self.sync.open && self.keys.outstanding == 0 {
            self.finish_round(now, true);
        }
    }

    /// A sync request from this node could not be sent: `to` has failed.
    pub(super) fn sync_undeliverable(&mut self, msg: &Message) {
        let now = self.sync.now;
        let Message::Sync { origin, round, starts, ends, replicas, .. } = msg else { return };
        if *origin != self.me {
            let mut keys: Vec<Key> = starts.iter().chain(ends).copied().collect();
            keys.extend(replicas.iter().map(|r| r.key));
            let reply = ReplyOut { failed: keys, ..ReplyOut::default() };
            self.send_reply(*origin, *round, reply);
            return;
        }
        self.stats.deltas_lost += replicas.iter().filter(|r| r.has_delta()).count() as u64;
        let keys: Vec<Key> =
            starts.iter().chain(ends).copied().chain(replicas.iter().map(|r| r.key)).collect();
        self.sync_answered(now, self.me, *round, &[], &[], &[], &keys, &[]);
    }
}

/// An answered key's hot part: its reservation is cleared and, if the answer is to the
/// `current` round, its entry is settled. Returns whether it had a reservation, and its intent
/// count.
#[inline(always)]
fn settle(e: &mut super::record::KeyRecord, current: bool) -> (bool, u32) {
    let had = e.reserved();
    e.set(RESERVED, false);
    if current {
        e.set(OUTSTANDING, false);
        e.set_final_to(None);
    }
    (had, e.count)
}

/// `keys` in ascending order, each once.
pub(super) fn sorted(mut keys: Vec<Key>) -> Vec<Key> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Gives `buf`'s allocation back to the round buffer `slot`, emptied, if `slot` has none and
/// `buf` is not too large.
pub(super) fn recycle<T>(slot: &mut Vec<T>, mut buf: Vec<T>) {
    if slot.capacity() == 0 && buf.capacity() <= BUFFER_KEEP_MAX {
        buf.clear();
        *slot = buf;
    }
}
