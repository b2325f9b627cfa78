//! The peers a node knows to have failed, as a bitset over node ids.
//!
//! Not a hash set: its iteration order would depend on the hasher's seed, and the first
//! failed peer names the error a barrier returns. A bitset iterates in id order, and
//! `contains`, asked on every send, is a shift and a mask.

use alloc::vec;
use alloc::vec::Vec;

use crate::ids::NodeId;

/// A set of the ids `0..nodes`, iterated in ascending order.
pub(crate) struct PeerSet {
    words: Vec<u64>,
    nodes: u16,
    len: usize,
}

impl PeerSet {
    /// An empty set for a cluster of `nodes` nodes.
    pub(crate) fn new(nodes: u16) -> PeerSet {
        PeerSet { words: vec![0; usize::from(nodes).div_ceil(64)], nodes, len: 0 }
    }

    /// Adds `node`; false if it was in the set already or is not a node of the cluster.
    pub(crate) fn insert(&mut self, node: NodeId) -> bool {
        if node.0 >= self.nodes {
            return false;
        }
        let (w, bit) = (node.index() / 64, 1u64 << (node.index() % 64));
        match self.words.get_mut(w) {
            Some(word) if *word & bit == 0 => {
                *word |= bit;
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    #[inline]
    pub(crate) fn contains(&self, node: &NodeId) -> bool {
        self.words.get(node.index() / 64).is_some_and(|w| w & (1 << (node.index() % 64)) != 0)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The members, lowest id first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            core::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                Some(NodeId((i * 64) as u16 + bit as u16))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_in_id_order_whatever_the_insertion_order() {
        let mut s = PeerSet::new(200);
        assert!(s.is_empty() && s.iter().next().is_none());
        for n in [130, 3, 64, 199, 63, 0] {
            assert!(s.insert(NodeId(n)));
        }
        assert!(!s.insert(NodeId(64)), "a second insert");
        assert!(!s.insert(NodeId(200)) && !s.contains(&NodeId(200)), "outside the cluster");
        let ids: Vec<u16> = s.iter().map(|n| n.0).collect();
        assert_eq!(ids, [0, 3, 63, 64, 130, 199]);
        assert_eq!(s.iter().next(), Some(NodeId(0)));
        assert!(s.contains(&NodeId(63)) && s.contains(&NodeId(199)) && !s.contains(&NodeId(1)));
        assert!(!s.is_empty());
    }

    #[test]
    fn the_largest_cluster() {
        let mut s = PeerSet::new(crate::config::NODES_MAX);
        let last = NodeId(crate::config::NODES_MAX - 1);
        assert!(s.insert(last) && s.contains(&last));
        assert_eq!(s.iter().next(), Some(last));
        assert_eq!(s.iter().count(), 1);
    }
}
