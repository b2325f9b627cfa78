//! Where keys live before anything moves: each key's home node, and (with
//! [`Placement::Dense`]) a dense number for each key among the keys homed on its node.
//!
//! Two placements, chosen per cluster in [`Config::placement`](crate::Config):
//!
//! - [`Placement::Hashed`]: home = mix(key) mod nodes. Works for any key range, however
//!   sparsely the model touches it (hashed feature ids).
//! - [`Placement::Dense`]: a permutation π of the layout's range `0..key_end` spreads the keys;
//!   home = π(key) mod nodes and the key's *home index* is π(key) div nodes. The home indexes of
//!   one node are exactly `0..homed_on(node)`, so a store can keep its home keys in pages of an
//!   array, without storing the keys (see `store`). Suits models that touch most of their key
//!   range (embeddings, knowledge graphs, word vectors).
//!
//! π is a permutation of `0..2^b` (the smallest power of two above the range) made of
//! xor-shifts and multiplications by odd constants modulo `2^b`, each invertible; keys outside
//! the range are skipped by walking the cycle (apply π again until the result is in range),
//! which keeps it a permutation of `0..key_end`. The range is more than half of `0..2^b`, so a
//! key takes fewer than two steps on average (one when the range is a power of two).

use crate::config::Placement;
use crate::ids::{mix, Key, NodeId};

const M1: u64 = 0xBF58_476D_1CE4_E5B9;
const M2: u64 = 0x94D0_49BB_1331_11EB;

/// The inverse of an odd `m` modulo 2^64 (Newton's iteration doubles the correct bits).
const fn inverse_odd(m: u64) -> u64 {
    let mut x = m; // correct to 3 bits for any odd m
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x)));
        i += 1;
    }
    x
}

const M1_INV: u64 = inverse_odd(M1);
const M2_INV: u64 = inverse_odd(M2);

/// The home of every key of one cluster. Cheap to copy; every node computes the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Homes {
    placement: Placement,
    nodes: u16,
    key_end: u64,
    /// `2^b - 1` for the permutation's width b.
    mask: u64,
    /// The xor-shift distance: about half the width.
    shift: u32,
    bits: u32,
    /// log2 of `nodes` if it is a power of two (the home and home index are then a mask and a
    /// shift, not a division: a worker's every access to a page key computes them).
    node_bits: Option<u32>,
}

impl Homes {
    /// The homes for a cluster of `nodes` nodes over keys `0..key_end`.
    pub fn new(placement: Placement, nodes: u16, key_end: u64) -> Homes {
        let bits = (64 - key_end.saturating_sub(1).leading_zeros()).max(1);
        let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let nodes = nodes.max(1);
        let node_bits = nodes.is_power_of_two().then(|| nodes.trailing_zeros());
        Homes { placement, nodes, key_end, mask, shift: bits.div_ceil(2), bits, node_bits }
    }

    /// The placement these homes follow.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Under [`Placement::Hashed`], whether the key with this [`mix`] is homed on `node` (the
    /// caller has the mix already); always false under [`Placement::Dense`].
    #[inline]
    pub fn hashed_home_is(&self, mix: u64, node: NodeId) -> bool {
        self.placement == Placement::Hashed && hashed_home_of_mix(mix, self.nodes) == node
    }

    /// The home node of `key`. A key outside the range (which nothing stores) gets a hashed
    /// home under either placement.
    #[inline]
    pub fn home(&self, key: Key) -> NodeId {
        match self.dense(key) {
            Some((home, _)) => home,
            None => hashed_home(key, self.nodes),
        }
    }

    /// Under [`Placement::Dense`], the home of `key` and its home index; `None` under
    /// [`Placement::Hashed`] or for a key outside the range.
    #[inline]
    pub fn dense(&self, key: Key) -> Option<(NodeId, u64)> {
        if self.placement != Placement::Dense || key.0 >= self.key_end {
            return None;
        }
        let p = self.permute(key.0);
        if let Some(b) = self.node_bits {
            return Some((NodeId((p & ((1 << b) - 1)) as u16), p >> b));
        }
        let n = u64::from(self.nodes);
        Some((NodeId((p % n) as u16), p / n))
    }

    /// The key whose home is `node` with home index `index` (the inverse of [`Homes::dense`]);
    /// `None` if there is none.
    pub fn key_at(&self, node: NodeId, index: u64) -> Option<Key> {
        let p = index.checked_mul(u64::from(self.nodes))?.checked_add(u64::from(node.0))?;
        if self.placement != Placement::Dense || p >= self.key_end || node.0 >= self.nodes {
            return None;
        }
        let mut x = self.step_back(p);
        while x >= self.key_end {
            x = self.step_back(x);
        }
        Some(Key(x))
    }

    /// How many keys of the range are homed on `node` under [`Placement::Dense`]: their home
    /// indexes are `0..homed_on(node)`.
    pub fn homed_on(&self, node: NodeId) -> u64 {
        let n = u64::from(self.nodes);
        let node = u64::from(node.0);
        if node >= n {
            return 0;
        }
        self.key_end / n + u64::from(node < self.key_end % n)
    }

    /// π: a permutation of `0..key_end`.
    #[inline]
    fn permute(&self, key: u64) -> u64 {
        let mut x = self.step(key);
        while x >= self.key_end {
            x = self.step(x);
        }
        x
    }

    /// One step of the permutation of `0..2^b`.
    #[inline(always)]
    fn step(&self, x: u64) -> u64 {
        let (s, m) = (self.shift, self.mask);
        let mut x = x ^ (x >> s);
        x = x.wrapping_mul(M1) & m;
        x ^= x >> s;
        x = x.wrapping_mul(M2) & m;
        x ^ (x >> s)
    }

    /// The inverse of [`Homes::step`].
    fn step_back(&self, y: u64) -> u64 {
        let m = self.mask;
        let mut x = self.unshift(y);
        x = x.wrapping_mul(M2_INV) & m;
        x = self.unshift(x);
        x = x.wrapping_mul(M1_INV) & m;
        self.unshift(x)
    }

    /// The inverse of `x ^ (x >> shift)` on b bits.
    fn unshift(&self, y: u64) -> u64 {
        let mut x = y;
        let mut known = self.shift;
        while known < self.bits {
            x = y ^ (x >> self.shift);
            known += self.shift;
        }
        x
    }
}

/// The home node of `key` under [`Placement::Hashed`] in a cluster of `nodes` nodes.
#[inline]
pub fn hashed_home(key: Key, nodes: u16) -> NodeId {
    hashed_home_of_mix(mix(key), nodes)
}

#[inline(always)]
fn hashed_home_of_mix(mix: u64, nodes: u16) -> NodeId {
    NodeId((mix % u64::from(nodes.max(1))) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn dense_is_a_bijection_onto_each_nodes_indexes() {
        for (nodes, key_end) in [(1u16, 1u64), (2, 2), (3, 17), (4, 16), (7, 1000), (8, 1025), (2, 4096)] {
            let h = Homes::new(Placement::Dense, nodes, key_end);
            let mut seen = vec![vec![false; h.homed_on(NodeId(0)) as usize]; usize::from(nodes)];
            for k in 0..key_end {
                let (node, index) = h.dense(Key(k)).unwrap();
                assert!(index < h.homed_on(node), "{nodes} nodes, {key_end} keys: key {k} index {index}");
                assert!(!core::mem::replace(&mut seen[node.index()][index as usize], true));
                assert_eq!(h.key_at(node, index), Some(Key(k)));
                assert_eq!(h.home(Key(k)), node);
            }
            let total: u64 = (0..nodes).map(|n| h.homed_on(NodeId(n))).sum();
            assert_eq!(total, key_end);
            assert_eq!(h.key_at(NodeId(0), h.homed_on(NodeId(0))), None);
        }
    }

    #[test]
    fn dense_round_trips_at_the_ends_of_wide_ranges() {
        for key_end in [u64::MAX, 1 << 40, (1 << 40) + 3, 3_000_000_007] {
            let h = Homes::new(Placement::Dense, 5, key_end);
            for k in [0, 1, 2, key_end / 2, key_end - 2, key_end - 1] {
                let (node, index) = h.dense(Key(k)).unwrap();
                assert_eq!(h.key_at(node, index), Some(Key(k)), "{key_end}: {k}");
            }
            assert_eq!(h.dense(Key(key_end)), None);
        }
    }

    #[test]
    fn dense_spreads_neighbouring_keys() {
        // Consecutive keys (rows of an embedding table in frequency order) land on every node
        // in about equal numbers.
        let h = Homes::new(Placement::Dense, 8, 1 << 20);
        let mut per_node = [0u32; 8];
        for k in 0..8000 {
            per_node[h.home(Key(k)).index()] += 1;
        }
        assert!(per_node.iter().all(|c| (850..1150).contains(c)), "{per_node:?}");
    }

    #[test]
    fn hashed_and_outside_keys_have_no_index() {
        let h = Homes::new(Placement::Hashed, 3, 100);
        assert_eq!(h.dense(Key(5)), None);
        assert_eq!(h.home(Key(5)), hashed_home(Key(5), 3));
        let d = Homes::new(Placement::Dense, 3, 100);
        assert_eq!(d.dense(Key(100)), None);
        assert_eq!(d.home(Key(100)), hashed_home(Key(100), 3));
    }
}
