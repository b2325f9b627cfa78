//! Hash maps from keys for the node's per-key protocol state.
//!
//! They hash with [`crate::ids::mix`] and no random seed, so a run replayed from the same inputs sees the
//! same iteration order (the simulator's traces depend on it). Still, wherever an order reaches
//! a message the code sorts the keys first: the order of a hash table is nothing to rely on.

use core::hash::BuildHasherDefault;

use hashbrown::HashMap;

use crate::ids::{Key, MixHasher};

/// A map from keys, hashed with [`crate::ids::mix`].
pub(crate) type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<MixHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inserts_same_order() {
        let fill = || {
            let mut m: KeyMap<u32> = KeyMap::default();
            for k in (0..1000u64).map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D) % 5000) {
                *m.entry(Key(k)).or_default() += 1;
            }
            for k in 0..300 {
                m.remove(&Key(k * 7));
            }
            m.into_iter().collect::<alloc::vec::Vec<_>>()
        };
        assert_eq!(fill(), fill());
    }
}
