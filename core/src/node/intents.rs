//! Worker intents (adapm-cikm23.txt §4.2 and Appendix B.2.1): each worker's intents wait in a
//! heap ordered by start clock. At the start of every sync round, action timing
//! ([`crate::action_timing::ActionTimer`], Algorithm 1) says which of them to act on; acted intents
//! move to a heap ordered by end clock and raise a per-key count; when a worker's clock reaches
//! an intent's end, the count drops. Only the transitions of the count (0 to positive: "this
//! node has intent"; back to 0: "no more") reach the key's owner, in the next round
//! (`super::round`).

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Ordering;

use hashbrown::hash_map::Entry;

use super::record::Keys;
use super::Node;
use crate::config::Technique;
use crate::error::OpError;
use crate::ids::{Clock, Key, WorkerId};
use crate::time::Instant;

/// How a worker says it will access the keys of an intent. Recorded in the statistics; the
/// decisions treat every kind alike (as AdaPM does: a single remote read is already worth a
/// local copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IntentKind {
    /// Reads and writes (the usual case in training).
    #[default]
    ReadWrite,
    /// Reads only.
    Read,
    /// Writes only.
    Write,
}

/// An intent a worker signaled that the node has not acted on yet: it waits for action timing
/// to reach its start.
#[derive(Debug)]
pub(super) struct SignaledIntent {
    pub(super) start: Clock,
    pub(super) end: Clock,
    pub(super) seq: u64,
    pub(super) keys: Vec<Key>,
}

/// An intent the node acts on (its keys are counted), until the worker's clock reaches its end.
#[derive(Debug)]
pub(super) struct ActiveIntent {
    pub(super) end: Clock,
    pub(super) seq: u64,
    pub(super) keys: Vec<Key>,
}

// Min-heaps: the smallest start (or end) on top, ties by signal order.
impl Ord for SignaledIntent {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.start, o.seq).cmp(&(self.start, self.seq))
    }
}
impl PartialOrd for SignaledIntent {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for SignaledIntent {
    fn eq(&self, o: &Self) -> bool {
        (self.start, self.seq) == (o.start, o.seq)
    }
}
impl Eq for SignaledIntent {}
impl Ord for ActiveIntent {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.end, o.seq).cmp(&(self.end, self.seq))
    }
}
impl PartialOrd for ActiveIntent {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for ActiveIntent {
    fn eq(&self, o: &Self) -> bool {
        (self.end, self.seq) == (o.end, o.seq)
    }
}
impl Eq for ActiveIntent {}

/// One worker's clock and intents.
#[derive(Debug, Default)]
pub(super) struct WorkerIntents {
    pub(super) clock: Clock,
    pub(super) signaled: BinaryHeap<SignaledIntent>,
    pub(super) active: BinaryHeap<ActiveIntent>,
}

/// An acted intent over `keys` is over: drops their counts and notes the keys whose count
/// reached 0.
pub(super) fn release_intent(
    records: &mut Keys,
    touched: &mut Vec<Key>,
    stats: &mut super::Stats,
    keys: &[Key],
) {
    for k in keys {
        // Only the count changes: the record's counts of reserved and outstanding keys hold.
        let announced = {
            let Entry::Occupied(mut e) = records.map.entry(*k) else { continue };
            let l = e.get_mut();
            l.count = l.count.saturating_sub(1);
            if l.count > 0 {
                continue;
            }
            let announced = l.announced();
            if l.is_idle() {
                e.remove();
            }
            announced
        };
        stats.intent_ends += 1;
        // With no start sent and no replica, there is nothing to tell the owner (the round
        // would find the same): the intent is forgotten at once.
        if announced || records.has_replica(*k) {
            touched.push(*k);
        }
    }
}

impl Node {
    /// Worker `worker` will access `keys` while its clock is in `[start, end)`. Cheap: the
    /// intent is queued and acted on in a later sync round. An intent whose window is empty or
    /// already past is accepted and ignored; under techniques without sync rounds every intent
    /// is, and so is every intent on a cluster of one node, where every key is homed here and
    /// stays here: acting on it would only count. `Busy` if the node keeps `intents_max`
    /// intents or `intent_keys_max` keys already.
    pub fn intent(
        &mut self,
        _now: Instant,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
        kind: IntentKind,
    ) -> Result<(), OpError> {
        if worker.index() >= self.sync.workers.len() {
            return Err(OpError::InvalidArgument);
        }
        if let Some(&key) = keys.iter().find(|k| !self.cfg.layout.contains(**k)) {
            return Err(OpError::KeyOutsideLayout { key });
        }
        let clock = self.sync.workers[worker.index()].clock;
        let kept = self.cfg.keeps_intents() && start < end && clock < end && !keys.is_empty();
        let s = &mut self.sync;
        if (kept
            && (s.intents >= self.cfg.intents_max || s.intent_keys + keys.len() > self.cfg.intent_keys_max))
            || !self.gate.room_to_declare(clock.0, start.0, end.0, keys.len(), &self.cfg)
        {
            // Under SparseSSP the worker may still work on these keys: until its clock passes
            // the window, this node answers every speculation with a conflict.
            self.gate.refused(end.0);
            return Err(OpError::Busy);
        }
        self.gate.declare(worker, clock.0, start.0, end.0, keys);
        self.stats.intents_by_kind[kind as usize] += 1;
        self.stats.intents_signaled += 1;
        self.stats.intent_keys_signaled += keys.len() as u64;
        if !kept {
            return Ok(());
        }
        s.intents += 1;
        s.intent_keys += keys.len();
        s.seq += 1;
        let seq = s.seq;
        s.workers[worker.index()].signaled.push(SignaledIntent { start, end, seq, keys: keys.to_vec() });
        Ok(())
    }

    /// Advances `worker`'s clock by one and returns the new clock.
    pub fn advance_clock(&mut self, _now: Instant, worker: WorkerId) -> Result<Clock, OpError> {
        let w = self.sync.workers.get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        w.clock = Clock(w.clock.0.saturating_add(1));
        let clock = w.clock;
        self.gate_progress();
        Ok(clock)
    }

    /// Ends every intent of `worker`, waiting or acted on, as if its clock had passed them all
    /// (a worker that finishes). The next round tells the owners and drops replicas that no
    /// other intent of this node needs, with their final deltas.
    pub fn end_intents(&mut self, _now: Instant, worker: WorkerId) -> Result<(), OpError> {
        let s = &mut self.sync;
        let records = &mut self.keys;
        let wi = s.workers.get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        for f in core::mem::take(&mut wi.signaled) {
            s.intents -= 1;
            s.intent_keys -= f.keys.len();
        }
        for a in core::mem::take(&mut wi.active) {
            release_intent(records, &mut s.touched, &mut self.stats, &a.keys);
            s.intents -= 1;
            s.intent_keys -= a.keys.len();
        }
        Ok(())
    }

    /// `worker`'s clock (0 for an unknown worker).
    pub fn clock(&self, worker: WorkerId) -> Clock {
        self.sync.workers.get(worker.index()).map_or(Clock(0), |w| w.clock)
    }

    /// Whether this node has (acted-on, unexpired) intent for `key`.
    pub fn has_intent(&self, key: Key) -> bool {
        self.keys.get(key).count > 0
    }

    /// Intents kept (waiting or acted on), and the keys in them.
    pub fn intents_kept(&self) -> (usize, usize) {
        (self.sync.intents, self.sync.intent_keys)
    }

    pub(super) fn local_count(&self, key: Key) -> u32 {
        self.keys.get(key).count
    }

    /// Keys this node keeps a replica of for the whole run (full replication, NuPS's hot keys).
    pub(super) fn register_permanent(&mut self) {
        self.sync.permanent_done = true;
        let keys: Vec<Key> = match self.cfg.technique {
            Technique::FullReplication => (0..self.cfg.layout.key_end()).map(Key).collect(),
            Technique::MultiTechnique => {
                let mut k: Vec<Key> = self.cfg.hot_keys.iter().copied().collect();
                k.sort_unstable();
                k
            }
            _ => return,
        };
        for k in keys {
            if self.home(k) != self.me {
                self.keys.update(k, |e| e.count += 1);
                self.sync.touched.push(k);
            }
        }
    }

    /// Action timing and aggregation: expire intents whose end the worker reached, act on
    /// intents whose start is within the window; record keys whose count changed.
    pub(super) fn act_on_intents(&mut self) {
        let clocks: Vec<Clock> = self.sync.workers.iter().map(|w| w.clock).collect();
        self.sync.timer.start_round(&clocks);
        for (w, &clock) in clocks.iter().enumerate() {
            let horizon = self.sync.timer.horizon(w);
            let s = &mut self.sync;
            let records = &mut self.keys;
            let wi = &mut s.workers[w];
            while wi.active.peek().is_some_and(|a| a.end <= clock) {
                let Some(a) = wi.active.pop() else { break };
                release_intent(records, &mut s.touched, &mut self.stats, &a.keys);
                s.intents -= 1;
                s.intent_keys -= a.keys.len();
            }
            while wi.signaled.peek().is_some_and(|f| f.start < horizon) {
                let Some(f) = wi.signaled.pop() else { break };
                if f.end <= clock {
                    self.stats.intents_expired_unacted += 1;
                    s.intents -= 1;
                    s.intent_keys -= f.keys.len();
                    continue;
                }
                for k in &f.keys {
                    // Only the count changes: the records' counts hold.
                    let l = records.map.entry(*k).or_default();
                    l.count += 1;
                    if l.count == 1 {
                        self.stats.intent_starts += 1;
                        s.touched.push(*k);
                    }
                }
                wi.active.push(ActiveIntent { end: f.end, seq: f.seq, keys: f.keys });
            }
        }
    }
}
