//! Identifier newtypes. None of them is a raw integer in a public signature.

use core::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id!(
    /// A node (one process) of the cluster, `0..Config::nodes`.
    NodeId(u16)
);
id!(
    /// A worker thread of one node, `0..Config::workers_per_node`.
    WorkerId(u16)
);
id!(
    /// A parameter's id, `0..Layout::key_end()`.
    Key(u64)
);
id!(
    /// A worker's logical clock; starts at 0 and only grows.
    Clock(u64)
);
id!(
    /// Version of a key's main copy: grows by one with every update applied to it.
    Version(u64)
);
id!(
    /// Ownership epoch of a key: grows by one every time the key moves to another node.
    Epoch(u32)
);
id!(
    /// The epoch of a cluster's membership (its live nodes and who serves each home slot):
    /// 0 at start, one more with every committed membership change. Every frame carries its
    /// sender's (`docs/membership.md`).
    MembershipEpoch(u16)
);
id!(
    /// A registered sampling distribution, numbered in registration order.
    DistId(u32)
);
id!(
    /// A prepared sample of one worker, numbered from 1 in the order the worker prepared them.
    SampleHandle(u64)
);
id!(
    /// A request issued by one node; unique per origin node for the node's lifetime.
    RequestId(u64)
);
id!(
    /// A worker's handle on one of its own operations, unique per worker.
    Ticket(u64)
);
id!(
    /// The identity of one cluster; frames carrying another one are dropped.
    ClusterId(u32)
);

impl NodeId {
    /// The index of this node in per-node tables.
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl WorkerId {
    /// The index of this worker in per-worker tables.
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl Epoch {
    /// The epoch after one more move.
    #[inline]
    pub fn next(self) -> Epoch {
        Epoch(self.0.wrapping_add(1))
    }
}

impl MembershipEpoch {
    /// The membership every cluster starts with.
    pub const START: MembershipEpoch = MembershipEpoch(0);
}

impl Version {
    /// The version after one more update.
    #[inline]
    pub fn next(self) -> Version {
        Version(self.0.wrapping_add(1))
    }
}

/// One step of a digest: folds `x` into `h`. The fingerprints and digests nodes compare
/// (distributions, the shared configuration) are chains of it.
#[inline]
pub fn fold_digest(h: u64, x: u64) -> u64 {
    mix(Key(h ^ x)).rotate_left(17)
}

/// Multiplicative hash (Knuth) of a key, used for home nodes, shards and caches so that they
/// don't correlate with each other or with `key % n` patterns in the data.
#[inline]
pub fn mix(key: Key) -> u64 {
    let x = key.0 ^ (key.0 >> 31);
    let x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

/// A [`core::hash::Hasher`] for keys: [`mix`] of the key (any other input is folded in byte by
/// byte), turned right by `ROT` bits. No random seed, so tables iterate in the same order in
/// every run with the same inputs. `ROT` lets a table take its bucket and tag bits from other
/// bits of the mix than those something else already uses (see `Store::shard`).
#[derive(Clone, Copy, Default)]
pub(crate) struct MixHasher<const ROT: u32 = 0>(u64);

impl<const ROT: u32> core::hash::Hasher for MixHasher<ROT> {
    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline(always)]
    fn write_u64(&mut self, n: u64) {
        self.0 = mix(Key(self.0 ^ n)).rotate_right(ROT);
    }

    #[inline(always)]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
}
