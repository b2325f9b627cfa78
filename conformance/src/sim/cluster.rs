//! A cluster of [`Node`]s on a [`SimNet`], driven from one thread on virtual time.
//!
//! The cluster plays both the runtime's part (each worker's access path, core's
//! [`WorkerAccess`]: local accesses straight on the store, misses as node commands, never ahead
//! of the worker's own earlier operation on a key; and the drain contract) and the network's
//! (frames through the simulated transport). Every step is a function of the seed, so a run
//! replays exactly.
//!
//! Where the runtime's worker would wait ([`parma_core::Hold`]: an access that would overtake
//! the worker's own remote operation, or a full in-flight bound), this cluster refuses the
//! access as `Busy` and its caller issues it again later. The random workload never meets
//! that: each simulated worker waits for one operation before it issues the next.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use parma_core::access::{Issue, PullMisses};
use parma_core::node::Transmit;
use parma_core::transport::{SendError, Transport, TransportEvent};
use parma_core::wire::WriteKind;
use parma_core::{
    Clock, Completion, Config, Conformity, DistId, Distribution, Instant, IntentKind, Key, Node, NodeId,
    OpError, SampleHandle, Sampler, Ticket, WorkerAccess, WorkerId,
};
use parma_transport_loopback::sim::{SimNet, SimTransport};

use super::digest::Digest;

/// Result of a worker operation as the simulated worker sees it.
pub type OpResult = Result<Completion, OpError>;

/// Keys of worker operations, by where they were served: on the spot from the node's store (its
/// main copy or a filled replica), or through the node (remote, or waiting for a key on its way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accesses {
    pub pull_local: u64,
    pub pull_remote: u64,
    pub write_local: u64,
    pub write_remote: u64,
}

impl Accesses {
    /// Keys of all pulls and writes.
    pub fn total(&self) -> u64 {
        self.pull_local + self.pull_remote + self.write_local + self.write_remote
    }
    /// Keys of pulls and writes that were not served on the spot.
    pub fn remote(&self) -> u64 {
        self.pull_remote + self.write_remote
    }
}

/// `n` nodes on a simulated network.
pub struct Cluster {
    net: SimNet,
    ends: Vec<SimTransport>,
    nodes: Vec<Node>,
    /// Per node: transmits refused with `WouldBlock`, sent first next time (keeps FIFO order).
    stalled: Vec<VecDeque<Transmit>>,
    done: HashMap<(NodeId, WorkerId, Ticket), OpResult>,
    next_ticket: u64,
    steps: u64,
    /// Nodes stopped for good: frozen as they were, never stepped again.
    dead: Vec<bool>,
    accesses: Accesses,
    /// Each worker's sampler, by node and worker.
    samplers: Vec<Vec<Sampler>>,
    /// Each worker's access path, by node and worker.
    paths: Vec<Vec<WorkerAccess>>,
    /// Everything the nodes gave this driver, in the order they gave it (see
    /// [`Cluster::outputs_digest`]).
    outputs: Digest,
}

impl Cluster {
    /// A cluster whose node `i` runs `cfg` on `net`'s endpoint `i`.
    pub fn new(cfg: &Config, net: SimNet) -> Result<Cluster, parma_core::ConfigError> {
        let nodes =
            (0..cfg.nodes).map(|i| Node::new(cfg.clone(), NodeId(i))).collect::<Result<Vec<_>, _>>()?;
        let ends = net.endpoints();
        let samplers = nodes
            .iter()
            .map(|n| (0..cfg.workers_per_node).filter_map(|w| n.sampler(WorkerId(w)).ok()).collect())
            .collect();
        let per_worker = parma_core::access::inflight_max(cfg);
        let paths = (0..cfg.nodes)
            .map(|_| (0..cfg.workers_per_node).map(|_| WorkerAccess::new(per_worker)).collect())
            .collect();
        Ok(Cluster {
            samplers,
            paths,
            stalled: (0..cfg.nodes).map(|_| VecDeque::new()).collect(),
            net,
            ends,
            nodes,
            done: HashMap::new(),
            next_ticket: 0,
            steps: 0,
            dead: vec![false; usize::from(cfg.nodes)],
            accesses: Accesses::default(),
            outputs: Digest::default(),
        })
    }

    /// Stops `node` for good: the network drops everything to and from it (the other nodes
    /// hear `PeerFailed`), and the node is never stepped again.
    pub fn kill(&mut self, node: NodeId) {
        self.net.kill(node);
        self.dead[node.index()] = true;
        self.stalled[node.index()].clear();
    }

    /// Whether `node` was stopped for good.
    pub fn is_dead(&self, node: NodeId) -> bool {
        self.dead[node.index()]
    }

    /// The nodes still running.
    pub fn live_nodes(&self) -> Vec<&Node> {
        self.nodes.iter().filter(|n| !self.dead[n.id().index()]).collect()
    }

    /// The network.
    pub fn net(&self) -> &SimNet {
        &self.net
    }
    /// The nodes, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    /// Virtual time now.
    pub fn now(&self) -> Instant {
        self.net.now()
    }
    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
    /// Keys of worker pulls and writes so far, by where they were served.
    pub fn accesses(&self) -> Accesses {
        self.accesses
    }
    /// A digest of every output of every node so far, in the order the nodes gave them, with
    /// the virtual time: each transmit (sender, receiver, length, and the frame's bytes when
    /// it goes on the wire), each worker completion (node, worker, ticket, result), and each
    /// peer failure handed to a node. The network's [`SimNet::trace_hash`] covers deliveries
    /// only; this also sees the order in which a node completes its workers' operations,
    /// which nothing in the simulated workers depends on (they look results up by ticket).
    pub fn outputs_digest(&self) -> u64 {
        self.outputs.finish()
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// Takes the result of a finished operation.
    pub fn take_result(&mut self, node: NodeId, worker: WorkerId, ticket: Ticket) -> Option<OpResult> {
        self.done.remove(&(node, worker, ticket))
    }

    /// Pull as a worker does: local keys are copied into `vals` at once; the others are asked
    /// of the node. Returns the ticket and what went to the node (fill `vals` with its answer
    /// by [`PullMisses::fill`]).
    pub fn pull(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        vals: &mut [f32],
    ) -> Result<(Ticket, PullMisses), OpError> {
        let ticket = self.ticket();
        let misses = self.access(node, worker, ticket, |path, n, now| {
            path.pull_via(n, now, worker, ticket, keys, vals, true)
        })?;
        self.accesses.pull_remote += misses.keys().len() as u64;
        self.accesses.pull_local += misses.local() as u64;
        Ok((ticket, misses))
    }

    /// Push or set as a worker does: local keys in place, the others through the node.
    pub fn write(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        write: WriteKind,
        keys: &[Key],
        vals: &[f32],
    ) -> Result<Ticket, OpError> {
        let ticket = self.ticket();
        let misses = self.access(node, worker, ticket, |path, n, now| {
            path.write_via(n, now, worker, ticket, write, keys, vals, true)
        })?;
        self.accesses.write_remote += misses.keys().len() as u64;
        self.accesses.write_local += misses.local() as u64;
        Ok(ticket)
    }

    /// Localize as a worker does: only the keys whose main copy is elsewhere go to the node.
    pub fn localize(&mut self, node: NodeId, worker: WorkerId, keys: &[Key]) -> Result<Ticket, OpError> {
        let ticket = self.ticket();
        self.access(node, worker, ticket, |path, n, now| {
            path.localize_via(n, now, worker, ticket, keys, true)
        })?;
        Ok(ticket)
    }

    /// Signal intent through the node.
    pub fn intent(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        keys: &[Key],
        start: Clock,
        end: Clock,
    ) -> Result<(), OpError> {
        self.command(node, |n, now| n.intent(now, worker, keys, start, end, IntentKind::ReadWrite))
    }

    /// Advance a worker's clock.
    pub fn advance_clock(&mut self, node: NodeId, worker: WorkerId) -> Result<Clock, OpError> {
        let now = self.now();
        let c = self.nodes[node.index()].advance_clock(now, worker)?;
        self.drain(node);
        Ok(c)
    }

    /// Wait at the clock gate through the node (`Node::gate`).
    pub fn gate(&mut self, node: NodeId, worker: WorkerId) -> Result<Ticket, OpError> {
        let ticket = self.ticket();
        self.access(node, worker, ticket, |path, n, now| {
            path.other_via(ticket, || n.gate(now, worker, ticket))
        })?;
        Ok(ticket)
    }

    /// The worker advances its clock no more (`Node::retire`).
    pub fn retire(&mut self, node: NodeId, worker: WorkerId) -> Result<(), OpError> {
        let now = self.now();
        self.nodes[node.index()].retire(now, worker)?;
        self.drain(node);
        Ok(())
    }

    /// Wait for two more sync rounds through the node.
    pub fn wait_sync(&mut self, node: NodeId, worker: WorkerId) -> Result<Ticket, OpError> {
        let ticket = self.ticket();
        self.access(node, worker, ticket, |path, n, now| {
            path.other_via(ticket, || n.wait_sync(now, worker, ticket))
        })?;
        Ok(ticket)
    }

    /// Registers `dist` under `level` on every node, in node order; returns its id.
    pub fn register_distribution(
        &mut self,
        dist: &Distribution,
        level: Conformity,
    ) -> Result<DistId, OpError> {
        let mut ids = Vec::new();
        for i in 0..self.nodes.len() {
            let node = NodeId(i as u16);
            if self.dead[i] {
                continue;
            }
            let now = self.now();
            ids.push(self.nodes[i].register_distribution(now, dist.clone(), level)?);
            self.drain(node);
        }
        ids.first().copied().ok_or(OpError::Closed)
    }

    /// A worker's sampler.
    pub fn sampler(&self, node: NodeId, worker: WorkerId) -> Option<&Sampler> {
        self.samplers.get(node.index())?.get(worker.index())
    }

    /// Prepares a sample through the node (which signals intent for the drawn keys).
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        dist: DistId,
        n: u64,
        start: Clock,
        end: Clock,
    ) -> Result<SampleHandle, OpError> {
        if self.dead[node.index()] {
            return Err(OpError::Closed);
        }
        let now = self.now();
        let sampler = self.samplers[node.index()].get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        let h = self.nodes[node.index()].prepare_sample(now, sampler, worker, dist, n, start, end)?;
        self.drain(node);
        Ok(h)
    }

    /// Draws the next `keys.len()` samples of `handle` (their values are then pulled like any
    /// keys); `values_len` is the length of the caller's value buffer.
    pub fn sample_keys(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        handle: SampleHandle,
        keys: &mut [Key],
        values_len: usize,
    ) -> Result<(), OpError> {
        let sampler = self.samplers[node.index()].get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        self.nodes[node.index()].pull_sample_keys(sampler, handle, keys, values_len)
    }

    /// Ends a worker's sample handle.
    pub fn finish_sample(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        handle: SampleHandle,
    ) -> Result<(), OpError> {
        let sampler = self.samplers[node.index()].get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        Ok(sampler.finish(handle)?)
    }

    /// Barrier through the node.
    pub fn barrier(&mut self, node: NodeId, worker: WorkerId) -> Result<Ticket, OpError> {
        let ticket = self.ticket();
        self.access(node, worker, ticket, |path, n, now| {
            path.other_via(ticket, || n.barrier(now, worker, ticket))
        })?;
        Ok(ticket)
    }

    /// A worker's operation `ticket` through its access path `f`, then the drain contract.
    /// Completed in the store, its result is `ticket`'s at once; held, it is refused as `Busy`
    /// (see the module docs).
    fn access<M: Completes>(
        &mut self,
        node: NodeId,
        worker: WorkerId,
        ticket: Ticket,
        f: impl FnOnce(&mut WorkerAccess, &mut Node, Instant) -> Result<Issue<M>, OpError>,
    ) -> Result<M, OpError> {
        if self.dead[node.index()] {
            return Err(OpError::Closed);
        }
        let now = self.now();
        let i = node.index();
        let path = self.paths[i].get_mut(worker.index()).ok_or(OpError::InvalidArgument)?;
        let issued = f(path, &mut self.nodes[i], now)?;
        self.drain(node);
        match issued {
            Issue::Sent(m) => Ok(m),
            Issue::Local(m) => {
                self.done.insert((node, worker, ticket), Ok(M::local()));
                Ok(m)
            }
            Issue::Refused(_, e) => Err(e),
            Issue::Held(_) => Err(OpError::Busy),
        }
    }

    fn command(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut Node, Instant) -> Result<(), OpError>,
    ) -> Result<(), OpError> {
        if self.dead[node.index()] {
            return Err(OpError::Closed);
        }
        let now = self.now();
        f(&mut self.nodes[node.index()], now)?;
        self.drain(node);
        Ok(())
    }

    /// The earliest time something is due: a delivery or a node timer.
    pub fn next_due(&self) -> Option<Instant> {
        let timers =
            self.nodes.iter().filter(|n| !self.dead[n.id().index()]).filter_map(|n| n.poll_timeout());
        self.net.next_delivery_time().into_iter().chain(timers).min()
    }

    /// Advances virtual time to `t` (not backwards) and lets every node handle what is due.
    pub fn run_until(&mut self, t: Instant) {
        if t > self.now() {
            self.net.advance_to(t);
        }
        self.step();
    }

    /// Handles everything due now at every node: frames, failures, timers. Returns whether
    /// anything happened.
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        let now = self.now();
        let mut busy = false;
        for i in 0..self.nodes.len() {
            if self.dead[i] {
                continue;
            }
            let id = NodeId(i as u16);
            while let Some(TransportEvent::PeerFailed(p)) = self.ends[i].poll_event() {
                for w in [3, now.as_micros(), i as u64, u64::from(p.0)] {
                    self.outputs.word(w);
                }
                self.nodes[i].handle_peer_failed(now, p);
                busy = true;
            }
            let mut frames = Vec::new();
            if self.nodes[i].wants_input() {
                let _ = self.ends[i].poll_recv(256, &mut |from, f| frames.push((from, f.to_vec())));
            }
            busy |= !frames.is_empty();
            for (from, f) in frames {
                self.nodes[i].handle_frame(now, from, &f);
                self.drain(id);
            }
            // A node's timers may chain (a round that sends nothing schedules the next), so
            // handle them until none is due now, within a bound.
            for _ in 0..4 {
                if self.nodes[i].poll_timeout().is_none_or(|t| t > now) {
                    break;
                }
                self.nodes[i].handle_timeout(now);
                self.drain(id);
                busy = true;
            }
            self.drain(id);
        }
        // A node that read frames this step freed room on its pairs after their senders had
        // drained: retry what those senders could not send, or it would wait for some later
        // event that may never come.
        for i in 0..self.nodes.len() {
            if !self.stalled[i].is_empty() && !self.dead[i] {
                self.drain(NodeId(i as u16));
            }
        }
        busy
    }

    /// The drain contract for one node: send everything, collect every completion.
    fn drain(&mut self, id: NodeId) {
        let i = id.index();
        let now = self.now().as_micros();
        let out = &mut self.outputs;
        while let Some(t) = self.nodes[i].poll_transmit() {
            for w in [1, now, i as u64, u64::from(t.to().0), t.encoded_len() as u64] {
                out.word(w);
            }
            self.stalled[i].push_back(t);
        }
        while let Some(t) = self.stalled[i].pop_front() {
            let res = self.ends[i].try_send(t.to(), t.encoded_len(), &mut |buf| {
                let _ = t.encode(buf);
                out.bytes(buf);
            });
            match res {
                Ok(()) => {}
                Err(SendError::WouldBlock) => {
                    self.stalled[i].push_front(t);
                    break;
                }
                // Refused for good: the node fails whatever waits for the frame.
                Err(SendError::TooLarge | SendError::UnknownPeer) => {
                    self.nodes[i].handle_send_refused(Instant(now), t);
                    while let Some(t) = self.nodes[i].poll_transmit() {
                        for w in [1, now, i as u64, u64::from(t.to().0), t.encoded_len() as u64] {
                            out.word(w);
                        }
                        self.stalled[i].push_back(t);
                    }
                }
                // A failed peer: the node hears of it through the transport's events.
                Err(_) => {}
            }
        }
        while let Some(ev) = self.nodes[i].poll_event() {
            let (w, t, r) = ev.into_parts();
            for x in [2, now, i as u64, u64::from(w.0), t.0] {
                out.word(x);
            }
            match &r {
                Ok(Completion::Pull(values)) => {
                    out.word(values.len() as u64);
                    values.iter().for_each(|v| out.word(u64::from(v.to_bits())));
                }
                other => {
                    let _ = write!(out, "{other:?}");
                }
            }
            if let Some(path) = self.paths[i].get_mut(w.index()) {
                path.complete(t);
            }
            self.done.insert((id, w, t), r);
        }
    }

    /// Frames waiting for back-pressure to end, over all nodes.
    pub fn stalled(&self) -> usize {
        self.stalled.iter().map(|s| s.len()).sum()
    }

    /// True when no frame is in flight or stalled and every node is idle.
    pub fn quiet(&self) -> bool {
        self.net.in_flight() == 0 && self.stalled() == 0 && self.live_nodes().iter().all(|n| n.is_idle())
    }
}

/// The completion of an operation the store served in full.
trait Completes {
    fn local() -> Completion;
}

impl Completes for PullMisses {
    fn local() -> Completion {
        Completion::Pull(Vec::new())
    }
}

impl Completes for parma_core::access::WriteMisses {
    fn local() -> Completion {
        Completion::Write
    }
}

impl Completes for Vec<Key> {
    fn local() -> Completion {
        Completion::Localize
    }
}

impl Completes for () {
    fn local() -> Completion {
        Completion::Sync
    }
}
