//! One node of the cluster as a pure state machine. See the crate docs for the drain contract.

mod barrier;
mod cache;
mod dispatch;
mod event;
mod gate;
mod intents;
mod invariants;
mod keymap;
mod lifecycle;
mod origin;
mod owner;
mod peers;
mod record;
mod replicas;
mod round;
mod sample;
mod speculation;
mod stats;

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

use hashbrown::HashSet;
use lifecycle::{Actions, Event as KeyEvent, Life};
use record::Keys;

pub use event::{Completion, Event, Transmit};
pub use intents::IntentKind;
pub use invariants::InvariantViolation;
pub(crate) use stats::KINDS;
pub use stats::{Stats, Tables};

use crate::config::Config;
use crate::error::{ConfigError, OpError, WireError};
use crate::ids::{ClusterId, Key, MembershipEpoch, NodeId, RequestId, Ticket, WorkerId};
use crate::store::Store;
use crate::time::Instant;
use crate::wire::{self, Message, WriteKind};
use barrier::Barrier;
use cache::LocationCache;
use gate::GateState;
use origin::{Pending, PendingKind, PendingMap};
use peers::PeerSet;
use round::SyncState;

/// Most hops a request may travel before it is failed as a routing loop. Correct routing needs
/// far fewer (cache, home, owner, and one pointer per move that raced the request).
pub(crate) const HOPS_MAX: u8 = 64;

/// Most self-addressed messages processed after one input (each produces at most a few more).
const LOOPBACK_STEPS_MAX: usize = 1 << 16;

/// An operation of this node's workers on a key this node asked for; it runs, in order, when
/// the key arrives.
#[derive(Debug)]
pub(super) enum WaitingOp {
    Pull { origin: NodeId, req: RequestId, hops: u8 },
    Write { origin: NodeId, req: RequestId, hops: u8, write: WriteKind, values: Vec<f32> },
}

/// One node: ownership, routing, relocation and the requests of its workers.
///
/// Inputs: [`Node::handle_frame`], [`Node::handle_message`], [`Node::handle_timeout`],
/// [`Node::handle_peer_failed`] and the worker commands ([`Node::pull`], [`Node::push`],
/// [`Node::localize`], [`Node::barrier`]). Outputs: [`Node::poll_transmit`],
/// [`Node::poll_event`], [`Node::poll_timeout`]. Everything else is a getter.
pub struct Node {
    cfg: Config,
    /// [`Config::wire_cluster`], computed once.
    wire_cluster: ClusterId,
    me: NodeId,
    store: Arc<Store>,
    cache: LocationCache,
    /// Everything the protocol knows about each key (`record`): one map.
    keys: Keys,
    pending: PendingMap,
    /// When pending requests are next scanned for expired deadlines (while any are pending).
    next_scan: Option<Instant>,
    next_req: u64,
    outbox: VecDeque<Transmit>,
    loopback: VecDeque<Message>,
    events: VecDeque<Event>,
    barrier: Barrier,
    gate: GateState,
    failed_peers: PeerSet,
    /// The first peer reported failed: what a call that finds the cluster broken names (the
    /// likeliest cause of the failures reported after it).
    first_failed: Option<NodeId>,
    /// This node's membership epoch, carried in every frame it sends. Membership changes
    /// (`docs/membership.md`) are not built yet, so it stays at [`MembershipEpoch::START`]
    /// and the membership is every node not reported failed.
    epoch: MembershipEpoch,
    stats: Stats,
    sync: SyncState,
    registry: Arc<crate::sampling::Registry>,
    /// Distributions of the registry whose fingerprints were sent to the peers.
    dists_announced: usize,
    /// Peers' fingerprints of distributions not registered here yet.
    dist_checks: Vec<(NodeId, crate::ids::DistId, u64)>,
}

impl Node {
    /// Node `me` of the cluster `cfg` describes, with a new empty store.
    pub fn new(cfg: Config, me: NodeId) -> Result<Node, ConfigError> {
        let store = Arc::new(Store::new(&cfg, me));
        Node::with_store(cfg, me, store)
    }

    /// Node `me` with a store created by the caller (shared with worker threads).
    pub fn with_store(cfg: Config, me: NodeId, store: Arc<Store>) -> Result<Node, ConfigError> {
        cfg.validate(me)?;
        let (cfg_sampling, layout) = (cfg.sampling, cfg.layout.clone());
        let pool_seed = crate::sampling::SampleRng::new(cfg.seed ^ 0x706f_6f6c, me.0, 0);
        Ok(Node {
            sync: SyncState::new(&cfg),
            cache: LocationCache::new(cfg.location_cache_slots),
            barrier: Barrier::new(cfg.nodes, cfg.workers_per_node),
            gate: GateState::new(&cfg),
            failed_peers: PeerSet::new(cfg.nodes),
            first_failed: None,
            epoch: MembershipEpoch::START,
            wire_cluster: cfg.wire_cluster(),
            cfg,
            me,
            store,
            keys: Keys::default(),
            pending: PendingMap::default(),
            next_scan: None,
            next_req: 0,
            outbox: VecDeque::new(),
            loopback: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            registry: Arc::new(crate::sampling::Registry::new(cfg_sampling, layout, pool_seed)),
            dists_announced: 0,
            dist_checks: Vec::new(),
        })
    }

    // ----- getters -----

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.me
    }
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// The store, shared with the worker threads for local accesses.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Requests of local workers still waiting for other nodes.
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }
    /// Operations waiting here for keys on their way.
    pub fn waiting_ops(&self) -> usize {
        self.keys.waiting_ops
    }
    /// Keys this node gave away and still keeps a forwarding pointer for.
    pub fn forwarding_pointers(&self) -> usize {
        self.keys.pointers
    }
    /// Keys this node asked to have moved here that have not arrived.
    pub fn keys_incoming(&self) -> usize {
        self.keys.incoming
    }
    /// The sizes of this node's tables that can grow with the cluster or with the keys it
    /// handles, now. Walks the keys owned here with replica holders and the store's shards
    /// (to count holder entries and allocated bytes): for reports and tests, not for every input.
    pub fn tables(&self) -> Tables {
        let (holder_entries, holders_longest) = self.keys.holder_counts();
        let f = self.store.footprint();
        Tables {
            key_records: self.keys.map.len(),
            cold_records: self.keys.cold_len(),
            pointers: self.keys.pointers,
            replicas: self.keys.replicas,
            keys_with_holders: self.keys.owned,
            holder_entries,
            holders_longest,
            pending_requests: self.pending.len(),
            outbox_frames: self.outbox.len(),
            arrived: self.sync.arrived.len(),
            touched: self.sync.touched.len(),
            owner_updates: self.sync.owner_updates.len(),
            peer_slots: self.gate.flushed.len() + self.barrier.peer_slots(),
            store_bytes: f.slots + f.arenas + f.free_lists,
        }
    }
    /// False while the outbox is over its bound: worker commands get `Busy` until the driver
    /// has sent more. Frames from peers must still be read (see the crate docs).
    pub fn wants_input(&self) -> bool {
        self.outbox.len() < self.cfg.outbox_frames_max
    }
    /// True when nothing is pending, waiting (a worker's `wait_sync` included), queued or being
    /// moved by this node, and its sync round, if one is open, only checks replicas that have
    /// nothing to send (replicas kept for the whole run check with their owners every round,
    /// for ever).
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
            && self.keys.waiting_ops == 0
            && self.keys.localizes == 0
            && self.outbox.is_empty()
            && self.events.is_empty()
            && self.loopback.is_empty()
            && self.sync.is_idle()
            && self.gate.waiting() == 0
    }

    // ----- outputs -----

    /// The next message to send. Drain until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.outbox.pop_front()?;
        let kind = t.msg.kind() as usize % KINDS;
        self.stats.messages_sent[kind] += 1;
        self.stats.bytes_sent[kind] += t.encoded_len() as u64;
        Some(t)
    }

    /// The next completion for a worker. Drain until `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Node::handle_timeout`] is next due, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.next_scan, self.sync.next_timeout(self.cfg.request_timeout)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ----- inputs from the network -----

    /// A frame from `from` (as the transport says). Undecodable frames, frames from another
    /// cluster or from a node configured differently (see [`Config::wire_cluster`]), frames
    /// whose header names another sender, and frames from outside this node's membership (a
    /// peer reported failed) or of another membership epoch are dropped and counted.
    pub fn handle_frame(&mut self, now: Instant, from: NodeId, frame: &[u8]) {
        match wire::decode(frame, self.wire_cluster, self.cfg.frame_len_max) {
            Ok((h, _)) if h.sender == from && self.failed_peers.contains(&from) => {
                // Not a stranger's: frames a peer sent before it failed or left can still be
                // on their way (a node that stops cleanly is reported failed too).
                self.stats.from_non_members += 1;
            }
            Ok((h, _)) if h.sender == from && from.0 < self.cfg.nodes && h.epoch != self.epoch => {
                // An older epoch: sent before a membership change this node has committed. A
                // newer one cannot happen while no change can commit (`docs/membership.md`).
                self.stats.frames_rejected += 1;
                self.stats.frames_other_epoch += 1;
            }
            Ok((h, msg)) if h.sender == from && from.0 < self.cfg.nodes => {
                let kind = h.kind as usize % KINDS;
                self.stats.messages_received[kind] += 1;
                self.stats.bytes_received[kind] += frame.len() as u64;
                self.handle_message(now, from, msg);
            }
            Err(WireError::ForeignCluster { .. }) => {
                self.stats.frames_rejected += 1;
                self.stats.frames_foreign += 1;
            }
            _ => self.stats.frames_rejected += 1,
        }
    }

    /// A decoded message from node `from`. Messages whose content is invalid (keys outside
    /// the layout, wrong value lengths) are dropped whole and counted; nothing changes.
    /// Messages from a peer reported failed are dropped and counted (`from_non_members`).
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: Message) {
        if from.0 >= self.cfg.nodes {
            self.stats.messages_rejected += 1;
            return;
        }
        if self.failed_peers.contains(&from) {
            self.stats.from_non_members += 1;
            return;
        }
        self.sync.now = now;
        self.dispatch(now, from, msg);
        self.drain_loopback(now);
    }

    /// Timers: fails requests whose deadline passed. Deadlines are checked in scans a
    /// fraction of the timeout apart, so a request fails between its deadline and one scan
    /// interval later.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.sync.now = now;
        self.sync_timeout(now);
        self.drain_loopback(now);
        if self.next_scan.is_none_or(|t| t > now) {
            return;
        }
        let mut expired: Vec<RequestId> =
            self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(r, _)| *r).collect();
        // Oldest first, so the workers' completions come in the same order in every run.
        expired.sort_unstable();
        for req in expired {
            self.fail_request(req, OpError::Timeout);
        }
        self.next_scan = (!self.pending.is_empty()).then(|| now + self.scan_interval());
    }

    fn scan_interval(&self) -> crate::time::Duration {
        crate::time::Duration((self.cfg.request_timeout.as_micros() / 8).max(1))
    }

    /// Keys homed here whose recorded owner failed, with that node, in key order: they were
    /// lost with it. (Once the live nodes have run a sync round after the failure, their own
    /// moves are recorded here, so a key that had moved on to a live node is not listed.)
    ///
    /// Keys homed at a failed node are lost too unless a live node holds them, but no live
    /// node can list them: their home was the only node that knew where they were. Requests
    /// for them end with an error ([`OpError::PeerFailed`], `Unreachable` or `Timeout`);
    /// nothing answers with a value that is not the key's.
    pub fn keys_lost(&self) -> Vec<(Key, NodeId)> {
        if self.failed_peers.is_empty() {
            return Vec::new();
        }
        let mut lost = Vec::new();
        self.store.for_each_away(|k, owner| {
            if self.failed_peers.contains(&owner) {
                lost.push((k, owner));
            }
        });
        lost.sort_unstable();
        lost
    }

    /// Keys this node gave to a node that failed before the move reached the key's home, with
    /// that node, in key order. Each was lost, unless it had moved on to a live node before
    /// the failure (then that node holds it, and the home learns so).
    pub fn keys_maybe_lost(&self) -> Vec<(Key, NodeId)> {
        let mut maybe: Vec<(Key, NodeId)> = self
            .keys
            .with_life(Life::has_pointer)
            .filter_map(|(k, c)| c.pointer().map(|(to, _)| (k, to)))
            .filter(|(_, to)| self.failed_peers.contains(to))
            .collect();
        maybe.sort_unstable();
        maybe
    }

    /// The membership epoch this node is in and stamps on every frame it sends.
    pub fn membership_epoch(&self) -> MembershipEpoch {
        self.epoch
    }

    /// Peers reported failed, in id order: outside this node's membership.
    pub fn failed_peers(&self) -> Vec<NodeId> {
        self.failed_peers.iter().collect()
    }

    /// The transport refused for good to send `t`, a message this node produced (larger than
    /// the transport accepts although within [`Config::frame_len_max`], or to a peer it does
    /// not know). The driver hands it back instead of dropping it, so that whoever waits for
    /// its answer learns it now instead of at the request's deadline: this node's own
    /// requests fail with [`OpError::FrameRefused`], and a request of another node (forwarded
    /// here, or answered here) fails at its origin with [`wire::FailReason::Refused`]. A
    /// refused message that serves no request (a relocated value, an ownership update) cannot
    /// be mended: it is counted in `Stats::messages_refused`, and that transport broke the
    /// promise it made by accepting `Config::frame_len_max` at start.
    pub fn handle_send_refused(&mut self, now: Instant, t: Transmit) {
        self.sync.now = now;
        self.stats.messages_refused += 1;
        let to = t.to;
        if let Message::PullReply { req, keys, .. } | Message::PushReply { req, keys } = t.msg {
            self.send(to, Message::RequestFailed { req, reason: wire::FailReason::Refused, keys });
        } else {
            self.undeliverable(t.msg, OpError::FrameRefused { node: to });
        }
        self.drain_loopback(now);
    }

    /// The transport reports that `peer` failed. Every outstanding request and barrier ends
    /// with an error: a request may have been routed through the peer, and waiting for it
    /// could be forever.
    pub fn handle_peer_failed(&mut self, now: Instant, peer: NodeId) {
        if peer == self.me || peer.0 >= self.cfg.nodes || !self.failed_peers.insert(peer) {
            return;
        }
        self.first_failed.get_or_insert(peer);
        // The open round's answers may have been routed through the peer.
        self.abandon_round(now);
        let mut reqs: Vec<RequestId> = self.pending.keys().copied().collect();
        // Oldest first, so the workers' completions come in the same order in every run.
        reqs.sort_unstable();
        for req in reqs {
            self.fail_request(req, OpError::PeerFailed { node: peer });
        }
        for (worker, ticket) in self.barrier.fail_all() {
            self.complete(worker, ticket, Err(OpError::PeerFailed { node: peer }));
        }
        self.gate_peer_failed(peer);
        // What waited for keys may wait forever now; its requests have just failed. A key that
        // still arrives is installed all the same, if there is room.
        let incoming: Vec<Key> = self.keys.with_life(Life::is_incoming).map(|(k, _)| k).collect();
        for k in incoming {
            if let Some((_, actions)) = self.keys.take_incoming(k, KeyEvent::WaitEnded) {
                if actions.contains(Actions::UNRESERVE) {
                    self.store.unreserve_slots(1);
                }
            }
        }
    }

    // ----- worker commands -----

    /// Pull `keys` for `worker`; completes with [`Completion::Pull`].
    pub fn pull(
        &mut self,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        keys: &[Key],
    ) -> Result<(), OpError> {
        self.check_command(worker, keys, None)?;
        let req = self.new_request(now);
        let mut p =
            Pending::pull(worker, ticket, keys.to_vec(), &self.cfg.layout, now + self.cfg.request_timeout);
        let mut buf = Vec::new();
        let mut remote = Vec::new();
        for &k in keys {
            buf.clear();
            if self.store.read_append(k, &mut buf) {
                self.stats.keys_served_late_local += 1;
                p.answer(k, &buf);
            } else if self.can_wait(self.me, k) {
                self.wait_for(k, WaitingOp::Pull { origin: self.me, req, hops: 0 });
            } else {
                remote.push(k);
            }
        }
        self.stats.keys_pulled_remote += remote.len() as u64;
        self.start(req, p);
        let routes = self.group_by_route(&remote);
        for (to, ks) in routes {
            self.send_pulls(to, req, self.me, 0, ks);
        }
        self.drain_loopback(now);
        Ok(())
    }

    /// Add (`WriteKind::Add`) or set `values` of `keys` for `worker`; completes with
    /// [`Completion::Write`] once every key's owner applied it.
    pub fn push(
        &mut self,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        write: WriteKind,
        keys: &[Key],
        values: &[f32],
    ) -> Result<(), OpError> {
        self.check_command(worker, keys, Some(values.len()))?;
        let req = self.new_request(now);
        let p =
            Pending::new(worker, ticket, PendingKind::Write, keys.to_vec(), now + self.cfg.request_timeout);
        self.start(req, p);
        let mut remote: Vec<(Key, &[f32])> = Vec::new();
        let mut at = 0;
        for &k in keys {
            let len = self.cfg.layout.len_of(k).unwrap_or(0);
            let v = &values[at..at + len];
            at += len;
            let applied = match write {
                WriteKind::Add => self.store.add(k, v),
                WriteKind::Set => self.store.set(k, v),
            };
            if applied {
                self.stats.keys_served_late_local += 1;
                self.answer(req, k, &[]);
            } else if self.can_wait(self.me, k) {
                let op = WaitingOp::Write { origin: self.me, req, hops: 0, write, values: v.to_vec() };
                self.wait_for(k, op);
            } else {
                remote.push((k, v));
            }
        }
        self.stats.keys_pushed_remote += remote.len() as u64;
        let keys_remote: Vec<Key> = remote.iter().map(|(k, _)| *k).collect();
        for (to, idx) in self.group(&keys_remote, |n, k| n.route(k)) {
            let vals: Vec<(Key, &[f32])> = idx.iter().map(|i| remote[*i]).collect();
            self.send_writes(to, req, self.me, 0, write, &vals);
        }
        self.drain_loopback(now);
        Ok(())
    }

    /// Move `keys` here (Lapse's localize); completes with [`Completion::Localize`] when all
    /// of them are held here. Only [`crate::Technique::Relocation`] moves keys on request; under every
    /// other technique it completes at once and moves nothing (the adaptive techniques place
    /// keys by intent instead).
    pub fn localize(
        &mut self,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        keys: &[Key],
    ) -> Result<(), OpError> {
        self.check_command(worker, keys, None)?;
        if !self.cfg.technique.uses_localize() {
            self.complete(worker, ticket, Ok(Completion::Localize));
            return Ok(());
        }
        self.localize_as(now, worker, ticket, keys, PendingKind::Localize)
    }

    /// The body of [`Node::localize`], for a localize of `kind` (checked by the caller).
    fn localize_as(
        &mut self,
        now: Instant,
        worker: WorkerId,
        ticket: Ticket,
        keys: &[Key],
        kind: PendingKind,
    ) -> Result<(), OpError> {
        let wanted = keys.iter().filter(|k| !self.store.holds(**k) && !self.keys.is_incoming(**k)).count();
        // Room for every key on its way is reserved now, so that it can always be installed.
        if !self.store.reserve_slots(wanted) {
            return Err(OpError::StoreFull);
        }
        let req = self.new_request(now);
        let p = Pending::new(worker, ticket, kind, keys.to_vec(), now + self.cfg.request_timeout);
        self.start(req, p);
        let mut ask = Vec::new();
        for &k in keys {
            if self.store.holds(k) {
                self.answer(req, k, &[]);
                continue;
            }
            let first = self.keys.ask(k, |inc| {
                let first = inc.localizes.is_empty() && inc.ops.is_empty();
                inc.localizes.push(req);
                first
            });
            self.keys.localizes += 1;
            if first {
                ask.push(k);
            }
        }
        let me = self.me;
        for (to, ks) in self.group_by_route(&ask) {
            self.send_keys(to, ks, |keys| Message::Localize { origin: me, hops: 0, keys });
        }
        self.drain_loopback(now);
        Ok(())
    }

    /// Enter the cluster-wide barrier for `worker`; completes with [`Completion::Barrier`] when
    /// every worker of every node has entered it.
    pub fn barrier(&mut self, now: Instant, worker: WorkerId, ticket: Ticket) -> Result<(), OpError> {
        if worker.0 >= self.cfg.workers_per_node {
            return Err(OpError::InvalidArgument);
        }
        if !self.wants_input() {
            return Err(OpError::Busy);
        }
        if let Some(peer) = self.first_failed {
            return Err(OpError::PeerFailed { node: peer });
        }
        if let Some(generation) = self.barrier.enter(worker, ticket)? {
            self.send(barrier::COORDINATOR, Message::BarrierEnter { generation });
        }
        self.drain_loopback(now);
        Ok(())
    }

    // ----- internals shared by the submodules -----

    fn check_command(&self, worker: WorkerId, keys: &[Key], values: Option<usize>) -> Result<(), OpError> {
        if worker.0 >= self.cfg.workers_per_node {
            return Err(OpError::InvalidArgument);
        }
        let expected = self.cfg.layout.total_len(keys).map_err(|key| OpError::KeyOutsideLayout { key })?;
        if let Some(got) = values {
            if got != expected {
                return Err(OpError::ValueLength { expected, got });
            }
        }
        if keys.len() > 1 {
            let mut seen = HashSet::with_capacity(keys.len());
            if let Some(&key) = keys.iter().find(|k| !seen.insert(**k)) {
                return Err(OpError::DuplicateKey { key });
            }
        }
        if self.pending.len() >= self.cfg.requests_pending_max || !self.wants_input() {
            return Err(OpError::Busy);
        }
        Ok(())
    }

    fn new_request(&mut self, _now: Instant) -> RequestId {
        self.next_req += 1;
        RequestId(self.next_req)
    }

    /// Registers `p` under `req`, or completes it at once if nothing is outstanding.
    fn start(&mut self, req: RequestId, mut p: Pending) {
        if p.remaining == 0 {
            self.finish(p);
        } else {
            if self.next_scan.is_none() {
                self.next_scan = Some(p.deadline);
            }
            if !matches!(p.kind, PendingKind::Prefetch) {
                p.clock = self.clock(p.worker).0;
                self.gate.request_started(p.worker, p.clock, matches!(p.kind, PendingKind::Write));
            }
            self.pending.insert(req, p);
        }
    }

    /// What the gates know of a pending request: its worker, clock and whether it writes
    /// (`None` for a request no worker issued).
    fn gate_tag(p: &Pending) -> Option<(WorkerId, u64, bool)> {
        (!matches!(p.kind, PendingKind::Prefetch)).then_some((
            p.worker,
            p.clock,
            matches!(p.kind, PendingKind::Write),
        ))
    }

    /// A request left the pending ones (after its completion was queued, so that a worker
    /// sees it before a gate it lets pass): the gates no longer wait for it.
    fn request_ended(&mut self, tag: Option<(WorkerId, u64, bool)>) {
        if let Some((worker, clock, write)) = tag {
            self.gate.request_ended(worker, clock, write);
            self.gate_progress();
        }
    }

    /// `key` of request `req` is answered (with its value, for pulls).
    fn answer(&mut self, req: RequestId, key: Key, values: &[f32]) {
        let Some(p) = self.pending.get_mut(&req) else {
            self.stats.replies_late += 1;
            return;
        };
        if !p.answer(key, values) {
            self.stats.messages_rejected += 1;
            return;
        }
        if p.remaining == 0 {
            if let Some(p) = self.pending.remove(&req) {
                let tag = Node::gate_tag(&p);
                self.finish(p);
                self.request_ended(tag);
            }
        }
    }

    fn finish(&mut self, p: Pending) {
        let result = match p.kind {
            PendingKind::Pull { values, .. } => Completion::Pull(values),
            PendingKind::Write => Completion::Write,
            PendingKind::Localize => Completion::Localize,
            PendingKind::Prefetch => return,
        };
        self.complete(p.worker, p.ticket, Ok(result));
    }

    fn fail_request(&mut self, req: RequestId, err: OpError) {
        if let Some(p) = self.pending.remove(&req) {
            let tag = Node::gate_tag(&p);
            // Nothing waits for these keys on this request's behalf any more (a localize, or
            // an access waiting for a key on its way here). An entry keeps its reserved slot:
            // the key may still arrive, and is then installed.
            for k in &p.keys {
                if let Some(inc) = self.keys.incoming_mut(*k) {
                    let (ops, localizes) = (inc.ops.len(), inc.localizes.len());
                    inc.localizes.retain(|r| *r != req);
                    inc.ops.retain(|op| match op {
                        WaitingOp::Pull { req: r, .. } | WaitingOp::Write { req: r, .. } => *r != req,
                    });
                    let (ops, localizes) = (ops - inc.ops.len(), localizes - inc.localizes.len());
                    self.keys.waiting_ops -= ops;
                    self.keys.localizes -= localizes;
                }
            }
            self.stats.ops_failed += 1;
            if !matches!(p.kind, PendingKind::Prefetch) {
                self.complete(p.worker, p.ticket, Err(err));
            }
            self.request_ended(tag);
        }
    }

    fn complete(&mut self, worker: WorkerId, ticket: Ticket, result: Result<Completion, OpError>) {
        self.events.push_back(Event { worker, ticket, result });
    }

    fn send(&mut self, to: NodeId, msg: Message) {
        if to == self.me {
            self.loopback.push_back(msg);
        } else if self.failed_peers.contains(&to) {
            self.undeliverable(msg, OpError::PeerFailed { node: to });
        } else {
            let (cluster, sender, epoch) = (self.wire_cluster, self.me, self.epoch);
            self.outbox.push_back(Transmit { to, msg, cluster, sender, epoch });
        }
    }

    /// `msg` cannot be delivered (`err` says why): whoever waits for its answer learns
    /// it now instead of at its deadline.
    fn undeliverable(&mut self, msg: Message, err: OpError) {
        self.stats.messages_undeliverable += 1;
        match msg {
            Message::Pull { req, origin, keys, .. } | Message::Push { req, origin, keys, .. } => {
                if origin == self.me {
                    self.fail_request(req, err);
                } else {
                    let reason = match err {
                        OpError::FrameRefused { .. } => wire::FailReason::Refused,
                        OpError::PeerFailed { node } => wire::FailReason::Unreachable { node },
                        _ => wire::FailReason::Unreachable { node: self.me },
                    };
                    self.send(origin, Message::RequestFailed { req, reason, keys });
                }
            }
            msg @ Message::Sync { .. } => self.sync_undeliverable(&msg),
            Message::Localize { origin, keys, .. } if origin == self.me => {
                for k in keys {
                    let Some((inc, actions)) = self.keys.take_incoming(k, KeyEvent::WaitEnded) else {
                        continue;
                    };
                    if actions.contains(Actions::UNRESERVE) {
                        self.store.unreserve_slots(1);
                    }
                    let reqs = inc.ops.iter().map(|op| match op {
                        WaitingOp::Pull { req, .. } | WaitingOp::Write { req, .. } => *req,
                    });
                    for req in inc.localizes.iter().copied().chain(reqs).collect::<Vec<_>>() {
                        self.fail_request(req, err);
                    }
                }
            }
            // Anything else has no waiter here; the peers learn of the failure themselves.
            _ => {}
        }
    }

    fn drain_loopback(&mut self, now: Instant) {
        for _ in 0..LOOPBACK_STEPS_MAX {
            let Some(msg) = self.loopback.pop_front() else { return };
            self.dispatch(now, self.me, msg);
        }
    }

    fn home(&self, key: Key) -> NodeId {
        self.store.homes().home(key)
    }
}

#[cfg(test)]
mod tests;
