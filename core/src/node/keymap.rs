//! Hash maps and sets of keys for the node's per-key protocol state.
//!
//! They hash with [`mix`] and no random seed, so a run replayed from the same inputs sees the
//! same iteration order (the simulator's traces depend on it). Still, wherever an order reaches
//! a message the code sorts the keys first: the order of a hash table is nothing to rely on.

use core::hash::{BuildHasherDefault, Hasher};

use hashbrown::{HashMap, HashSet};

use crate::ids::{mix, Key};

/// A map from keys, hashed with [`mix`].
pub(crate) type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;
/// A set of keys, hashed with [`mix`].
pub(crate) type KeySet = HashSet<Key, BuildHasherDefault<KeyHasher>>;

/// Hashes a [`Key`] (one `u64`) with [`mix`]; any other input is folded in byte by byte.
#[derive(Clone, Copy, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = mix(Key(self.0 ^ n));
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
}

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
