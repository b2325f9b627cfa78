//! What a trace needs from a cluster: one implementation per way of running one.

use parma_core::sampling::SamplingStats;
use std::sync::Arc;

use parma_core::{
    Clock, Config, Conformity, DistId, Distribution, Duration, Gate, Key, Layout, NodeId, OpError, Placement,
    SampleHandle, SamplingOptions, Technique, WorkerId,
};

pub use super::ckpt::CheckpointOp;
pub use super::gated::GatedSteps;

/// The cluster a trace asks for.
#[derive(Clone, Debug)]
pub struct Setup {
    pub nodes: u16,
    pub workers: u16,
    pub layout: Layout,
    pub technique: Technique,
    /// Where keys are homed.
    pub placement: Placement,
    /// Pool size, use frequency and replacement of the sampling manager.
    pub sampling: SamplingOptions,
    /// The keys replicated on every node under [`Technique::MultiTechnique`].
    pub hot_keys: Vec<Key>,
    /// How long a key that moved stays put at least; `None` keeps `Config`'s default.
    pub relocation_hold: Option<Duration>,
    /// The clock gate workers wait at when they advance their clocks.
    pub gate: Gate,
}

impl Setup {
    /// The configuration every node of the cluster runs with.
    pub fn config(&self) -> Config {
        let mut cfg = Config::new(self.nodes, self.workers, self.layout.clone());
        cfg.technique = self.technique;
        cfg.placement = self.placement;
        cfg.sampling = self.sampling;
        cfg.hot_keys = Arc::new(self.hot_keys.iter().copied().collect());
        cfg.gate = self.gate;
        if let Some(hold) = self.relocation_hold {
            cfg.relocation_hold = hold;
        }
        cfg
    }
}

/// What one worker's part of a `barrier` ended with, by node and worker.
pub type BarrierOut = Vec<(NodeId, WorkerId, Result<(), OpError>)>;

/// What one `pull-sample` returned: keys, their values (concatenated), and whether each was
/// local.
pub type SampleOut = (Vec<Key>, Vec<f32>, Vec<bool>);

/// Runs trace commands on a cluster. Each call returns when the operation has completed.
pub trait Executor {
    /// The cluster this executor runs.
    fn setup(&self) -> &Setup;
    /// Pulls `keys` as `worker` of `node`: the values, and for each key whether it was local.
    fn pull(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
    ) -> Result<(Vec<f32>, Vec<bool>), OpError>;
    /// Adds (`set == false`) or sets `vals` of `keys`.
    fn write(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        set: bool,
        keys: &[Key],
        vals: &[f32],
    ) -> Result<(), OpError>;
    /// Moves `keys` to `node`.
    fn localize(&mut self, node: NodeId, worker: WorkerId, keys: &[Key]) -> Result<(), OpError>;
    /// The running nodes (not stopped by `kill`) that hold the main copy of `key` now.
    fn owners(&mut self, key: Key) -> Vec<NodeId>;
    /// The running nodes that hold a filled replica of `key` now.
    fn replicas(&mut self, key: Key) -> Vec<NodeId>;
    /// `worker` of `node` will access `keys` while its clock is in `[start, end)`.
    fn intent(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError>;
    /// Advances the clock of `worker` of `node` by `by`; returns the new clock.
    fn advance(&mut self, node: NodeId, worker: WorkerId, by: u64) -> Result<Clock, OpError>;
    /// Returns after two more sync rounds of `node`.
    fn wait_sync(&mut self, node: NodeId, worker: WorkerId) -> Result<(), OpError>;
    /// Lets the cluster settle: time passes beyond the relocation hold, then every running
    /// node completes two more sync rounds, twice over, one node after the other.
    fn settle(&mut self) -> Result<(), OpError>;
    /// Every worker of every node adds `each` to every element of every key, `rounds` times,
    /// concurrently.
    fn concurrent_push(&mut self, keys: &[Key], rounds: u32, each: f32) -> Result<(), OpError>;
    /// Every worker of every node runs `spec.steps` steps at once: pull the keys and check the
    /// gate's bound on what it read, push `spec.each` to every key, advance the clock (waiting
    /// at the gate). Then every worker reads the final sums, which must be exact, and finishes
    /// (finalize, or retire on the simulator): no worker command may follow on this cluster.
    /// The sums one worker read, or a message naming the worker, clock, key, value and bound
    /// of a read that broke the gate's guarantee, or the operation that failed.
    fn gated_steps(&mut self, spec: &GatedSteps) -> Result<Vec<f32>, String>;
    /// Keys forwarded by all nodes so far (a node that did not hold a key passed a request on).
    fn keys_forwarded(&mut self) -> u64;
    /// Every worker of every node enters the cluster-wide barrier at once; returns how each
    /// one's barrier ended, in node and worker order. A stopped node's workers are included
    /// (their barrier fails at once).
    fn barrier(&mut self) -> BarrierOut;
    /// Stops `node` for good, as a crash would, and returns once the node has stopped and
    /// every other running node has been told that it failed. An executor whose transport
    /// cannot stop a node keeps this default; its transport skips the traces that use it.
    fn kill(&mut self, _node: NodeId) -> Result<(), OpError> {
        Err(OpError::InvalidArgument)
    }
    /// Every worker of every node calls `Worker::checkpoint` (`op`) or `Worker::restore` on
    /// `dir` at once ([`super::ckpt`]); `Ok`, or every distinct error (a `CheckpointError`'s
    /// Display) in node and worker order. An executor without runtime workers keeps this
    /// default, which says so; its transport skips the traces that use it.
    fn checkpoint(&mut self, _op: CheckpointOp, _dir: &std::path::Path) -> Result<(), String> {
        Err(super::ckpt::UNSUPPORTED.into())
    }
    /// Registers `dist` under `level` on every node, in node order; returns its id.
    fn register(&mut self, _dist: &Distribution, _level: Conformity) -> Result<DistId, OpError> {
        Err(OpError::Closed)
    }
    /// Prepares `n` samples of `dist` for `worker` of `node`, used in clocks `[start, end)`.
    fn prepare_sample(
        &mut self,
        _node: NodeId,
        _worker: WorkerId,
        _dist: DistId,
        _n: u64,
        _window: (Clock, Clock),
    ) -> Result<SampleHandle, OpError> {
        Err(OpError::Closed)
    }
    /// Pulls the next `count` samples of `handle`.
    fn pull_sample(
        &mut self,
        _node: NodeId,
        _worker: WorkerId,
        _handle: SampleHandle,
        _count: usize,
    ) -> Result<SampleOut, OpError> {
        Err(OpError::Closed)
    }
    /// Ends `handle`.
    fn finish_sample(
        &mut self,
        _node: NodeId,
        _worker: WorkerId,
        _handle: SampleHandle,
    ) -> Result<(), OpError> {
        Err(OpError::Closed)
    }
    /// The sampler counters of `worker` of `node`.
    fn sampling_stats(&mut self, _node: NodeId, _worker: WorkerId) -> Result<SamplingStats, OpError> {
        Err(OpError::Closed)
    }
    /// Shuts the cluster down cleanly; reports anything left over.
    fn finish(&mut self) -> Result<(), String>;
}
