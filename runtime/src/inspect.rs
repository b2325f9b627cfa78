//! A read-only view of a node's parameter store, for tests, tools and reports.
//!
//! A [`StoreView`] reads what the store holds now; it cannot write. Writes go through a
//! [`crate::Worker`], whose ordering rule (an operation that misses locally goes to the node,
//! and later accesses of the same worker see it done) a direct write would skip. What a view
//! reads while workers and the driver run may be stale a moment later: it is for looking at a
//! node between steps, not for training.

use std::sync::Arc;

use parma_core::placement::Homes;
use parma_core::store::{Footprint, Whereabouts};
use parma_core::{Key, Layout, Store, Version};

/// Read-only access to one node's parameter store ([`crate::NodeRuntime::inspect`]). Cheap
/// to clone: it shares the store.
#[derive(Clone)]
pub struct StoreView {
    store: Arc<Store>,
}

impl StoreView {
    pub(crate) fn new(store: Arc<Store>) -> StoreView {
        StoreView { store }
    }

    /// The layout of the keys.
    pub fn layout(&self) -> &Layout {
        self.store.layout()
    }

    /// The home node of every key.
    pub fn homes(&self) -> &Homes {
        self.store.homes()
    }

    /// Whether the main copy of `key` is here now (a never-touched key at its home counts).
    #[inline]
    pub fn holds(&self, key: Key) -> bool {
        self.store.holds(key)
    }

    /// Whether a replica of `key` is here now.
    #[inline]
    pub fn has_replica(&self, key: Key) -> bool {
        self.store.has_replica(key)
    }

    /// Whether a worker's access to `key` would be local now: its main copy or a replica is
    /// here.
    #[inline]
    pub fn is_local(&self, key: Key) -> bool {
        self.store.is_local(key)
    }

    /// Where `key` is, as far as this node knows from its own slots.
    pub fn whereabouts(&self, key: Key) -> Whereabouts {
        self.store.whereabouts(key)
    }

    /// Copies the value of `key` into `out` if its main copy or a replica is here; false if
    /// neither is. `out.len()` must be the key's length.
    #[inline]
    pub fn read(&self, key: Key, out: &mut [f32]) -> bool {
        self.store.read(key, out)
    }

    /// Appends the value of `key` to `out` if its main copy or a replica is here.
    #[inline]
    pub fn read_append(&self, key: Key, out: &mut Vec<f32>) -> bool {
        self.store.read_append(key, out)
    }

    /// The version of the main copy of `key`, if it is here.
    pub fn version(&self, key: Key) -> Option<Version> {
        self.store.version(key)
    }

    /// Main copies of keys homed elsewhere held here now, plus slots reserved for keys on
    /// their way here: what `Config::store_keys_max` bounds.
    pub fn keys_held(&self) -> usize {
        self.store.keys_held()
    }

    /// Replicas held here now.
    pub fn replicas_held(&self) -> usize {
        self.store.replicas_held()
    }

    /// Main copies held here of keys homed elsewhere. Takes each shard's latch in turn.
    pub fn moved_in(&self) -> usize {
        self.store.moved_in()
    }

    /// The bytes the store has allocated, by use. Takes each shard's latch in turn.
    pub fn footprint(&self) -> Footprint {
        self.store.footprint()
    }
}

impl std::fmt::Debug for StoreView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreView")
            .field("keys_held", &self.keys_held())
            .field("replicas_held", &self.replicas_held())
            .finish_non_exhaustive()
    }
}
