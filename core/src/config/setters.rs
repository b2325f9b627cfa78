//! `Config`'s builder setters: one `with_*` per field, each documented by the field it sets.
//!
//! `Config` is `#[non_exhaustive]`: outside `parma-core` it is built from [`Config::new`] and
//! these setters (or by assigning fields of a `Config` made so), never with a struct literal,
//! so that a new field breaks no caller.

use alloc::sync::Arc;

use hashbrown::HashSet;

#[cfg(doc)]
use super::STORE_SHARDS_MAX;
use super::{Config, Gate, Init, Placement, Technique};
use crate::action_timing::TimingParams;
use crate::ids::{ClusterId, Key};
use crate::layout::Layout;
use crate::sampling::SamplingOptions;
use crate::time::Duration;

impl Config {
    /// Sets the cluster's identity (frames with another one are dropped): [`Config::cluster_id`].
    #[must_use]
    pub fn with_cluster_id(mut self, cluster_id: ClusterId) -> Config {
        self.cluster_id = cluster_id;
        self
    }

    /// Sets the number of nodes in the cluster: [`Config::nodes`]. [`Config::new`] derives
    /// `store_keys_max` and `replicas_max` from the node count and the layout; each of them
    /// that still has the value derived from the old ones is derived again from the new, one
    /// set to another value stays.
    #[must_use]
    pub fn with_nodes(mut self, nodes: u16) -> Config {
        let was = Config::derived_bound(self.nodes, &self.layout);
        self.nodes = nodes;
        self.rederive_bounds(was);
        self
    }

    /// Sets the worker threads per node: [`Config::workers_per_node`].
    #[must_use]
    pub fn with_workers_per_node(mut self, workers_per_node: u16) -> Config {
        self.workers_per_node = workers_per_node;
        self
    }

    /// Sets the keys and their value lengths: [`Config::layout`]. As with
    /// [`Config::with_nodes`], the bounds [`Config::new`] derived from the old layout are
    /// derived again from the new one, unless they were set to other values.
    #[must_use]
    pub fn with_layout(mut self, layout: Layout) -> Config {
        let was = Config::derived_bound(self.nodes, &self.layout);
        self.layout = layout;
        self.rederive_bounds(was);
        self
    }

    /// Sets how parameters are managed: [`Config::technique`].
    #[must_use]
    pub fn with_technique(mut self, technique: Technique) -> Config {
        self.technique = technique;
        self
    }

    /// Sets when workers wait for each other at their clocks (the consistency model): [`Config::gate`].
    #[must_use]
    pub fn with_gate(mut self, gate: Gate) -> Config {
        self.gate = gate;
        self
    }

    /// Sets where keys live before anything moves, and how stores keep their home keys: [`Config::placement`].
    #[must_use]
    pub fn with_placement(mut self, placement: Placement) -> Config {
        self.placement = placement;
        self
    }

    /// Sets the seed for initial values and the nodes' random choices: [`Config::seed`].
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Config {
        self.seed = seed;
        self
    }

    /// Sets the initial values of keys: [`Config::init`].
    #[must_use]
    pub fn with_init(mut self, init: Init) -> Config {
        self.init = init;
        self
    }

    /// Sets the shards of the parameter store (a power of two, at most [`STORE_SHARDS_MAX`]): [`Config::store_shards`].
    #[must_use]
    pub fn with_store_shards(mut self, store_shards: usize) -> Config {
        self.store_shards = store_shards;
        self
    }

    /// Sets the most main copies of keys homed elsewhere this node may hold: [`Config::store_keys_max`].
    #[must_use]
    pub fn with_store_keys_max(mut self, store_keys_max: usize) -> Config {
        self.store_keys_max = store_keys_max;
        self
    }

    /// Sets the slots of the location cache (a power of two): [`Config::location_cache_slots`].
    #[must_use]
    pub fn with_location_cache_slots(mut self, location_cache_slots: usize) -> Config {
        self.location_cache_slots = location_cache_slots;
        self
    }

    /// Sets the most requests this node may have outstanding at once: [`Config::requests_pending_max`].
    #[must_use]
    pub fn with_requests_pending_max(mut self, requests_pending_max: usize) -> Config {
        self.requests_pending_max = requests_pending_max;
        self
    }

    /// Sets the most operations that may wait here for keys on their way: [`Config::waiting_ops_max`].
    #[must_use]
    pub fn with_waiting_ops_max(mut self, waiting_ops_max: usize) -> Config {
        self.waiting_ops_max = waiting_ops_max;
        self
    }

    /// Sets the most forwarding pointers this node keeps: [`Config::pointers_max`].
    #[must_use]
    pub fn with_pointers_max(mut self, pointers_max: usize) -> Config {
        self.pointers_max = pointers_max;
        self
    }

    /// Sets the most frames waiting in the outbox before worker commands get `Busy`: [`Config::outbox_frames_max`].
    #[must_use]
    pub fn with_outbox_frames_max(mut self, outbox_frames_max: usize) -> Config {
        self.outbox_frames_max = outbox_frames_max;
        self
    }

    /// Sets the largest frame, in bytes, sent or accepted: [`Config::frame_len_max`].
    #[must_use]
    pub fn with_frame_len_max(mut self, frame_len_max: usize) -> Config {
        self.frame_len_max = frame_len_max;
        self
    }

    /// Sets the most keys in one message: [`Config::keys_per_message_max`].
    #[must_use]
    pub fn with_keys_per_message_max(mut self, keys_per_message_max: usize) -> Config {
        self.keys_per_message_max = keys_per_message_max;
        self
    }

    /// Sets how long an outstanding request waits before it fails with `Timeout`: [`Config::request_timeout`].
    #[must_use]
    pub fn with_request_timeout(mut self, request_timeout: Duration) -> Config {
        self.request_timeout = request_timeout;
        self
    }

    /// Sets action timing's parameters: [`Config::timing`].
    #[must_use]
    pub fn with_timing(mut self, timing: TimingParams) -> Config {
        self.timing = timing;
        self
    }

    /// Sets how long a key that moved to a node stays there at least: [`Config::relocation_hold`].
    #[must_use]
    pub fn with_relocation_hold(mut self, relocation_hold: Duration) -> Config {
        self.relocation_hold = relocation_hold;
        self
    }

    /// Sets the most sync rounds per second a node starts (`None`: back to back): [`Config::sync_rounds_per_sec_max`].
    #[must_use]
    pub fn with_sync_rounds_per_sec_max(mut self, sync_rounds_per_sec_max: Option<u32>) -> Config {
        self.sync_rounds_per_sec_max = sync_rounds_per_sec_max;
        self
    }

    /// Sets the pause before the next sync round after one that had nothing to send: [`Config::sync_idle_interval`].
    #[must_use]
    pub fn with_sync_idle_interval(mut self, sync_idle_interval: Duration) -> Config {
        self.sync_idle_interval = sync_idle_interval;
        self
    }

    /// Sets the most intents a node keeps: [`Config::intents_max`].
    #[must_use]
    pub fn with_intents_max(mut self, intents_max: usize) -> Config {
        self.intents_max = intents_max;
        self
    }

    /// Sets the most keys in all the intents a node keeps: [`Config::intent_keys_max`].
    #[must_use]
    pub fn with_intent_keys_max(mut self, intent_keys_max: usize) -> Config {
        self.intent_keys_max = intent_keys_max;
        self
    }

    /// Sets the most replicas a node holds: [`Config::replicas_max`].
    #[must_use]
    pub fn with_replicas_max(mut self, replicas_max: usize) -> Config {
        self.replicas_max = replicas_max;
        self
    }

    /// Sets the keys replicated on every node under [`Technique::MultiTechnique`]: [`Config::hot_keys`].
    #[must_use]
    pub fn with_hot_keys(mut self, hot_keys: Arc<HashSet<Key>>) -> Config {
        self.hot_keys = hot_keys;
        self
    }

    /// Sets the sampling manager's options: [`Config::sampling`].
    #[must_use]
    pub fn with_sampling(mut self, sampling: SamplingOptions) -> Config {
        self.sampling = sampling;
        self
    }
}
