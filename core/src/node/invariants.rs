//! Checks of one node's internal consistency, for tests, the simulator and fuzzing. The
//! cluster-wide invariants (one main copy per key, exact sums) are checked by the simulator
//! from the getters of all nodes.

use core::fmt;

use super::Node;

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
