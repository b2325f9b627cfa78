//! Runs traces on the deterministic simulator (virtual time, seeded faults).

use parma_core::sampling::SamplingStats;
use parma_core::wire::WriteKind;
use parma_core::{
    Clock, Completion, Conformity, DistId, Distribution, Key, NodeId, OpError, SampleHandle, Ticket, WorkerId,
};
use parma_transport_loopback::sim::{Faults, SimNet};

use super::exec::{BarrierOut, Executor, GatedSteps, SampleOut, Setup};
use super::{gated, sim_gated};
use crate::sim::Cluster;

/// Most steps one trace command may take.
const STEPS_MAX: u64 = 1_000_000;

/// A trace executor on the simulated network.
pub struct SimExecutor {
    setup: Setup,
    cluster: Cluster,
    hold: parma_core::Duration,
    /// The workers finished (`gated-steps` retired them): worker commands are refused, as by
    /// a runtime whose workers finalized.
    finished: bool,
}

impl SimExecutor {
    /// A cluster for `setup` on a network with the faults `seed` derives, or why the
    /// configuration is refused.
    pub fn new(setup: &Setup, seed: u64) -> Result<SimExecutor, String> {
        let cfg = setup.config();
        let net = SimNet::new(setup.nodes, Faults::from_seed(seed), seed);
        let cluster = Cluster::new(&cfg, net).map_err(|e| e.to_string())?;
        Ok(SimExecutor { setup: setup.clone(), cluster, hold: cfg.relocation_hold, finished: false })
    }

    /// `InvalidArgument` for a node outside the cluster (the cluster would index out of
    /// bounds), or once the workers finished.
    fn node_exists(&self, node: NodeId) -> Result<(), OpError> {
        if node.0 < self.setup.nodes && !self.finished {
            Ok(())
        } else {
            Err(OpError::InvalidArgument)
        }
    }

    fn wait(&mut self, node: NodeId, worker: WorkerId, ticket: Ticket) -> Result<Completion, OpError> {
        let start = self.cluster.steps();
        loop {
            if let Some(r) = self.cluster.take_result(node, worker, ticket) {
                return r;
            }
            if self.cluster.steps() - start > STEPS_MAX {
                return Err(OpError::Timeout);
            }
            let t = self.cluster.next_due().unwrap_or(self.cluster.now());
            self.cluster.run_until(t.max(self.cluster.now()));
        }
    }
}

impl Executor for SimExecutor {
    fn setup(&self) -> &Setup {
        &self.setup
    }

    fn pull(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
    ) -> Result<(Vec<f32>, Vec<bool>), OpError> {
        self.node_exists(node)?;
        let total = self.setup.layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        let mut vals = vec![0.0; total];
        let (ticket, misses) = self.cluster.pull(node, worker, keys, &mut vals)?;
        match self.wait(node, worker, ticket)? {
            Completion::Pull(remote) => {
                misses.fill(&remote, &mut vals)?;
                let mut local = vec![true; keys.len()];
                misses.positions().for_each(|i| local[i] = false);
                Ok((vals, local))
            }
            _ => Err(OpError::InvalidArgument),
        }
    }

    fn write(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        set: bool,
        keys: &[Key],
        vals: &[f32],
    ) -> Result<(), OpError> {
        self.node_exists(node)?;
        let kind = if set { WriteKind::Set } else { WriteKind::Add };
        let ticket = self.cluster.write(node, worker, kind, keys, vals)?;
        self.wait(node, worker, ticket).map(|_| ())
    }

    fn localize(&mut self, node: NodeId, worker: WorkerId, keys: &[Key]) -> Result<(), OpError> {
        self.node_exists(node)?;
        let ticket = self.cluster.localize(node, worker, keys)?;
        self.wait(node, worker, ticket).map(|_| ())
    }

    fn owners(&mut self, key: Key) -> Vec<NodeId> {
        self.cluster.live_nodes().iter().filter(|n| n.store().holds(key)).map(|n| n.id()).collect()
    }

    fn replicas(&mut self, key: Key) -> Vec<NodeId> {
        self.cluster.live_nodes().iter().filter(|n| n.store().has_replica(key)).map(|n| n.id()).collect()
    }

    fn intent(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        self.node_exists(node)?;
        self.cluster.intent(node, worker, keys, start, end)
    }

    fn advance(&mut self, node: NodeId, worker: WorkerId, by: u64) -> Result<Clock, OpError> {
        self.node_exists(node)?;
        if self.cluster.is_dead(node) {
            // As a worker of a stopped runtime.
            return Err(OpError::Closed);
        }
        let mut clock = self.cluster.nodes()[node.index()].clock(worker);
        for _ in 0..by {
            clock = self.cluster.advance_clock(node, worker)?;
        }
        Ok(clock)
    }

    fn wait_sync(&mut self, node: NodeId, worker: WorkerId) -> Result<(), OpError> {
        self.node_exists(node)?;
        let ticket = self.cluster.wait_sync(node, worker)?;
        self.wait(node, worker, ticket).map(|_| ())
    }

    fn settle(&mut self) -> Result<(), OpError> {
        let until = self.cluster.now() + self.hold + self.hold;
        while self.cluster.now() < until {
            let t = self.cluster.next_due().map_or(until, |t| t.min(until));
            self.cluster.run_until(t.max(self.cluster.now()));
        }
        for _ in 0..2 {
            let running: Vec<NodeId> =
                (0..self.setup.nodes).map(NodeId).filter(|n| !self.cluster.is_dead(*n)).collect();
            for n in running {
                self.wait_sync(n, WorkerId(0))?;
            }
        }
        Ok(())
    }

    fn concurrent_push(&mut self, keys: &[Key], rounds: u32, each: f32) -> Result<(), OpError> {
        let total = self.setup.layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        let vals = vec![each; total];
        for _ in 0..rounds {
            let mut tickets = Vec::new();
            for n in 0..self.setup.nodes {
                for w in 0..self.setup.workers {
                    let t = self.cluster.write(NodeId(n), WorkerId(w), WriteKind::Add, keys, &vals)?;
                    tickets.push((NodeId(n), WorkerId(w), t));
                }
            }
            for (n, w, t) in tickets {
                self.wait(n, w, t)?;
            }
        }
        Ok(())
    }

    fn gated_steps(&mut self, spec: &GatedSteps) -> Result<Vec<f32>, String> {
        if self.finished {
            return Err(gated::FINISHED.into());
        }
        if let Some(n) = (0..self.setup.nodes).map(NodeId).find(|n| self.cluster.is_dead(*n)) {
            return Err(format!("n{n} is stopped"));
        }
        let ran = sim_gated::run_steps(&mut self.cluster, &self.setup, spec)?;
        for (n, w, t) in ran.pushes {
            self.wait(n, w, t).map_err(|e| format!("n{n} w{w}: push: {e}"))?;
        }
        // Every push is in: every delta reaches its owner, then every replica hears from it.
        for _ in 0..2 {
            for (n, w, r) in self.barrier() {
                r.map_err(|e| format!("n{n} w{w}: barrier: {e}"))?;
            }
            for n in (0..self.setup.nodes).map(NodeId) {
                self.wait_sync(n, WorkerId(0)).map_err(|e| format!("n{n}: wait-sync: {e}"))?;
            }
        }
        let workers = gated::workers_total(&self.setup);
        let mut results = Vec::new();
        for n in (0..self.setup.nodes).map(NodeId) {
            for w in (0..self.setup.workers).map(WorkerId) {
                let r = self.pull(n, w, &spec.keys).map_err(|e| format!("n{n} w{w}: pull: {e}"));
                let layout = &self.setup.layout;
                results.push(
                    r.and_then(|(v, _)| gated::check_final(spec, layout, workers, (n, w), &v).map(|()| v)),
                );
            }
        }
        for n in (0..self.setup.nodes).map(NodeId) {
            for w in (0..self.setup.workers).map(WorkerId) {
                self.cluster.retire(n, w).map_err(|e| format!("n{n} w{w}: retire: {e}"))?;
            }
        }
        self.finished = true;
        let broken = (!ran.broken.is_empty()).then(|| Err(ran.broken.join("; ")));
        gated::combine(broken.into_iter().chain(results))
    }

    fn register(&mut self, dist: &Distribution, level: Conformity) -> Result<DistId, OpError> {
        self.cluster.register_distribution(dist, level)
    }

    fn prepare_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        (start, end): (Clock, Clock),
    ) -> Result<SampleHandle, OpError> {
        self.node_exists(node)?;
        self.cluster.prepare_sample(node, worker, dist, n, start, end)
    }

    fn pull_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        handle: SampleHandle,
        count: usize,
    ) -> Result<SampleOut, OpError> {
        self.node_exists(node)?;
        let mut keys = vec![Key(0); count];
        let len = self.setup.layout.uniform_len().unwrap_or(1);
        self.cluster.sample_keys(node, worker, handle, &mut keys, count * len)?;
        // A node pull names each key once: pull the distinct keys, then spread the values.
        let uniq = crate::distinct(&keys);
        let (vals, local) = self.pull(node, worker, &uniq)?;
        let at = |k: &Key| uniq.iter().position(|u| u == k).unwrap_or(0);
        let values = keys.iter().flat_map(|k| vals[at(k) * len..(at(k) + 1) * len].to_vec()).collect();
        let local = keys.iter().map(|k| local[at(k)]).collect();
        Ok((keys, values, local))
    }

    fn finish_sample(&mut self, node: NodeId, worker: WorkerId, handle: SampleHandle) -> Result<(), OpError> {
        self.node_exists(node)?;
        self.cluster.finish_sample(node, worker, handle)
    }

    fn sampling_stats(&mut self, node: NodeId, worker: WorkerId) -> Result<SamplingStats, OpError> {
        self.cluster.sampler(node, worker).map(|s| s.stats()).ok_or(OpError::InvalidArgument)
    }

    fn keys_forwarded(&mut self) -> u64 {
        self.cluster.nodes().iter().map(|n| n.stats().keys_forwarded).sum()
    }

    fn barrier(&mut self) -> BarrierOut {
        if self.finished {
            // As a runtime's nodes whose workers finalized: nobody enters.
            return Vec::new();
        }
        let mut entered = Vec::new();
        for n in 0..self.setup.nodes {
            for w in 0..self.setup.workers {
                let (node, worker) = (NodeId(n), WorkerId(w));
                entered.push((node, worker, self.cluster.barrier(node, worker)));
            }
        }
        entered
            .into_iter()
            .map(|(node, worker, t)| (node, worker, t.and_then(|t| self.wait(node, worker, t)).map(|_| ())))
            .collect()
    }

    fn kill(&mut self, node: NodeId) -> Result<(), OpError> {
        self.node_exists(node)?;
        if self.cluster.is_dead(node) {
            return Err(OpError::Closed);
        }
        self.cluster.kill(node);
        let start = self.cluster.steps();
        let told = |c: &Cluster| c.live_nodes().iter().all(|n| n.failed_peers().contains(&node));
        while !told(&self.cluster) {
            if self.cluster.steps() - start > STEPS_MAX {
                return Err(OpError::Timeout);
            }
            let t = self.cluster.next_due().unwrap_or(self.cluster.now());
            self.cluster.run_until(t.max(self.cluster.now()));
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        crate::sim::settle(&mut self.cluster, self.setup.technique, |_| Ok(()))?;
        let live = self.cluster.live_nodes();
        if live.len() == self.cluster.nodes().len() {
            return crate::sim::checks::nothing_left(self.cluster.nodes());
        }
        // A stopped node leaves the pointers to it behind (the keys they name may be lost).
        for n in live {
            let left = [
                ("pending requests", n.pending_requests()),
                ("waiting operations", n.waiting_ops()),
                ("incoming keys", n.keys_incoming()),
                (
                    "pointers to running nodes",
                    n.forwarding_pointers().saturating_sub(n.keys_maybe_lost().len()),
                ),
            ];
            if let Some((what, count)) = left.iter().find(|(_, c)| *c > 0) {
                return Err(format!("node {} still has {count} {what} after quiescence", n.id()));
            }
        }
        Ok(())
    }
}
