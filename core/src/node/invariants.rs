//! Checks of one node's internal consistency, for tests, the simulator and fuzzing. The
//! cluster-wide invariants (one main copy per key, exact sums) are checked by the simulator
//! from the getters of all nodes.

use alloc::collections::{BTreeMap, BTreeSet};
use core::fmt;

use super::lifecycle::Life;
use super::record::Place;
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

impl core::error::Error for InvariantViolation {}

impl Node {
    /// Checks this node's internal consistency. Cost grows with the tables; for tests.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |what, n: u64| Err(InvariantViolation(what, n));
        if self.keys.waiting_ops > self.cfg.waiting_ops_max {
            return fail("more waiting operations than the bound", self.keys.waiting_ops as u64);
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
        // reserved slot per key this node waits for: a sync start's, or an incoming record's.
        if self.store.keys_held() != self.store.moved_in() + self.keys.reserved + self.keys.incoming {
            return fail("the store's count of keys and reservations is off", self.store.keys_held() as u64);
        }
        self.check_sync()
    }
}

impl Node {
    /// The records against the store and the intents. One record per key leaves little to
    /// cross-check: the tag and its parts agree by construction (asserted at every
    /// transition), so what is left is the counts kept beside the map, and what the records
    /// say against what the store holds and the intents count.
    pub(super) fn check_sync(&self) -> Result<(), super::InvariantViolation> {
        let fail = |what, n: u64| Err(super::InvariantViolation(what, n));
        let s = &self.sync;
        let keys = &self.keys;
        if keys.replicas != self.store.replicas_held() {
            return fail("replica records and store disagree", keys.replicas as u64);
        }
        // A replica whose last intent just ended (`end_intents`) stays until the next round,
        // which sends its final delta and drops it: it must be among the round's keys.
        let ending: BTreeSet<Key> = s.touched.iter().copied().collect();
        let (mut reserved, mut outstanding) = (0, 0);
        for (k, e) in &keys.map {
            if e.is_idle() {
                return fail("an idle key record is kept", k.0);
            }
            if e.final_to().is_some() && !e.outstanding() {
                return fail("a final delta is on its way without an outstanding entry", k.0);
            }
            reserved += usize::from(e.reserved());
            outstanding += usize::from(e.outstanding());
        }
        // The cold parts: each tag is what its parts make (asserted at every transition too),
        // the counts by tag hold, and the parts agree with the store.
        if !keys.cold_consistent() {
            return fail("a key record's tag disagrees with its parts", keys.pointers as u64);
        }
        let mut counts = [0usize; 16];
        let (mut waiting, mut localizes) = (0, 0);
        for (k, c) in keys.with_life(|_| true) {
            counts[c.life() as usize] += 1;
            let held = self.store.holds(k);
            match &c.place {
                Place::Owned(_) if !held => {
                    return fail("replica holders are recorded for a key not owned here", k.0);
                }
                Place::Replica(_) => {
                    if !self.store.has_replica(k) {
                        return fail("a replica in the records is not in the store", k.0);
                    }
                    if keys.get(k).count == 0 && !ending.contains(&k) {
                        return fail("a replica is held without intent", k.0);
                    }
                }
                Place::Incoming(inc) => {
                    if held {
                        return fail("a key held here is still marked incoming", k.0);
                    }
                    waiting += inc.ops.len();
                    localizes += inc.localizes.len();
                }
                _ => {}
            }
            if c.pointer().is_some() && held {
                return fail("a node holds a key and a forwarding pointer for it", k.0);
            }
        }
        let by_life =
            |p: fn(Life) -> bool| Life::ALL.iter().filter(|l| p(**l)).map(|l| counts[*l as usize]).sum();
        if (keys.pointers, keys.incoming, keys.replicas, keys.owned)
            != (
                by_life(Life::has_pointer),
                by_life(Life::is_incoming),
                by_life(Life::has_replica),
                counts[Life::Owned as usize],
            )
        {
            return fail("the key records' counts by state are off", keys.pointers as u64);
        }
        if reserved != keys.reserved || outstanding != keys.outstanding {
            return fail("the key records' counts are off", outstanding as u64);
        }
        if waiting != keys.waiting_ops || localizes != keys.localizes {
            return fail("waiting-operation count disagrees with the queues", waiting as u64);
        }
        if !s.open && outstanding > 0 {
            return fail("sync entries outstanding with no round open", outstanding as u64);
        }
        let (mut n, mut intent_keys) = (0, 0);
        let mut counts: BTreeMap<Key, u32> = BTreeMap::new();
        for w in &s.workers {
            n += w.signaled.len() + w.active.len();
            intent_keys += w.signaled.iter().map(|f| f.keys.len()).sum::<usize>();
            for a in w.active.iter() {
                intent_keys += a.keys.len();
                for k in &a.keys {
                    *counts.entry(*k).or_default() += 1;
                }
            }
        }
        if n != s.intents || intent_keys != s.intent_keys {
            return fail("intent counters disagree with the heaps", n as u64);
        }
        if s.intents > self.cfg.intents_max || s.intent_keys > self.cfg.intent_keys_max {
            return fail("more intents than the bound", s.intents as u64);
        }
        for k in counts.keys() {
            if !keys.map.contains_key(k) {
                return fail("a key with acted intents has no record", k.0);
            }
        }
        for (k, l) in &keys.map {
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
        Ok(())
    }
}
