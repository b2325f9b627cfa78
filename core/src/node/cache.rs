//! The location cache: a bounded, direct-mapped table of the last known owner of keys.

use alloc::vec;
use alloc::vec::Vec;

use crate::ids::{mix, Key, NodeId};

const EMPTY: u64 = u64::MAX;

/// Key → last known owner, in a fixed number of slots; a new entry replaces whatever shared its
/// slot. A wrong entry costs a hop, never correctness: a node that does not hold a key forwards
/// the request along its pointer or to the key's home node.
pub(crate) struct LocationCache {
    keys: Vec<u64>,
    owners: Vec<NodeId>,
    mask: usize,
}

impl LocationCache {
    pub(crate) fn new(slots: usize) -> LocationCache {
        let slots = slots.max(1).next_power_of_two();
        LocationCache { keys: vec![EMPTY; slots], owners: vec![NodeId(0); slots], mask: slots - 1 }
    }

    #[inline]
    fn slot(&self, key: Key) -> usize {
        (mix(key).rotate_left(31) as usize) & self.mask
    }

    pub(crate) fn get(&self, key: Key) -> Option<NodeId> {
        let i = self.slot(key);
        (self.keys[i] == key.0 && key.0 != EMPTY).then(|| self.owners[i])
    }

    pub(crate) fn put(&mut self, key: Key, owner: NodeId) {
        let i = self.slot(key);
        self.keys[i] = key.0;
        self.owners[i] = owner;
    }

    pub(crate) fn forget(&mut self, key: Key) {
        let i = self.slot(key);
        if self.keys[i] == key.0 {
            self.keys[i] = EMPTY;
        }
    }
}
