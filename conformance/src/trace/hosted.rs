//! One node of a trace's cluster with its workers: what an [`Executor`](super::Executor) does to
//! a single node, shared by the executor that runs every node in this process
//! ([`RuntimeExecutor`](super::RuntimeExecutor)) and the agent that runs one node per process
//! ([`crate::process`]).

use std::path::Path;
use std::thread;
use std::time::Duration as StdDuration;

use parma_core::sampling::SamplingStats;
use parma_core::{
    Clock, Config, Conformity, DistId, Distribution, Key, NodeId, OpError, SampleHandle, Transport, WorkerId,
};
use parma_runtime::{DriverHost, NodeRuntime, Options, Worker};

use super::ckpt::{self, CheckpointOp};
use super::exec::{BarrierOut, SampleOut};
use super::gated::{self, GatedSteps};

/// Longest wait of a `barrier` command (the runtime's default is for real training runs).
pub const BARRIER_TIMEOUT: StdDuration = StdDuration::from_secs(60);

/// The runtime's options for a trace's node.
fn options() -> Options {
    let mut opts = Options::default();
    opts.barrier_timeout = Some(BARRIER_TIMEOUT);
    opts
}

/// A node's runtime and its workers, driven one trace command at a time.
pub struct HostedNode {
    node: NodeRuntime,
    /// Empty once [`HostedNode::finalize`] ran.
    workers: Vec<Worker>,
}

impl HostedNode {
    /// Starts node `me` of a cluster running `cfg` on `transport`.
    pub fn start<T: Transport + Send + 'static>(
        cfg: Config,
        me: NodeId,
        transport: T,
    ) -> Result<HostedNode, String> {
        let (node, workers) =
            NodeRuntime::start_with(cfg, me, transport, options()).map_err(|e| e.to_string())?;
        Ok(HostedNode { node, workers })
    }

    /// Starts node `me` of a cluster running `cfg` on `transport`, its driver run by `host`
    /// (the transport's own thread; see `parma_runtime::host`).
    pub fn start_on<T: Transport + Send + 'static, H: DriverHost + 'static>(
        cfg: Config,
        me: NodeId,
        transport: T,
        host: H,
    ) -> Result<HostedNode, String> {
        let (node, workers) =
            NodeRuntime::start_hosted(cfg, me, transport, host, options()).map_err(|e| e.to_string())?;
        Ok(HostedNode { node, workers })
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.node.id()
    }

    /// Whether the node has stopped (shut down, or its transport failed).
    pub fn is_closed(&self) -> bool {
        self.node.is_closed()
    }

    /// How many peers this node has been told failed.
    pub fn peers_failed(&self) -> u64 {
        self.node.stats().driver.peers_failed
    }

    /// Keys this node forwarded so far (it did not hold a key and passed a request on).
    pub fn keys_forwarded(&self) -> u64 {
        self.node.stats().node.keys_forwarded
    }

    /// Whether this node holds the main copy of `key` now.
    pub fn holds(&self, key: Key) -> bool {
        self.node.inspect().holds(key)
    }

    /// Whether this node holds a filled replica of `key` now.
    pub fn has_replica(&self, key: Key) -> bool {
        self.node.inspect().has_replica(key)
    }

    fn worker(&mut self, worker: WorkerId) -> Result<&mut Worker, OpError> {
        self.workers.get_mut(worker.index()).ok_or(OpError::InvalidArgument)
    }

    /// Pulls `keys` as `worker`: the values, and for each key whether it was local.
    pub fn pull(&mut self, worker: WorkerId, keys: &[Key]) -> Result<(Vec<f32>, Vec<bool>), OpError> {
        let total =
            self.node.config().layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        // Which keys are here: nothing else runs between trace commands, so nothing moves
        // between this look and the pull; the worker's own counters must agree.
        let store = self.node.inspect();
        let local: Vec<bool> = keys.iter().map(|k| store.is_local(*k)).collect();
        let w = self.worker(worker)?;
        let before = w.stats().keys_pulled_local;
        let mut vals = vec![0.0; total];
        w.pull(keys, &mut vals)?;
        let counted = w.stats().keys_pulled_local - before;
        if counted != local.iter().filter(|l| **l).count() as u64 {
            // Shows up in the trace's output as a mismatch.
            return Err(OpError::InvalidArgument);
        }
        Ok((vals, local))
    }

    /// Adds (`set == false`) or sets `vals` of `keys` as `worker`, and waits for it.
    pub fn write(&mut self, worker: WorkerId, set: bool, keys: &[Key], vals: &[f32]) -> Result<(), OpError> {
        let w = self.worker(worker)?;
        let t = if set { w.set(keys, vals)? } else { w.push(keys, vals)? };
        w.wait(t)
    }

    /// Moves `keys` here for `worker`, and waits for it.
    pub fn localize(&mut self, worker: WorkerId, keys: &[Key]) -> Result<(), OpError> {
        let w = self.worker(worker)?;
        let t = w.localize(keys)?;
        w.wait(t)
    }

    /// `worker` will access `keys` while its clock is in `[start, end)`.
    pub fn intent(
        &mut self,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        self.worker(worker)?.intent(keys, start, end)
    }

    /// Advances `worker`'s clock `by` times; returns the clock.
    pub fn advance(&mut self, worker: WorkerId, by: u64) -> Result<Clock, OpError> {
        let w = self.worker(worker)?;
        for _ in 0..by {
            w.advance_clock()?;
        }
        Ok(w.clock())
    }

    /// Returns once the node completed two more sync rounds.
    pub fn wait_sync(&mut self, worker: WorkerId) -> Result<(), OpError> {
        self.worker(worker)?.wait_sync()
    }

    /// Every worker of this node pushes `each` to every element of `keys`, `rounds` times, all
    /// at once.
    pub fn concurrent_push(&mut self, keys: &[Key], rounds: u32, each: f32) -> Result<(), OpError> {
        let total =
            self.node.config().layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        let vals = vec![each; total];
        let results: Vec<Result<(), OpError>> = thread::scope(|s| {
            let handles: Vec<_> = self
                .workers
                .iter_mut()
                .map(|w| {
                    let vals = &vals;
                    s.spawn(move || {
                        let mut tickets = Vec::new();
                        for _ in 0..rounds {
                            tickets.push(w.push(keys, vals)?);
                        }
                        tickets.into_iter().try_for_each(|t| w.wait(t))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(Err(OpError::Closed))).collect()
        });
        results.into_iter().collect()
    }

    /// This node's part of a `gated-steps` ([`gated`]): every worker of this node, all at once,
    /// runs the steps, reads the final sums and finalizes (a worker that failed is dropped
    /// instead, which retires it: no gate waits for it). The sums one worker read, or every
    /// failure.
    pub fn gated_steps(&mut self, spec: &GatedSteps) -> Result<Vec<f32>, String> {
        let cfg = self.node.config().clone();
        let workers = std::mem::take(&mut self.workers);
        if workers.is_empty() {
            return Err(gated::FINISHED.into());
        }
        let results: Vec<Result<Vec<f32>, String>> = thread::scope(|s| {
            let handles: Vec<_> = workers
                .into_iter()
                .map(|mut w| {
                    let cfg = &cfg;
                    let who = format!("n{} w{}", w.node(), w.id());
                    let name = who.clone();
                    let h = s.spawn(move || match steps_of(&mut w, cfg, spec) {
                        // A failed worker is dropped, which retires it.
                        Err(failed) => Err(failed),
                        Ok(checked) => {
                            let done = w.finalize().map_err(|e| format!("{name}: finalize: {e}"));
                            checked.and_then(|sums| done.map(|()| sums))
                        }
                    });
                    (who, h)
                })
                .collect();
            handles
                .into_iter()
                .map(|(who, h)| h.join().unwrap_or_else(|_| Err(format!("{who}: panicked"))))
                .collect()
        });
        gated::combine(results)
    }

    /// This node's part of a `checkpoint` or `restore` ([`ckpt`]): every worker of this node
    /// calls it on `dir` at once (the other nodes' workers must call it meanwhile); how each
    /// one's call ended, in worker order.
    pub fn checkpoint(&mut self, op: CheckpointOp, dir: &Path) -> Vec<Result<(), String>> {
        if self.workers.is_empty() {
            // They finished in a `gated-steps`.
            return vec![Err(gated::FINISHED.into()); usize::from(self.node.config().workers_per_node)];
        }
        thread::scope(|s| {
            let handles: Vec<_> = self
                .workers
                .iter_mut()
                .map(|w| (format!("n{} w{}", w.node(), w.id()), s.spawn(move || ckpt::call(w, op, dir))))
                .collect();
            handles
                .into_iter()
                .map(|(who, h)| h.join().unwrap_or_else(|_| Err(format!("{who}: panicked"))))
                .collect()
        })
    }

    /// Registers `dist` under `level` through worker 0; returns its id.
    pub fn register(&mut self, dist: &Distribution, level: Conformity) -> Result<DistId, OpError> {
        self.worker(WorkerId(0))?.register_distribution(dist.clone(), level)
    }

    /// Prepares `n` samples of `dist` for `worker`, used in clocks `[start, end)`.
    pub fn prepare_sample(
        &mut self,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        (start, end): (Clock, Clock),
    ) -> Result<SampleHandle, OpError> {
        self.worker(worker)?.prepare_sample(dist, n, start, end)
    }

    /// Pulls the next `count` samples of `handle` as `worker`.
    pub fn pull_sample(
        &mut self,
        worker: WorkerId,
        handle: SampleHandle,
        count: usize,
    ) -> Result<SampleOut, OpError> {
        let store = self.node.inspect();
        let len = self.node.config().layout.uniform_len().unwrap_or(1);
        let w = self.worker(worker)?;
        let before = (w.stats().keys_pulled_local, w.stats().keys_pulled_remote);
        let mut keys = vec![Key(0); count];
        let mut vals = vec![0.0; count * len];
        w.pull_sample(handle, &mut keys, &mut vals)?;
        // Nothing moves between trace commands: what is local now was local in the pull, and
        // the worker's own counters must agree (a repeated remote key is fetched once).
        let local: Vec<bool> = keys.iter().map(|k| store.is_local(*k)).collect();
        let counted = w.stats().keys_pulled_local - before.0;
        let remote = crate::distinct(&keys).iter().filter(|k| !store.is_local(**k)).count();
        if counted != local.iter().filter(|l| **l).count() as u64
            || w.stats().keys_pulled_remote - before.1 != remote as u64
        {
            return Err(OpError::InvalidArgument);
        }
        Ok((keys, vals, local))
    }

    /// Ends `handle` of `worker`.
    pub fn finish_sample(&mut self, worker: WorkerId, handle: SampleHandle) -> Result<(), OpError> {
        self.worker(worker)?.finish_sample(handle)
    }

    /// The sampler counters of `worker`.
    pub fn sampling_stats(&mut self, worker: WorkerId) -> Result<SamplingStats, OpError> {
        Ok(self.worker(worker)?.sampling_stats())
    }

    /// Every worker of this node enters the cluster-wide barrier at once (the other nodes'
    /// workers must enter it meanwhile); how each one's ended, in worker order.
    pub fn barrier(&mut self) -> BarrierOut {
        thread::scope(|s| {
            let handles: Vec<_> =
                self.workers.iter_mut().map(|w| ((w.node(), w.id()), s.spawn(move || w.barrier()))).collect();
            handles
                .into_iter()
                .map(|((node, worker), h)| (node, worker, h.join().unwrap_or(Err(OpError::Closed))))
                .collect()
        })
    }

    /// Finalizes every worker of this node at once (their last barriers need the other nodes'
    /// workers finalizing meanwhile); how each one's ended, in worker order.
    pub fn finalize(&mut self) -> Vec<Result<(), OpError>> {
        if self.workers.is_empty() {
            // They finished in a `gated-steps` (which reported how).
            return vec![Ok(()); usize::from(self.node.config().workers_per_node)];
        }
        let workers = std::mem::take(&mut self.workers);
        thread::scope(|s| {
            let handles: Vec<_> = workers.into_iter().map(|w| s.spawn(move || w.finalize())).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(Err(OpError::Closed))).collect()
        })
    }

    /// Shuts the node down cleanly (after [`HostedNode::finalize`]); errs if it dropped or
    /// rejected a message meanwhile.
    pub fn shutdown(self) -> Result<(), String> {
        let stats = self.node.shutdown().map_err(|e| format!("shutdown: {e}"))?;
        if stats.node.frames_rejected + stats.node.messages_rejected > 0 {
            return Err(format!("node dropped or rejected messages: {:?}", stats.node));
        }
        Ok(())
    }
}

/// One worker's part of a `gated-steps`: the steps, then the final sums it read (`Ok(Err)`:
/// what it read broke a check), or the operation that failed (`Err`). A read that broke the
/// gate's guarantee does not stop the worker (the others would wait for it at the gate and
/// the barriers); it is reported once the worker is through.
fn steps_of(w: &mut Worker, cfg: &Config, spec: &GatedSteps) -> Result<Result<Vec<f32>, String>, String> {
    let who = (w.node(), w.id());
    let op = |what: &str, e: OpError| format!("n{} w{}: {what}: {e}", who.0, who.1);
    let workers = u64::from(cfg.nodes) * u64::from(cfg.workers_per_node);
    let total = cfg.layout.total_len(&spec.keys).map_err(|k| format!("key {k} outside layout"))?;
    let start = w.clock();
    // Under SparseSSP the intent declares the keys (from p clocks on) under every technique.
    if cfg.technique.uses_rounds() || cfg.gate.speculation() > 0 {
        let end = Clock(start.0 + u64::from(spec.steps) + 1);
        w.intent(&spec.keys, start, end).map_err(|e| op("intent", e))?;
    }
    let add = vec![spec.each; total];
    let mut vals = vec![0.0; total];
    let mut tickets = Vec::new();
    let mut broken = None;
    for step in 0..u64::from(spec.steps) {
        if spec.is_slow(who.0, who.1) {
            thread::sleep(gated::SLOW_STEP);
        }
        w.pull(&spec.keys, &mut vals).map_err(|e| op("pull", e))?;
        let at = (step, w.clock().0);
        if let Err(e) =
            gated::check_read((cfg.gate, cfg.technique), spec, &cfg.layout, workers, who, at, &vals)
        {
            broken.get_or_insert(e);
        }
        tickets.push(w.push(&spec.keys, &add).map_err(|e| op("push", e))?);
        w.advance_clock().map_err(|e| op(&format!("gate at clock {}", w.clock().0), e))?;
    }
    tickets.into_iter().try_for_each(|t| w.wait(t)).map_err(|e| op("push", e))?;
    // Every push is in: every delta reaches its owner, then every replica hears from its owner.
    for _ in 0..2 {
        w.barrier().map_err(|e| op("barrier", e))?;
        w.wait_sync().map_err(|e| op("wait-sync", e))?;
    }
    w.pull(&spec.keys, &mut vals).map_err(|e| op("pull", e))?;
    Ok(match broken {
        Some(e) => Err(e),
        None => gated::check_final(spec, &cfg.layout, workers, who, &vals).map(|()| vals),
    })
}
