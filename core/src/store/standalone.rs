//! A store that no node uses, for measuring and testing the store alone.

use alloc::vec::Vec;
use core::ops::Deref;

use super::{InstallError, Store};
use crate::config::Config;
use crate::ids::{Epoch, Key, NodeId, Version};

/// A [`Store`] that belongs to no node: `core/benches/memory.rs` fills one as a node's would
/// be filled. It offers the protocol's mutators, which a node's store keeps to the node
/// (anyone holding a node's `Arc<Store>` could otherwise make a second main copy of a key):
/// nothing can make a `Standalone` a node's store, so what it holds is no copy of anything.
/// Everything else is [`Store`]'s, through `Deref`.
pub struct Standalone(Store);

impl Standalone {
    /// An empty store, as node `me` of the cluster `cfg` describes would have.
    pub fn new(cfg: &Config, me: NodeId) -> Standalone {
        Standalone(Store::new(cfg, me))
    }

    /// Installs the main copy of `key` as a node's store does when it arrives from another
    /// node (without a reservation).
    pub fn install(
        &self,
        key: Key,
        epoch: Epoch,
        version: Version,
        values: &[f32],
    ) -> Result<(), InstallError> {
        self.0.install(key, epoch, version, values, false)
    }

    /// Removes the main copy of `key` as a node's store does when it hands the key to `to`;
    /// appends the value to `out` and returns the new epoch and the version.
    pub fn take(&self, key: Key, to: NodeId, out: &mut Vec<f32>) -> Option<(Epoch, Version)> {
        self.0.take(key, to, out)
    }

    /// Installs a replica of `key`, owned by `owner`, as a node's store does (or refreshes the
    /// replica already here).
    pub fn install_replica(
        &self,
        key: Key,
        owner: NodeId,
        version: Version,
        values: &[f32],
    ) -> Result<(), InstallError> {
        self.0.install_replica(key, owner, version, values)
    }
}

impl Deref for Standalone {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.0
    }
}
