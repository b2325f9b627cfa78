//! Per-worker ordering: which keys the worker's remote operations still have in flight.
//!
//! A worker's operation on a key must not be served before the same worker's earlier
//! operations on that key (sequential consistency per key and worker, invariant 4). Local
//! accesses bypass the node, so the worker itself holds back an access that would overtake one
//! of its own remote operations, until that one completed. Two accesses commute, and need not
//! wait for each other, when both are pulls or both are adds.

use std::collections::HashMap;

use parma_core::{Key, Ticket};

/// What an operation does to its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Pull,
    Add,
    Set,
    /// Localize and barrier: do not read or change values.
    Other,
}

/// In-flight operations of one kind on one key.
#[derive(Clone, Copy, Debug, Default)]
struct Uses {
    pulls: u32,
    adds: u32,
    sets: u32,
}

impl Uses {
    fn count(&mut self, access: Access) -> Option<&mut u32> {
        match access {
            Access::Pull => Some(&mut self.pulls),
            Access::Add => Some(&mut self.adds),
            Access::Set => Some(&mut self.sets),
            Access::Other => None,
        }
    }

    /// Whether a new `access` must wait for these.
    fn blocks(&self, access: Access) -> bool {
        match access {
            Access::Pull => self.adds + self.sets > 0,
            Access::Add => self.pulls + self.sets > 0,
            Access::Set => self.pulls + self.adds + self.sets > 0,
            Access::Other => false,
        }
    }

    fn is_empty(&self) -> bool {
        self.pulls + self.adds + self.sets == 0
    }
}

#[derive(Debug)]
struct Inflight {
    keys: Vec<Key>,
    access: Access,
}

/// The worker's remote operations that have not completed, and their keys.
#[derive(Debug, Default)]
pub(crate) struct Order {
    inflight: HashMap<Ticket, Inflight>,
    keys: HashMap<Key, Uses>,
}

impl Order {
    /// Operations in flight.
    pub(crate) fn len(&self) -> usize {
        self.inflight.len()
    }

    /// Whether `access` to any of `keys` would overtake an operation in flight. Free when
    /// nothing that touches values is in flight.
    #[inline]
    pub(crate) fn conflicts(&self, keys: &[Key], access: Access) -> bool {
        if self.keys.is_empty() || access == Access::Other {
            return false;
        }
        keys.iter().any(|k| self.keys.get(k).is_some_and(|u| u.blocks(access)))
    }

    /// Operation `ticket` with `access` to `keys` (distinct) was handed to the node.
    pub(crate) fn record(&mut self, ticket: Ticket, keys: Vec<Key>, access: Access) {
        if access != Access::Other {
            for k in &keys {
                if let Some(n) = self.keys.entry(*k).or_default().count(access) {
                    *n += 1;
                }
            }
        }
        self.inflight.insert(ticket, Inflight { keys, access });
    }

    /// Operation `ticket` completed (or the worker gave up on it).
    pub(crate) fn complete(&mut self, ticket: Ticket) {
        let Some(op) = self.inflight.remove(&ticket) else { return };
        if op.access == Access::Other {
            return;
        }
        for k in &op.keys {
            if let Some(u) = self.keys.get_mut(k) {
                if let Some(n) = u.count(op.access) {
                    *n = n.saturating_sub(1);
                }
                if u.is_empty() {
                    self.keys.remove(k);
                }
            }
        }
    }

    /// Whether `ticket` is still in flight.
    #[cfg(test)]
    pub(crate) fn contains(&self, ticket: Ticket) -> bool {
        self.inflight.contains_key(&ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pulls_and_adds_commute_among_themselves_only() {
        let mut o = Order::default();
        let (a, b) = (Key(1), Key(2));
        o.record(Ticket(1), vec![a], Access::Pull);
        o.record(Ticket(2), vec![b], Access::Add);
        assert!(!o.conflicts(&[a], Access::Pull));
        assert!(o.conflicts(&[a], Access::Add));
        assert!(o.conflicts(&[a], Access::Set));
        assert!(!o.conflicts(&[b], Access::Add));
        assert!(o.conflicts(&[b], Access::Pull));
        assert!(!o.conflicts(&[a, b], Access::Other));
        assert!(!o.conflicts(&[Key(3)], Access::Set));
        o.complete(Ticket(1));
        assert!(!o.conflicts(&[a], Access::Set));
        o.complete(Ticket(2));
        assert!(!o.conflicts(&[b], Access::Set));
        assert_eq!(o.len(), 0);
        assert!(o.keys.is_empty());
    }

    #[test]
    fn counts_nest() {
        let mut o = Order::default();
        o.record(Ticket(1), vec![Key(1)], Access::Add);
        o.record(Ticket(2), vec![Key(1)], Access::Add);
        o.complete(Ticket(1));
        assert!(o.conflicts(&[Key(1)], Access::Pull));
        o.complete(Ticket(1));
        assert!(o.conflicts(&[Key(1)], Access::Pull));
        o.complete(Ticket(2));
        assert!(!o.conflicts(&[Key(1)], Access::Pull));
        assert!(!o.contains(Ticket(2)));
    }
}
