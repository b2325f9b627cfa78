//! The node's per-key records for intents, rounds and replicas, hashed without a random seed
//! (`super::keymap`) so that a replayed run is the same run. A key's intent count and the
//! state of its entries (slot reserved, entry outstanding, final delta on its way) share one
//! 8-byte record, so that a round and its answer look a key up once.

use alloc::vec::Vec;

use hashbrown::hash_map::Entry;

use super::keymap::KeyMap;
use crate::ids::{Key, NodeId};
use crate::time::Instant;

/// This node's sync state for one key: its aggregated intent, and where the key's entries
/// stand. A key has a record only while some field differs from the default.
///
/// Eight bytes, as the intent count alone took before the flags joined it: the record is
/// touched on every key-intent, the flags only when an entry is made or answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct KeySync {
    /// Acted, unexpired intents (plus one for a key replicated for the whole run).
    pub(super) count: u32,
    /// 1 + the node a final delta of this key is on its way to (0: none). The replica was
    /// dropped this round: this node's requests for the key go there too, behind the delta
    /// (per-pair FIFO), so a worker's read after its last update through the replica still
    /// sees it. (Node ids are below `u16::MAX`.)
    pub(super) final_to: u16,
    /// `ANNOUNCED`, `RESERVED`, `OUTSTANDING`.
    pub(super) flags: u8,
}

/// The owner was told of this node's intent (a start was sent and no end since).
pub(super) const ANNOUNCED: u8 = 1;
/// A store slot is reserved for the key's main copy, which the answer to a start (or to an
/// upgrade offer) may bring.
pub(super) const RESERVED: u8 = 2;
/// An entry of the open round waits for its answer. At most one per key, so a replica's
/// delta is never in flight twice.
pub(super) const OUTSTANDING: u8 = 4;

impl KeySync {
    pub(super) fn is_idle(&self) -> bool {
        *self == KeySync::default()
    }
    pub(super) fn announced(&self) -> bool {
        self.flags & ANNOUNCED != 0
    }
    pub(super) fn reserved(&self) -> bool {
        self.flags & RESERVED != 0
    }
    pub(super) fn outstanding(&self) -> bool {
        self.flags & OUTSTANDING != 0
    }
    pub(super) fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }
    pub(super) fn final_to(&self) -> Option<NodeId> {
        self.final_to.checked_sub(1).map(NodeId)
    }
    pub(super) fn set_final_to(&mut self, to: Option<NodeId>) {
        self.final_to = to.map_or(0, |n| n.0.saturating_add(1));
    }
}

/// As owner: the nodes holding replicas of one key, without an allocation for up to three
/// (a key replicated to every node of a large cluster spills into a vector).
#[derive(Clone, Debug)]
pub(super) enum Holders {
    Few { len: u8, nodes: [NodeId; 3] },
    Many(Vec<NodeId>),
}

impl Default for Holders {
    fn default() -> Holders {
        Holders::Few { len: 0, nodes: [NodeId(0); 3] }
    }
}

impl Holders {
    pub(super) fn as_slice(&self) -> &[NodeId] {
        match self {
            Holders::Few { len, nodes } => &nodes[..usize::from(*len)],
            Holders::Many(v) => v,
        }
    }

    /// Adds `node` unless it is in already.
    pub(super) fn insert(&mut self, node: NodeId) {
        if self.as_slice().contains(&node) {
            return;
        }
        match self {
            Holders::Few { len, nodes } if usize::from(*len) < nodes.len() => {
                nodes[usize::from(*len)] = node;
                *len += 1;
            }
            Holders::Few { nodes, .. } => {
                let mut v = nodes.to_vec();
                v.push(node);
                *self = Holders::Many(v);
            }
            Holders::Many(v) => v.push(node),
        }
    }

    /// Removes `node`; whether none is left.
    pub(super) fn remove(&mut self, node: NodeId) -> bool {
        match self {
            Holders::Few { len, nodes } => {
                let n = usize::from(*len);
                if let Some(i) = nodes[..n].iter().position(|h| *h == node) {
                    nodes.copy_within(i + 1..n, i);
                    *len -= 1;
                }
                *len == 0
            }
            Holders::Many(v) => {
                v.retain(|n| *n != node);
                v.is_empty()
            }
        }
    }
}

/// The per-key records, with counts of the reserved and outstanding ones.
#[derive(Debug, Default)]
pub(super) struct Keys {
    pub(super) map: KeyMap<KeySync>,
    pub(super) reserved: usize,
    pub(super) outstanding: usize,
}

impl Keys {
    /// `key`'s record (the default if it has none).
    pub(super) fn get(&self, key: Key) -> KeySync {
        self.map.get(&key).copied().unwrap_or_default()
    }

    /// Changes `key`'s record with `f`, keeping the counts, and drops it if it became idle.
    /// Returns what `f` returns.
    #[inline]
    pub(super) fn update<R>(&mut self, key: Key, f: impl FnOnce(&mut KeySync) -> R) -> R {
        match self.map.entry(key) {
            Entry::Occupied(mut o) => {
                let e = o.get_mut();
                let (r0, o0) = (e.reserved(), e.outstanding());
                let r = f(e);
                let (r1, o1) = (e.reserved(), e.outstanding());
                if e.is_idle() {
                    o.remove();
                }
                self.recount(r0, r1, o0, o1);
                r
            }
            Entry::Vacant(v) => {
                let mut e = KeySync::default();
                let r = f(&mut e);
                if !e.is_idle() {
                    v.insert(e);
                }
                self.recount(false, e.reserved(), false, e.outstanding());
                r
            }
        }
    }

    pub(super) fn recount(&mut self, r0: bool, r1: bool, o0: bool, o1: bool) {
        self.reserved = self.reserved + usize::from(r1) - usize::from(r0);
        self.outstanding = self.outstanding + usize::from(o1) - usize::from(o0);
    }

    /// Forgets `key`'s intent (count and announcement), keeping the rest of its record.
    pub(super) fn forget_intent(&mut self, key: Key) {
        self.update(key, |e| {
            e.count = 0;
            e.set(ANNOUNCED, false);
        });
    }

    /// Clears `key`'s reservation; whether it had one.
    pub(super) fn take_reserved(&mut self, key: Key) -> bool {
        self.update(key, |e| {
            let had = e.reserved();
            e.set(RESERVED, false);
            had
        })
    }

    /// Marks an entry for `key` outstanding in the open round.
    pub(super) fn set_outstanding(&mut self, key: Key) {
        self.update(key, |e| e.set(OUTSTANDING, true));
    }
}

/// A replica this node holds.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplicaMeta {
    /// The owner it synchronizes with (fixed while replicas exist).
    pub(super) owner: NodeId,
    /// When it was last refreshed or found up to date.
    pub(super) refreshed: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn holders_keep_each_node_once_inline_and_spilled() {
        let mut h = Holders::default();
        for n in [3, 1, 3, 2] {
            h.insert(NodeId(n));
        }
        assert!(matches!(h, Holders::Few { .. }));
        assert_eq!(h.as_slice(), [NodeId(3), NodeId(1), NodeId(2)]);
        assert!(!h.remove(NodeId(1)));
        assert!(!h.remove(NodeId(9)), "removing a node not in is harmless");
        assert_eq!(h.as_slice(), [NodeId(3), NodeId(2)]);
        for n in [5, 6, 7, 6] {
            h.insert(NodeId(n));
        }
        assert!(matches!(h, Holders::Many(_)));
        assert_eq!(h.as_slice(), [NodeId(3), NodeId(2), NodeId(5), NodeId(6), NodeId(7)]);
        for n in [2, 3, 5, 6] {
            assert!(!h.remove(NodeId(n)));
        }
        assert!(h.remove(NodeId(7)), "the last one leaves it empty");
        let mut few = Holders::default();
        few.insert(NodeId(4));
        assert!(few.remove(NodeId(4)));
    }
}
