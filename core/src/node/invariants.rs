//! Checks of one node's internal consistency, for tests, the simulator and fuzzing. The
//! cluster-wide invariants (one main copy per key, exact sums) are checked by the simulator
//! from the getters of all nodes.

use alloc::collections::{BTreeMap, BTreeSet};
use core::fmt;

use super::Node;
use crate::config::Technique;
use crate::ids::Key;

/// A broken invariant: always a bug in parma.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantViolation(pub &'static str, pub u64);

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant violated: {} ({})", self.0, self.1)
    }
}

impl Node {
    /// Checks this node's internal consistency. Cost grows with the tables; for tests.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |what, n: u64| Err(InvariantViolation(what, n));
        for k in self.pointers.keys() {
            if self.store.holds(*k) {
                return fail("a node holds a key and a forwarding pointer for it", k.0);
            }
        }
        for k in self.incoming.keys() {
            if self.store.holds(*k) {
                return fail("a key held here is still marked incoming", k.0);
            }
        }
        let waiting: usize = self.incoming.values().map(|i| i.ops.len()).sum();
        if waiting != self.waiting_ops {
            return fail("waiting-operation count disagrees with the queues", waiting as u64);
        }
        if self.waiting_ops > self.cfg.waiting_ops_max {
            return fail("more waiting operations than the bound", self.waiting_ops as u64);
        }
        if self.pending.len() > self.cfg.requests_pending_max {
            return fail("more pending requests than the bound", self.pending.len() as u64);
        }
        for (req, p) in &self.pending {
            if p.remaining == 0 || p.remaining != p.unanswered() {
                return fail("a pending request's count of unanswered keys is wrong", req.0);
            }
            if self.next_scan.is_none() {
                return fail("requests are pending but no deadline scan is scheduled", req.0);
            }
            if !p.keys.iter().all(|k| p.contains(*k)) {
                return fail("a pending request lost track of a key", req.0);
            }
        }
        if self.barrier.waiting() > usize::from(self.cfg.workers_per_node) {
            return fail("more workers in the barrier than the node has", self.barrier.waiting() as u64);
        }
        if self.store.keys_held() > self.cfg.store_keys_max {
            return fail("the store holds more keys than its bound", self.store.keys_held() as u64);
        }
        // What the bound counts is exactly the main copies of keys homed elsewhere plus one
        // reserved slot per key this node waits for: a sync start's, or an `incoming` entry's.
        if self.store.keys_held() != self.store.moved_in() + self.sync_reserved() + self.incoming.len() {
            return fail("the store's count of keys and reservations is off", self.store.keys_held() as u64);
        }
        self.check_sync()
    }
}

impl Node {
    pub(super) fn check_sync(&self) -> Result<(), super::InvariantViolation> {
        let fail = |what, n: u64| Err(super::InvariantViolation(what, n));
        let s = &self.sync;
        if s.replicas.len() != self.store.replicas_held() {
            return fail("replica table and store disagree", s.replicas.len() as u64);
        }
        // A replica whose last intent just ended (`end_intents`) stays until the next round,
        // which sends its final delta and drops it: it must be among the round's keys.
        let ending: BTreeSet<Key> = s.touched.iter().copied().collect();
        for k in s.replicas.keys() {
            if !self.store.has_replica(*k) {
                return fail("a replica in the table is not in the store", k.0);
            }
            if self.local_count(*k) == 0 && !ending.contains(k) {
                return fail("a replica is held without intent", k.0);
            }
        }
        let (mut reserved, mut outstanding) = (0, 0);
        for (k, e) in &s.keys.map {
            if e.is_idle() {
                return fail("an idle key record is kept", k.0);
            }
            if e.final_to().is_some() && !e.outstanding() {
                return fail("a final delta is on its way without an outstanding entry", k.0);
            }
            reserved += usize::from(e.reserved());
            outstanding += usize::from(e.outstanding());
        }
        if reserved != s.keys.reserved || outstanding != s.keys.outstanding {
            return fail("the key records' counts are off", outstanding as u64);
        }
        if !s.open && outstanding > 0 {
            return fail("sync entries outstanding with no round open", outstanding as u64);
        }
        let (mut n, mut keys) = (0, 0);
        let mut counts: BTreeMap<Key, u32> = BTreeMap::new();
        for w in &s.workers {
            n += w.signaled.len() + w.active.len();
            keys += w.signaled.iter().map(|f| f.keys.len()).sum::<usize>();
            for a in w.active.iter() {
                keys += a.keys.len();
                for k in &a.keys {
                    *counts.entry(*k).or_default() += 1;
                }
            }
        }
        if n != s.intents || keys != s.intent_keys {
            return fail("intent counters disagree with the heaps", n as u64);
        }
        if s.intents > self.cfg.intents_max || s.intent_keys > self.cfg.intent_keys_max {
            return fail("more intents than the bound", s.intents as u64);
        }
        for k in counts.keys() {
            if !s.keys.map.contains_key(k) {
                return fail("a key with acted intents has no record", k.0);
            }
        }
        for (k, l) in &s.keys.map {
            let permanent = match self.cfg.technique {
                Technique::FullReplication => self.home(*k) != self.me,
                Technique::MultiTechnique => self.cfg.hot_keys.contains(k) && self.home(*k) != self.me,
                _ => false,
            } && s.permanent_done;
            let expected = counts.get(k).copied().unwrap_or(0) + u32::from(permanent);
            if l.count != expected {
                return fail("a key's intent count disagrees with the acted intents", k.0);
            }
        }
        for k in s.holders.keys() {
            if !self.store.holds(*k) {
                return fail("replica holders are recorded for a key not owned here", k.0);
            }
        }
        Ok(())
    }
}
