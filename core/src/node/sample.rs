//! The node's side of the sampling manager: the registry of distributions, and samplers for
//! its workers. See [`crate::sampling`].

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::Node;
use crate::error::OpError;
use crate::ids::{Clock, DistId, Key, NodeId, SampleHandle, WorkerId};
use crate::sampling::{Conformity, Distribution, Registry, SampleRng, Sampler};
use crate::time::Instant;
use crate::wire::Message;

impl Node {
    /// Registers `dist` under `conformity` and tells the peers its fingerprint. Every node must
    /// register the same distributions in the same order; ids count from 0. A node that finds
    /// a peer's distribution of the same id different records it
    /// ([`Node::distribution_mismatch`]), and preparing samples of it then fails with
    /// `SampleError::DistributionMismatch`.
    pub fn register_distribution(
        &mut self,
        now: Instant,
        dist: Distribution,
        conformity: Conformity,
    ) -> Result<DistId, OpError> {
        let id = self.registry.register(dist, conformity)?;
        self.announce_distributions(now);
        Ok(id)
    }

    /// Tells the peers the fingerprints of distributions registered in the shared registry
    /// since the last call (a driver whose workers register directly calls this after them),
    /// and checks them against what the peers said.
    pub fn announce_distributions(&mut self, now: Instant) {
        let len = self.registry.len();
        for i in self.dists_announced..len {
            let dist = DistId(i as u32);
            let Ok(r) = self.registry.get(dist) else { continue };
            let me = self.me;
            for n in (0..self.cfg.nodes).map(NodeId).filter(|n| *n != me) {
                self.send(n, Message::DistCheck { dist, fingerprint: r.fingerprint });
            }
            let (ready, rest): (Vec<_>, Vec<_>) =
                self.dist_checks.drain(..).partition(|(_, d, _)| *d == dist);
            self.dist_checks = rest;
            for (from, _, fingerprint) in ready {
                self.check_distribution(from, dist, fingerprint);
            }
        }
        self.dists_announced = len;
        self.drain_loopback(now);
    }

    /// The first distribution found to differ on a peer, and that peer.
    pub fn distribution_mismatch(&self) -> Option<(DistId, NodeId)> {
        (0..self.registry.len() as u32)
            .filter_map(|i| Some((DistId(i), self.registry.get(DistId(i)).ok()?.mismatch()?)))
            .next()
    }

    /// Peer `from` registered `dist` with `fingerprint`.
    pub(super) fn check_distribution(&mut self, from: NodeId, dist: DistId, fingerprint: u64) {
        match self.registry.check(dist, fingerprint, from) {
            Some(true) => {}
            Some(false) => self.stats.distribution_mismatches += 1,
            None if dist.0 as usize >= self.cfg.sampling.distributions_max => {
                self.stats.distribution_mismatches += 1
            }
            None => {
                let max = usize::from(self.cfg.nodes) * self.cfg.sampling.distributions_max;
                if self.dist_checks.len() < max {
                    self.dist_checks.push((from, dist, fingerprint));
                } else {
                    self.stats.messages_rejected += 1;
                }
            }
        }
    }

    /// The distributions registered here, shared with the workers' samplers.
    pub fn sampling_registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// A new sampler for `worker`, seeded from the configuration's seed, this node and the
    /// worker (so a simulation replays exactly).
    pub fn sampler(&self, worker: WorkerId) -> Result<Sampler, OpError> {
        if worker.0 >= self.cfg.workers_per_node {
            return Err(OpError::InvalidArgument);
        }
        let rng = SampleRng::new(self.cfg.seed, self.me.0, worker.0);
        Ok(Sampler::new(Arc::clone(&self.registry), rng))
    }

    /// Prepares `n` samples of `dist` with `worker`'s `sampler`, and signals the worker's
    /// intent for the drawn keys over `[start, end)` so that they are local in time. Returns at
    /// once. On an error nothing changed.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_sample(
        &mut self,
        now: Instant,
        sampler: &mut Sampler,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        start: Clock,
        end: Clock,
    ) -> Result<SampleHandle, OpError> {
        if worker.0 >= self.cfg.workers_per_node {
            return Err(OpError::InvalidArgument);
        }
        let (handle, keys) = sampler.prepare(dist, n)?;
        if let Err(e) = self.sample_intent(now, worker, &keys, start, end) {
            let _ = sampler.finish(handle);
            return Err(e);
        }
        Ok(handle)
    }

    /// `worker` will use the prepared samples `keys` while its clock is in `[start, end)`: the
    /// node makes them local in time the way its technique does, by intent, or, under
    /// relocation (Lapse, which ignores intents), by a localize that no worker waits for (as
    /// NuPS localizes prepared samples). A driver that prepares samples on worker threads
    /// passes the keys [`Sampler::prepare`] returns here.
    pub fn sample_intent(
        &mut self,
        now: Instant,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.stats.sample_intent_keys += keys.len() as u64;
        if self.cfg.technique.uses_localize() {
            self.check_command(worker, keys, None)?;
            return self.localize_as(now, worker, crate::ids::Ticket(0), keys, super::PendingKind::Prefetch);
        }
        self.intent(now, worker, keys, start, end, super::IntentKind::ReadWrite)
    }

    /// Fills `keys` with the next samples of `handle` (see [`Sampler::pull`]); locality is
    /// this node's store now. The caller then reads the values: local ones from the store,
    /// the rest with [`Node::pull`].
    pub fn pull_sample_keys(
        &self,
        sampler: &mut Sampler,
        handle: SampleHandle,
        keys: &mut [Key],
        values_len: usize,
    ) -> Result<(), OpError> {
        let store = &self.store;
        Ok(sampler.pull(handle, keys, values_len, &self.cfg.layout, |k| store.is_local(k))?)
    }
}
