//! Runs traces through `parma-runtime` over any [`Transport`]: real driver threads, real
//! `Worker` handles, the transport under test, every node in this process.

use std::path::Path;
use std::thread;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use parma_core::sampling::SamplingStats;
use parma_core::{
    Clock, Conformity, DistId, Distribution, Duration, Key, NodeId, OpError, SampleHandle, Transport,
    WorkerId,
};

use super::exec::{BarrierOut, CheckpointOp, Executor, GatedSteps, SampleOut, Setup};
use super::hosted::HostedNode;
use parma_runtime::DriverHost;

/// Longest wait of a `kill` command for the node to stop and every other node to hear of it.
pub const KILL_WAIT: StdDuration = StdDuration::from_secs(30);
/// Pause between two looks at the nodes while a `kill` waits.
const KILL_POLL: StdDuration = StdDuration::from_millis(1);

/// Stops a node of the transport under test for good, as a crash would.
pub type KillFn = Box<dyn FnMut(NodeId) + Send>;

/// A trace executor on a cluster of runtimes, one per transport endpoint.
pub struct RuntimeExecutor {
    setup: Setup,
    nodes: Vec<HostedNode>,
    hold: Duration,
    kill: Option<KillFn>,
    /// Per node: stopped by `kill`.
    killed: Vec<bool>,
}

impl RuntimeExecutor {
    /// Starts one runtime per endpoint (`transports[i]` is node `i`) for `setup`.
    pub fn new<T: Transport + Send + 'static>(
        setup: &Setup,
        transports: Vec<T>,
    ) -> Result<RuntimeExecutor, String> {
        RuntimeExecutor::start_each(setup, transports, HostedNode::start)
    }

    /// [`RuntimeExecutor::new`] with each node's driver run by its host: `ends[i]` is node
    /// `i`'s transport and the host of its driver (`parma_runtime::host`).
    pub fn new_hosted<T, H>(setup: &Setup, ends: Vec<(T, H)>) -> Result<RuntimeExecutor, String>
    where
        T: Transport + Send + 'static,
        H: DriverHost + 'static,
    {
        RuntimeExecutor::start_each(setup, ends, |cfg, me, (t, h)| HostedNode::start_on(cfg, me, t, h))
    }

    /// Node `i` started by `start` on `ends[i]`.
    fn start_each<E>(
        setup: &Setup,
        ends: Vec<E>,
        start: impl Fn(parma_core::Config, NodeId, E) -> Result<HostedNode, String>,
    ) -> Result<RuntimeExecutor, String> {
        if ends.len() != usize::from(setup.nodes) {
            return Err(format!("{} endpoints for {} nodes", ends.len(), setup.nodes));
        }
        let cfg = setup.config();
        let nodes = ends
            .into_iter()
            .enumerate()
            .map(|(i, e)| start(cfg.clone(), NodeId(i as u16), e))
            .collect::<Result<Vec<_>, _>>()?;
        let killed = vec![false; nodes.len()];
        Ok(RuntimeExecutor { setup: setup.clone(), nodes, hold: cfg.relocation_hold, kill: None, killed })
    }

    /// Lets the `kill` command stop nodes with `kill`, which must make the node's transport
    /// stop as a crash would: the node's own transport fails, and every other node's reports
    /// `PeerFailed` for it. Without it, `kill` fails and the transport skips the traces
    /// that use it.
    pub fn with_kill(mut self, kill: impl FnMut(NodeId) + Send + 'static) -> RuntimeExecutor {
        self.kill = Some(Box::new(kill));
        self
    }

    /// The nodes not stopped by `kill`.
    fn running(&self) -> impl Iterator<Item = &HostedNode> {
        self.nodes.iter().zip(&self.killed).filter(|(_, k)| !**k).map(|(n, _)| n)
    }

    /// Whether every running node has been told of `failed` failed peers.
    fn all_told(&self, failed: u64) -> bool {
        self.running().all(|n| n.peers_failed() >= failed)
    }

    fn node(&mut self, node: NodeId) -> Result<&mut HostedNode, OpError> {
        self.nodes.get_mut(node.index()).ok_or(OpError::InvalidArgument)
    }
}

/// What `settle` does on any cluster: wait twice the relocation hold, then have every
/// running node, one after the other, complete two more sync rounds, twice over.
pub(crate) fn settle_with(
    hold: Duration,
    running: &[NodeId],
    mut wait_sync: impl FnMut(NodeId) -> Result<(), OpError>,
) -> Result<(), OpError> {
    thread::sleep(StdDuration::from_micros(2 * hold.as_micros()));
    for _ in 0..2 {
        for n in running {
            wait_sync(*n)?;
        }
    }
    Ok(())
}

impl Executor for RuntimeExecutor {
    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn pull(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
    ) -> Result<(Vec<f32>, Vec<bool>), OpError> {
        self.node(node)?.pull(worker, keys)
    }

    fn write(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        set: bool,
        keys: &[Key],
        vals: &[f32],
    ) -> Result<(), OpError> {
        self.node(node)?.write(worker, set, keys, vals)
    }

    fn localize(&mut self, node: NodeId, worker: WorkerId, keys: &[Key]) -> Result<(), OpError> {
        self.node(node)?.localize(worker, keys)
    }

    fn owners(&mut self, key: Key) -> Vec<NodeId> {
        self.running().filter(|n| n.holds(key)).map(|n| n.id()).collect()
    }

    fn replicas(&mut self, key: Key) -> Vec<NodeId> {
        self.running().filter(|n| n.has_replica(key)).map(|n| n.id()).collect()
    }

    fn intent(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        self.node(node)?.intent(worker, keys, start, end)
    }

    fn advance(&mut self, node: NodeId, worker: WorkerId, by: u64) -> Result<Clock, OpError> {
        self.node(node)?.advance(worker, by)
    }

    fn wait_sync(&mut self, node: NodeId, worker: WorkerId) -> Result<(), OpError> {
        self.node(node)?.wait_sync(worker)
    }

    fn settle(&mut self) -> Result<(), OpError> {
        let running: Vec<NodeId> = self.running().map(|n| n.id()).collect();
        settle_with(self.hold, &running, |n| self.wait_sync(n, WorkerId(0)))
    }

    fn concurrent_push(&mut self, keys: &[Key], rounds: u32, each: f32) -> Result<(), OpError> {
        let results: Vec<Result<(), OpError>> = thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter_mut()
                .map(|n| s.spawn(move || n.concurrent_push(keys, rounds, each)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(Err(OpError::Closed))).collect()
        });
        results.into_iter().collect()
    }

    fn gated_steps(&mut self, spec: &GatedSteps) -> Result<Vec<f32>, String> {
        // Every worker of every node takes part: a stopped node's would never come.
        if let Some(i) = self.killed.iter().position(|k| *k) {
            return Err(format!("n{i} is stopped"));
        }
        let results: Vec<Result<Vec<f32>, String>> = thread::scope(|s| {
            let handles: Vec<_> =
                self.nodes.iter_mut().map(|n| (n.id(), s.spawn(move || n.gated_steps(spec)))).collect();
            handles
                .into_iter()
                .map(|(id, h)| h.join().unwrap_or_else(|_| Err(format!("n{id}: panicked"))))
                .collect()
        });
        super::gated::combine(results)
    }

    fn checkpoint(&mut self, op: CheckpointOp, dir: &Path) -> Result<(), String> {
        // Every worker of every node takes part: a stopped node's would never come.
        if let Some(i) = self.killed.iter().position(|k| *k) {
            return Err(format!("n{i} is stopped"));
        }
        let results: Vec<Vec<Result<(), String>>> = thread::scope(|s| {
            let handles: Vec<_> =
                self.nodes.iter_mut().map(|n| (n.id(), s.spawn(move || n.checkpoint(op, dir)))).collect();
            handles
                .into_iter()
                .map(|(id, h)| h.join().unwrap_or_else(|_| vec![Err(format!("n{id}: panicked"))]))
                .collect()
        });
        super::ckpt::combine(results.into_iter().flatten())
    }

    fn register(&mut self, dist: &Distribution, level: Conformity) -> Result<DistId, OpError> {
        let mut ids = Vec::new();
        for n in &mut self.nodes {
            ids.push(n.register(dist, level)?);
        }
        ids.first().copied().ok_or(OpError::InvalidArgument)
    }

    fn prepare_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        window: (Clock, Clock),
    ) -> Result<SampleHandle, OpError> {
        self.node(node)?.prepare_sample(worker, dist, n, window)
    }

    fn pull_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        handle: SampleHandle,
        count: usize,
    ) -> Result<SampleOut, OpError> {
        self.node(node)?.pull_sample(worker, handle, count)
    }

    fn finish_sample(&mut self, node: NodeId, worker: WorkerId, handle: SampleHandle) -> Result<(), OpError> {
        self.node(node)?.finish_sample(worker, handle)
    }

    fn sampling_stats(&mut self, node: NodeId, worker: WorkerId) -> Result<SamplingStats, OpError> {
        self.node(node)?.sampling_stats(worker)
    }

    fn keys_forwarded(&mut self) -> u64 {
        self.nodes.iter().map(|n| n.keys_forwarded()).sum()
    }

    fn barrier(&mut self) -> BarrierOut {
        thread::scope(|s| {
            let handles: Vec<_> = self.nodes.iter_mut().map(|n| s.spawn(move || n.barrier())).collect();
            let mut out = Vec::new();
            for (n, h) in handles.into_iter().enumerate() {
                match h.join() {
                    Ok(r) => out.extend(r),
                    // A node's barrier thread panicked: its workers' barriers did not end well.
                    Err(_) => out.extend(
                        (0..self.setup.workers)
                            .map(|w| (NodeId(n as u16), WorkerId(w), Err(OpError::Closed))),
                    ),
                }
            }
            out
        })
    }

    fn kill(&mut self, node: NodeId) -> Result<(), OpError> {
        let i = node.index();
        if i >= self.nodes.len() {
            return Err(OpError::InvalidArgument);
        }
        if self.killed[i] {
            return Err(OpError::Closed);
        }
        let Some(kill) = self.kill.as_mut() else { return Err(OpError::InvalidArgument) };
        kill(node);
        self.killed[i] = true;
        let failed = self.killed.iter().filter(|k| **k).count() as u64;
        let deadline = StdInstant::now() + KILL_WAIT;
        while !(self.nodes[i].is_closed() && self.all_told(failed)) {
            if StdInstant::now() >= deadline {
                return Err(OpError::Timeout);
            }
            thread::sleep(KILL_POLL);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        let killed = std::mem::take(&mut self.killed);
        let stopped = |n: NodeId| killed.get(n.index()).copied().unwrap_or(false);
        let mut nodes = std::mem::take(&mut self.nodes);
        // A stopped node's workers have nothing left to finish; its driver stopped when its
        // transport failed, and dropping it joins the thread.
        nodes.retain(|n| !stopped(n.id()));
        let results: Vec<Vec<Result<(), OpError>>> = thread::scope(|s| {
            let handles: Vec<_> = nodes.iter_mut().map(|n| s.spawn(move || n.finalize())).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| vec![Err(OpError::Closed)])).collect()
        });
        finalized(results.into_iter().flatten(), stopped)?;
        nodes.into_iter().try_for_each(HostedNode::shutdown)
    }
}

/// Whether every worker's finalize ended well, or failed only because of a node stopped by
/// `kill` (the last barriers cannot pass without it).
pub(crate) fn finalized(
    results: impl IntoIterator<Item = Result<(), OpError>>,
    stopped: impl Fn(NodeId) -> bool,
) -> Result<(), String> {
    for r in results {
        match r {
            Ok(()) => {}
            Err(OpError::PeerFailed { node }) if stopped(node) => {}
            Err(e) => return Err(format!("finalize: {e}")),
        }
    }
    Ok(())
}
