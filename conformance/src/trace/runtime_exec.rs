//! Runs traces through `parma-runtime` over any [`Transport`]: real driver threads, real
//! `Worker` handles, the transport under test.

use std::thread;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use parma_core::sampling::SamplingStats;
use parma_core::{
    Clock, Conformity, DistId, Distribution, Duration, Key, NodeId, OpError, SampleHandle, Transport,
    WorkerId,
};
use parma_runtime::{NodeRuntime, Options, Worker};

use super::exec::{BarrierOut, Executor, SampleOut, Setup};

/// Longest wait of a `barrier` command (the runtime's default is for real training runs).
const BARRIER_TIMEOUT: StdDuration = StdDuration::from_secs(60);
/// Longest wait of a `kill` command for the node to stop and every other node to hear of it.
const KILL_WAIT: StdDuration = StdDuration::from_secs(30);
/// Pause between two looks at the nodes while a `kill` waits.
const KILL_POLL: StdDuration = StdDuration::from_millis(1);

/// Stops a node of the transport under test for good, as a crash would.
pub type KillFn = Box<dyn FnMut(NodeId) + Send>;

/// A trace executor on a cluster of runtimes, one per transport endpoint.
pub struct RuntimeExecutor {
    setup: Setup,
    nodes: Vec<NodeRuntime>,
    workers: Vec<Vec<Worker>>,
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
        if transports.len() != usize::from(setup.nodes) {
            return Err(format!("{} endpoints for {} nodes", transports.len(), setup.nodes));
        }
        let cfg = setup.config();
        let mut opts = Options::default();
        opts.barrier_timeout = BARRIER_TIMEOUT;
        let (mut nodes, mut workers) = (Vec::new(), Vec::new());
        for (i, t) in transports.into_iter().enumerate() {
            let (n, w) = NodeRuntime::start_with(cfg.clone(), NodeId(i as u16), t, opts.clone())
                .map_err(|e| e.to_string())?;
            nodes.push(n);
            workers.push(w);
        }
        let killed = vec![false; nodes.len()];
        Ok(RuntimeExecutor {
            setup: setup.clone(),
            nodes,
            workers,
            hold: cfg.relocation_hold,
            kill: None,
            killed,
        })
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
    fn running(&self) -> impl Iterator<Item = &NodeRuntime> {
        self.nodes.iter().zip(&self.killed).filter(|(_, k)| !**k).map(|(n, _)| n)
    }

    /// Whether every running node has been told of `failed` failed peers.
    fn all_told(&self, failed: u64) -> bool {
        self.running().all(|n| n.stats().driver.peers_failed >= failed)
    }

    fn worker(&mut self, node: NodeId, worker: WorkerId) -> Result<&mut Worker, OpError> {
        self.workers
            .get_mut(node.index())
            .and_then(|w| w.get_mut(worker.index()))
            .ok_or(OpError::InvalidArgument)
    }
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
        let total = self.setup.layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        // Which keys are here: nothing else runs between trace commands, so nothing moves
        // between this look and the pull; the worker's own counters must agree.
        let store = self.nodes.get(node.index()).ok_or(OpError::InvalidArgument)?.store().clone();
        let local: Vec<bool> = keys.iter().map(|k| store.is_local(*k)).collect();
        let w = self.worker(node, worker)?;
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

    fn write(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        set: bool,
        keys: &[Key],
        vals: &[f32],
    ) -> Result<(), OpError> {
        let w = self.worker(node, worker)?;
        let t = if set { w.set(keys, vals)? } else { w.push(keys, vals)? };
        w.wait(t)
    }

    fn localize(&mut self, node: NodeId, worker: WorkerId, keys: &[Key]) -> Result<(), OpError> {
        let w = self.worker(node, worker)?;
        let t = w.localize(keys)?;
        w.wait(t)
    }

    fn owners(&mut self, key: Key) -> Vec<NodeId> {
        self.running().filter(|n| n.store().holds(key)).map(|n| n.id()).collect()
    }

    fn replicas(&mut self, key: Key) -> Vec<NodeId> {
        self.running().filter(|n| n.store().has_replica(key)).map(|n| n.id()).collect()
    }

    fn intent(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        self.worker(node, worker)?.intent(keys, start, end)
    }

    fn advance(&mut self, node: NodeId, worker: WorkerId, by: u64) -> Result<Clock, OpError> {
        let w = self.worker(node, worker)?;
        for _ in 0..by {
            w.advance_clock()?;
        }
        Ok(w.clock())
    }

    fn wait_sync(&mut self, node: NodeId, worker: WorkerId) -> Result<(), OpError> {
        self.worker(node, worker)?.wait_sync()
    }

    fn settle(&mut self) -> Result<(), OpError> {
        thread::sleep(std::time::Duration::from_micros(2 * self.hold.as_micros()));
        for _ in 0..2 {
            let running: Vec<NodeId> =
                (0..self.setup.nodes).map(NodeId).filter(|n| !self.killed[n.index()]).collect();
            for n in running {
                self.wait_sync(n, WorkerId(0))?;
            }
        }
        Ok(())
    }

    fn concurrent_push(&mut self, keys: &[Key], rounds: u32, each: f32) -> Result<(), OpError> {
        let total = self.setup.layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        let vals = vec![each; total];
        let results: Vec<Result<(), OpError>> = thread::scope(|s| {
            let handles: Vec<_> = self
                .workers
                .iter_mut()
                .flatten()
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

    fn register(&mut self, dist: &Distribution, level: Conformity) -> Result<DistId, OpError> {
        let mut ids = Vec::new();
        for n in 0..self.setup.nodes {
            ids.push(self.worker(NodeId(n), WorkerId(0))?.register_distribution(dist.clone(), level)?);
        }
        ids.first().copied().ok_or(OpError::InvalidArgument)
    }

    fn prepare_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        (start, end): (Clock, Clock),
    ) -> Result<SampleHandle, OpError> {
        self.worker(node, worker)?.prepare_sample(dist, n, start, end)
    }

    fn pull_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        handle: SampleHandle,
        count: usize,
    ) -> Result<SampleOut, OpError> {
        let store = self.nodes.get(node.index()).ok_or(OpError::InvalidArgument)?.store().clone();
        let len = self.setup.layout.uniform_len().unwrap_or(1);
        let w = self.worker(node, worker)?;
        let before = (w.stats().keys_pulled_local, w.stats().keys_pulled_remote);
        let mut keys = vec![Key(0); count];
        let mut vals = vec![0.0; count * len];
        w.pull_sample(handle, &mut keys, &mut vals)?;
        // Nothing moves between trace commands: what is local now was local in the pull, and
        // the worker's own counters must agree (a repeated remote key is fetched once).
        let local: Vec<bool> = keys.iter().map(|k| store.is_local(*k)).collect();
        let counted = w.stats().keys_pulled_local - before.0;
        let remote = parma_core::node::distinct(&keys).iter().filter(|k| !store.is_local(**k)).count();
        if counted != local.iter().filter(|l| **l).count() as u64
            || w.stats().keys_pulled_remote - before.1 != remote as u64
        {
            return Err(OpError::InvalidArgument);
        }
        Ok((keys, vals, local))
    }

    fn finish_sample(&mut self, node: NodeId, worker: WorkerId, handle: SampleHandle) -> Result<(), OpError> {
        self.worker(node, worker)?.finish_sample(handle)
    }

    fn sampling_stats(&mut self, node: NodeId, worker: WorkerId) -> Result<SamplingStats, OpError> {
        Ok(self.worker(node, worker)?.sampling_stats())
    }

    fn keys_forwarded(&mut self) -> u64 {
        self.nodes.iter().map(|n| n.stats().node.keys_forwarded).sum()
    }

    fn barrier(&mut self) -> BarrierOut {
        thread::scope(|s| {
            let handles: Vec<_> = self
                .workers
                .iter_mut()
                .flatten()
                .map(|w| ((w.node(), w.id()), s.spawn(move || w.barrier())))
                .collect();
            handles
                .into_iter()
                .map(|((node, worker), h)| (node, worker, h.join().unwrap_or(Err(OpError::Closed))))
                .collect()
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
        // A stopped node's workers have nothing left to finish.
        let workers: Vec<Worker> = self.workers.drain(..).flatten().filter(|w| !stopped(w.node())).collect();
        let results: Vec<Result<(), OpError>> = thread::scope(|s| {
            let handles: Vec<_> = workers.into_iter().map(|w| s.spawn(move || w.finalize())).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(Err(OpError::Closed))).collect()
        });
        for r in results {
            match r {
                Ok(()) => {}
                // The last barriers cannot pass without the stopped nodes.
                Err(OpError::PeerFailed { node }) if stopped(node) => {}
                Err(e) => return Err(format!("finalize: {e}")),
            }
        }
        for n in self.nodes.drain(..) {
            if stopped(n.id()) {
                // Its driver stopped when its transport failed; dropping it joins the thread.
                continue;
            }
            let stats = n.shutdown().map_err(|e| format!("shutdown: {e}"))?;
            if stats.node.frames_dropped + stats.node.messages_rejected > 0 {
                return Err(format!("node dropped or rejected messages: {:?}", stats.node));
            }
        }
        Ok(())
    }
}
