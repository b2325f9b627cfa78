//! Configuration of one node. Every queue and table has a bound here.

use crate::error::ConfigError;
use crate::ids::{ClusterId, NodeId};
use crate::layout::Layout;
use crate::time::Duration;

/// The most nodes a cluster may have.
pub const NODES_MAX: u16 = 4096;

/// How parameters are managed. Chosen per run; all nodes of a cluster must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Technique {
    /// Classic parameter server: every key stays on its home node; `localize` does nothing.
    StaticPartitioning,
    /// Lapse: keys move to the node that calls `localize` for them.
    #[default]
    Relocation,
}

/// The value a key has before anything was written to it.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[non_exhaustive]
pub enum Init {
    /// All zeros.
    #[default]
    Zero,
    /// Uniform in `[-scale, scale)`, a deterministic function of (seed, key, element).
    Uniform { scale: f32 },
}

/// Configuration of one node.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster's identity; frames with another one are dropped.
    pub cluster_id: ClusterId,
    /// Number of nodes in the cluster.
    pub nodes: u16,
    /// Worker threads per node.
    pub workers_per_node: u16,
    /// Keys and their value lengths.
    pub layout: Layout,
    /// How parameters are managed.
    pub technique: Technique,
    /// Seed for initial values and for the nodes' random choices (combined with the node id).
    pub seed: u64,
    /// Initial values of keys.
    pub init: Init,
    /// Shards of the parameter store; a power of two.
    pub store_shards: usize,
    /// Most keys this node may hold (main copies plus incoming). Must cover the keys homed here.
    pub store_keys_max: usize,
    /// Slots of the location cache (direct-mapped); a power of two.
    pub location_cache_slots: usize,
    /// Most requests this node may have outstanding at once.
    pub requests_pending_max: usize,
    /// Most operations that may wait at this node for keys that are on their way here.
    pub waiting_ops_max: usize,
    /// Most frames waiting in the outbox before worker commands get `Busy`.
    pub outbox_frames_max: usize,
    /// Largest frame, in bytes, sent or accepted. Larger batches are split.
    pub frame_len_max: usize,
    /// Most keys in one message (requests are split into several messages above this).
    pub keys_per_message_max: usize,
    /// An outstanding request fails with `Timeout` after this long.
    pub request_timeout: Duration,
}

impl Config {
    /// A configuration with sensible bounds for `nodes` nodes, `workers_per_node` workers each,
    /// and `layout`.
    pub fn new(nodes: u16, workers_per_node: u16, layout: Layout) -> Config {
        let keys_homed = layout.key_end() / u64::from(nodes.max(1)) + 1;
        Config {
            cluster_id: ClusterId(0x7061_726d),
            nodes,
            workers_per_node,
            layout,
            technique: Technique::default(),
            seed: 0x5eed,
            init: Init::Zero,
            store_shards: 256,
            store_keys_max: usize::try_from(keys_homed.saturating_mul(4)).unwrap_or(usize::MAX),
            location_cache_slots: 1 << 16,
            requests_pending_max: 1 << 14,
            waiting_ops_max: 1 << 16,
            outbox_frames_max: 1 << 14,
            frame_len_max: 16 << 20,
            keys_per_message_max: 1 << 14,
            request_timeout: Duration::from_secs(60),
        }
    }

    /// Checks every field; `me` is the node this configuration is for.
    pub fn validate(&self, me: NodeId) -> Result<(), ConfigError> {
        if self.nodes == 0 || self.nodes > NODES_MAX {
            return Err(ConfigError::NodeCount { nodes: self.nodes });
        }
        if me.0 >= self.nodes {
            return Err(ConfigError::NodeOutOfRange { node: me });
        }
        if self.workers_per_node == 0 {
            return Err(ConfigError::NoWorkers);
        }
        let pow2 = |n: usize, name| {
            if n == 0 || !n.is_power_of_two() {
                Err(ConfigError::Bound { name })
            } else {
                Ok(())
            }
        };
        pow2(self.store_shards, "store_shards")?;
        pow2(self.location_cache_slots, "location_cache_slots")?;
        let positive = |n: usize, name| if n == 0 { Err(ConfigError::Bound { name }) } else { Ok(()) };
        positive(self.requests_pending_max, "requests_pending_max")?;
        positive(self.waiting_ops_max, "waiting_ops_max")?;
        positive(self.outbox_frames_max, "outbox_frames_max")?;
        positive(self.keys_per_message_max, "keys_per_message_max")?;
        // A frame must hold at least one key with the longest value.
        let one = crate::wire::HEADER_LEN + 64 + 16 + 4 * self.layout.len_max();
        if self.frame_len_max < one || self.frame_len_max > u32::MAX as usize {
            return Err(ConfigError::Bound { name: "frame_len_max" });
        }
        if self.request_timeout.as_micros() == 0 {
            return Err(ConfigError::Bound { name: "request_timeout" });
        }
        Ok(())
    }
}
