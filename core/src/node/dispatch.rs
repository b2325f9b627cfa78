//! Messages from peers: serving what this node holds, forwarding what it does not, and the
//! relocation handshake (hand over, owner update at the home node, pointer release).
//!
//! Routing, in one place:
//! - an origin sends a request for a key to: the owner its home-node record names (if it is the
//!   key's home), else the node it gave the key to (pointer), else its location cache, else the
//!   key's home node;
//! - a node that gets a request for a key it does not hold queues it if the key is on its way
//!   here, else forwards it to: the owner its home-node record names, else along its pointer,
//!   else to the key's home node. Forwarding never uses the cache, so a request visits the home
//!   node at most once per ownership epoch it chases: no loops.

use alloc::vec::Vec;

use super::lifecycle::{Actions, Event as KeyEvent};
use super::{Node, WaitingOp, HOPS_MAX};
use crate::ids::{Epoch, Key, NodeId, RequestId};
use crate::store::{InstallError, Whereabouts};
use crate::time::Instant;
use crate::wire::{FailReason, Message, Moved, OwnerChange, Release, WriteKind, HEADER_LEN};

/// Per-message overhead besides keys and values, generously.
const FIXED_BYTES: usize = 64;
/// Bytes per key besides its value, generously (key, epoch, version).
const KEY_BYTES: usize = 24;

impl Node {
    pub(super) fn dispatch(&mut self, now: Instant, from: NodeId, msg: Message) {
        if !self.valid(&msg) {
            self.stats.messages_rejected += 1;
            return;
        }
        match msg {
            Message::Pull { req, origin, hops, keys } => self.serve_pull(origin, req, hops, &keys),
            Message::PullReply { req, keys, values } => {
                let mut at = 0;
                for k in keys {
                    let len = self.cfg.layout.len_of(k).unwrap_or(0);
                    self.answer(req, k, &values[at..at + len]);
                    at += len;
                    self.learn_owner(k, from);
                }
            }
            Message::Push { req, origin, hops, write, keys, values } => {
                let mut at = 0;
                let pairs: Vec<(Key, &[f32])> = keys
                    .iter()
                    .map(|k| {
                        let len = self.cfg.layout.len_of(*k).unwrap_or(0);
                        at += len;
                        (*k, &values[at - len..at])
                    })
                    .collect();
                self.serve_write(origin, req, hops, write, &pairs);
            }
            Message::PushReply { req, keys } => {
                for k in keys {
                    self.answer(req, k, &[]);
                    self.learn_owner(k, from);
                }
            }
            Message::Localize { origin, hops, keys } => self.serve_localize(origin, hops, &keys),
            Message::Relocate { moved, values } => self.receive_keys(now, from, &moved, &values),
            Message::OwnerUpdate { changes } => self.record_owners(from, &changes),
            Message::PointerRelease { released } => {
                for r in released {
                    self.release_pointer(r.key, r.epoch);
                }
            }
            Message::RequestFailed { req, reason, .. } => {
                let err = match reason {
                    FailReason::RoutingLoop => crate::error::OpError::RoutingLoop,
                    FailReason::Busy => crate::error::OpError::Busy,
                    FailReason::Unreachable { node } => crate::error::OpError::Unreachable { node },
                    FailReason::StoreFull => crate::error::OpError::StoreFull,
                    FailReason::Refused => crate::error::OpError::FrameRefused { node: from },
                };
                self.fail_request(req, err);
            }
            Message::BarrierEnter { generation } => {
                if !self.barrier.accepts(from, generation) {
                    self.stats.messages_rejected += 1;
                } else if let Some(g) = self.barrier.coordinator_enter(from, generation) {
                    for n in 0..self.cfg.nodes {
                        self.send(NodeId(n), Message::BarrierRelease { generation: g });
                    }
                }
            }
            Message::BarrierRelease { generation } => {
                for (w, t) in self.barrier.release(generation) {
                    self.complete(w, t, Ok(super::Completion::Barrier));
                }
            }
            Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners } => {
                self.serve_sync(from, round, origin, hops, &starts, &ends, &replicas, &deltas, &owners)
            }
            Message::SyncReply { round, relocated, refreshed, acks, failed, values } => {
                self.sync_answered(now, from, round, &relocated, &refreshed, &acks, &failed, &values)
            }
            Message::DistCheck { dist, fingerprint } => self.check_distribution(from, dist, fingerprint),
            Message::Flushed { clock } => self.flushed_from(from, clock),
            Message::Speculate { query, below, keys } => self.serve_speculate(from, query, below, &keys),
            Message::SpeculateReply { query, clear } => self.speculate_answered(from, query, clear),
        }
    }

    /// Whole-message checks, before anything changes.
    fn valid(&self, msg: &Message) -> bool {
        let layout = &self.cfg.layout;
        let node_ok = |n: &NodeId| n.0 < self.cfg.nodes;
        let keys_ok = |keys: &[Key]| keys.iter().all(|k| layout.contains(*k));
        let vals_ok = |keys: &[Key], values: &[f32]| layout.total_len(keys) == Ok(values.len());
        match msg {
            Message::Pull { origin, keys, .. } => node_ok(origin) && keys_ok(keys),
            Message::PullReply { keys, values, .. } => vals_ok(keys, values),
            Message::Push { origin, keys, values, .. } => node_ok(origin) && vals_ok(keys, values),
            Message::PushReply { keys, .. } | Message::RequestFailed { keys, .. } => keys_ok(keys),
            Message::Localize { origin, keys, .. } => {
                self.cfg.technique.uses_localize() && node_ok(origin) && keys_ok(keys)
            }
            Message::Relocate { moved, values } => {
                let keys: Vec<Key> = moved.iter().map(|m| m.key).collect();
                // Under localize, or any technique that moves keys: a key that arrives where
                // there is no room for it goes on to its home in a `Relocate`.
                self.cfg.technique.moves_keys() && vals_ok(&keys, values)
            }
            Message::OwnerUpdate { changes } => self.cfg.technique.moves_keys() && self.changes_ok(changes),
            Message::Sync { origin, hops, starts, ends, replicas, deltas, owners, .. } => {
                let with_delta: Vec<Key> = replicas.iter().filter(|r| r.has_delta()).map(|r| r.key).collect();
                self.cfg.technique.uses_rounds()
                    && node_ok(origin)
                    && keys_ok(starts)
                    && keys_ok(ends)
                    && replicas.iter().all(|r| layout.contains(r.key))
                    && vals_ok(&with_delta, deltas)
                    && (owners.is_empty() || (*hops == 0 && self.changes_ok(owners)))
            }
            Message::SyncReply { relocated, refreshed, acks, failed, values, .. } => {
                let mut keys: Vec<Key> = relocated.iter().map(|m| m.key).collect();
                keys.extend(refreshed.iter().map(|r| r.key));
                self.cfg.technique.uses_rounds()
                    && (relocated.is_empty() || self.cfg.technique.moves_keys())
                    && keys_ok(acks)
                    && keys_ok(failed)
                    && vals_ok(&keys, values)
            }
            Message::PointerRelease { released } => released.iter().all(|r| layout.contains(r.key)),
            Message::BarrierEnter { .. } => self.me == super::barrier::COORDINATOR,
            Message::BarrierRelease { .. } => true,
            // Only SparseSSP speculates.
            Message::Speculate { keys, .. } => self.cfg.gate.speculation() > 0 && keys_ok(keys),
            Message::SpeculateReply { .. } => self.cfg.gate.speculation() > 0,
            Message::DistCheck { .. } | Message::Flushed { .. } => true,
        }
    }

    /// Ownership changes a home node may accept: its own keys, known previous owners.
    fn changes_ok(&self, changes: &[OwnerChange]) -> bool {
        changes.iter().all(|c| {
            self.cfg.layout.contains(c.key) && self.home(c.key) == self.me && c.prev.0 < self.cfg.nodes
        })
    }

    /// Where an origin sends a request for `key`, which it does not hold.
    pub(super) fn route(&self, key: Key) -> NodeId {
        match self.replica_owner(key) {
            Some(owner) => owner,
            None => self.route_past_replicas(key, self.store.whereabouts(key)),
        }
    }

    /// [`Node::route`] of `key`, whose whereabouts here are `w`.
    pub(super) fn route_with(&self, key: Key, w: Whereabouts) -> NodeId {
        self.replica_owner(key).unwrap_or_else(|| self.route_past_replicas(key, w))
    }

    /// [`Node::route`] of a key this node holds no replica of and sent no final delta for,
    /// whose whereabouts here are `w`.
    fn route_past_replicas(&self, key: Key, w: Whereabouts) -> NodeId {
        match w {
            Whereabouts::Away(owner, _) => owner,
            _ => self
                .keys
                .pointer(key)
                .map(|(to, _)| to)
                // A cached location on a failed node is no lead: ask the home node.
                .or_else(|| self.cache.get(key).filter(|n| !self.failed_peers.contains(n)))
                .unwrap_or_else(|| self.home(key)),
        }
    }

    /// Where a node that does not hold `key` forwards a request for it.
    pub(super) fn next_hop(&self, key: Key) -> NodeId {
        match self.store.whereabouts(key) {
            Whereabouts::Away(owner, _) => owner,
            _ => self.keys.pointer(key).map(|(to, _)| to).unwrap_or_else(|| self.home(key)),
        }
    }

    pub(super) fn group_by_route(&self, keys: &[Key]) -> Vec<(NodeId, Vec<Key>)> {
        self.group(keys, |n, k| n.route(k))
            .into_iter()
            .map(|(to, idx)| (to, idx.into_iter().map(|i| keys[i]).collect()))
            .collect()
    }

    /// Indices of `keys` grouped by the node `hop` names for each.
    pub(super) fn group(
        &self,
        keys: &[Key],
        hop: impl Fn(&Node, Key) -> NodeId,
    ) -> Vec<(NodeId, Vec<usize>)> {
        let mut groups: Vec<(NodeId, Vec<usize>)> = Vec::new();
        for (i, &k) in keys.iter().enumerate() {
            let to = hop(self, k);
            match groups.iter_mut().find(|(n, _)| *n == to) {
                Some((_, v)) => v.push(i),
                None => groups.push((to, alloc::vec![i])),
            }
        }
        groups
    }

    pub(super) fn learn_owner(&mut self, key: Key, owner: NodeId) {
        if owner != self.me {
            self.cache.put(key, owner);
        }
    }

    /// Whether an operation of this node's own workers on `key` may wait here for it: only
    /// when this node asked for the key and there is room. A request from another node never
    /// waits: asking for a key does not mean it is coming yet (another node may get it first),
    /// and two nodes that queued each other's requests would wait forever. With pointers and
    /// per-pair FIFO, no request of another node can arrive here before the key itself.
    pub(super) fn can_wait(&self, origin: NodeId, key: Key) -> bool {
        origin == self.me && self.keys.waiting_ops < self.cfg.waiting_ops_max && self.keys.is_incoming(key)
    }

    pub(super) fn wait_for(&mut self, key: Key, op: WaitingOp) {
        if let Some(inc) = self.keys.incoming_mut(key) {
            inc.ops.push_back(op);
            self.keys.waiting_ops += 1;
            self.stats.keys_waited += 1;
        }
    }

    /// Forwards a request for `keys` (none held here), or fails it if it has gone too far.
    fn forward(&mut self, origin: NodeId, req: Option<RequestId>, hops: u8, keys: Vec<Key>, mk: Fwd<'_>) {
        if keys.is_empty() {
            return;
        }
        // A key this node is home to and still holds, but could not serve: its slot could not be
        // created (the store is full). Forwarding would come straight back here.
        let (keys, stuck): (Vec<Key>, Vec<Key>) = keys.into_iter().partition(|k| !self.store.holds(*k));
        if !stuck.is_empty() {
            if let Some(req) = req {
                if origin == self.me {
                    self.fail_request(req, crate::error::OpError::StoreFull);
                } else {
                    let msg = Message::RequestFailed { req, reason: FailReason::StoreFull, keys: stuck };
                    self.send(origin, msg);
                }
            }
        }
        if keys.is_empty() {
            return;
        }
        self.stats.keys_forwarded += keys.len() as u64;
        if hops >= HOPS_MAX {
            if let Some(req) = req {
                let msg = Message::RequestFailed { req, reason: FailReason::RoutingLoop, keys };
                self.send(origin, msg);
            }
            return;
        }
        for (to, idx) in self.group(&keys, |n, k| n.next_hop(k)) {
            let ks: Vec<Key> = idx.iter().map(|i| keys[*i]).collect();
            match &mk {
                Fwd::Pull(req) => self.send_pulls(to, *req, origin, hops + 1, ks),
                Fwd::Write(req, write, pairs) => {
                    let sel: Vec<(Key, &[f32])> = idx.iter().map(|i| pairs[*i]).collect();
                    self.send_writes(to, *req, origin, hops + 1, *write, &sel);
                }
                Fwd::Localize => {
                    self.send_keys(to, ks, |keys| Message::Localize { origin, hops: hops + 1, keys });
                }
            }
        }
    }

    pub(super) fn serve_pull(&mut self, origin: NodeId, req: RequestId, hops: u8, keys: &[Key]) {
        self.stats.hops_max = self.stats.hops_max.max(hops);
        let (mut got, mut values, mut fwd) = (Vec::new(), Vec::new(), Vec::new());
        for &k in keys {
            let held = if origin == self.me {
                self.store.read_append(k, &mut values)
            } else {
                self.store.read_owned_append(k, &mut values)
            };
            if held {
                got.push(k);
            } else if self.can_wait(origin, k) {
                self.wait_for(k, WaitingOp::Pull { origin, req, hops });
            } else {
                fwd.push(k);
            }
        }
        if origin == self.me {
            let mut at = 0;
            for k in got {
                let len = self.cfg.layout.len_of(k).unwrap_or(0);
                self.answer(req, k, &values[at..at + len]);
                at += len;
            }
        } else if !got.is_empty() {
            self.stats.keys_served_for_peers += got.len() as u64;
            self.send_keys_values(origin, got, values, |keys, values| Message::PullReply {
                req,
                keys,
                values,
            });
        }
        self.forward(origin, Some(req), hops, fwd, Fwd::Pull(req));
    }

    pub(super) fn serve_write(
        &mut self,
        origin: NodeId,
        req: RequestId,
        hops: u8,
        write: WriteKind,
        pairs: &[(Key, &[f32])],
    ) {
        self.stats.hops_max = self.stats.hops_max.max(hops);
        let (mut done, mut fwd, mut fwd_pairs) = (Vec::new(), Vec::new(), Vec::new());
        for &(k, v) in pairs {
            let applied = match write {
                WriteKind::Add if origin == self.me => self.store.add(k, v),
                WriteKind::Add => self.store.add_owned(k, v),
                WriteKind::Set => self.store.set(k, v),
            };
            if applied {
                done.push(k);
            } else if self.can_wait(origin, k) {
                self.wait_for(k, WaitingOp::Write { origin, req, hops, write, values: v.to_vec() });
            } else {
                fwd.push(k);
                fwd_pairs.push((k, v));
            }
        }
        if origin == self.me {
            for k in done {
                self.answer(req, k, &[]);
            }
        } else if !done.is_empty() {
            self.stats.keys_served_for_peers += done.len() as u64;
            self.send_keys(origin, done, |keys| Message::PushReply { req, keys });
        }
        self.forward(origin, Some(req), hops, fwd, Fwd::Write(req, write, &fwd_pairs));
    }

    pub(super) fn serve_localize(&mut self, origin: NodeId, hops: u8, keys: &[Key]) {
        self.stats.hops_max = self.stats.hops_max.max(hops);
        let (mut moved, mut values, mut fwd) = (Vec::new(), Vec::new(), Vec::new());
        for &k in keys {
            if origin == self.me && self.store.holds(k) {
                // Our own request found the key already here: nothing to move.
                continue;
            }
            if self.keys.pointers >= self.cfg.pointers_max && self.store.holds(k) {
                // No room to remember where the key went: it stays (the requester's localize
                // times out).
                self.stats.moves_refused += 1;
                continue;
            }
            if let Some((epoch, version)) = self.store.take(k, origin, &mut values) {
                moved.push(Moved { key: k, epoch, version });
                self.keys.departed(k, origin, epoch);
                self.cache.put(k, origin);
                self.stats.relocations_out += 1;
            } else {
                fwd.push(k);
            }
        }
        if !moved.is_empty() {
            let lens: Vec<usize> = moved.iter().map(|m| self.cfg.layout.len_of(m.key).unwrap_or(0)).collect();
            let mut at = 0;
            for chunk in self.chunks_by_len(&lens) {
                let ms = moved[chunk.clone()].to_vec();
                let n: usize = lens[chunk].iter().sum();
                let vs = values[at..at + n].to_vec();
                at += n;
                self.send(origin, Message::Relocate { moved: ms, values: vs });
            }
        }
        self.forward(origin, None, hops, fwd, Fwd::Localize);
    }

    /// Keys handed over to this node by `from`.
    fn receive_keys(&mut self, now: Instant, from: NodeId, moved: &[Moved], values: &[f32]) {
        let mut at = 0;
        let mut updates: Vec<(NodeId, OwnerChange)> = Vec::new();
        let mut arrived = Vec::new();
        for m in moved {
            let len = self.cfg.layout.len_of(m.key).unwrap_or(0);
            let v = &values[at..at + len];
            at += len;
            // A key this node asked for has its slot reserved since the request; the
            // reservation belongs to the key's incoming record.
            let reserved = if self.keys.is_incoming(m.key) { Reserved::Incoming } else { Reserved::No };
            if let Some(change) = self.install_moved(from, m, v, reserved) {
                updates.push(change);
                arrived.push(m.key);
            }
        }
        let homes: Vec<NodeId> = {
            let mut h: Vec<NodeId> = updates.iter().map(|(h, _)| *h).collect();
            h.sort_unstable();
            h.dedup();
            h
        };
        for h in homes {
            let changes: Vec<OwnerChange> =
                updates.iter().filter(|(x, _)| *x == h).map(|(_, c)| *c).collect();
            for chunk in changes.chunks(self.cfg.keys_per_message_max) {
                self.send(h, Message::OwnerUpdate { changes: chunk.to_vec() });
            }
        }
        for k in arrived {
            self.arrived(now, k);
        }
    }

    /// Installs a key handed over by `from` (into a slot reserved for it if `reserved`) and
    /// returns the ownership change to report to its home. A node reserves a slot for every key
    /// it asks for, but an answer can outlive its reservation: a sync round that was given up
    /// still gets its late answers, and the key may come in one of them after the slot went
    /// back. A key that does not fit is never dropped (its old owner gave it away): it goes on
    /// to its home node, which always has room for the keys homed there (see
    /// [`Node::send_home`]). A second main copy, or values of the wrong length (a peer's bug),
    /// are refused and counted; the copy already here is kept.
    pub(super) fn install_moved(
        &mut self,
        from: NodeId,
        m: &Moved,
        values: &[f32],
        reserved: Reserved,
    ) -> Option<(NodeId, OwnerChange)> {
        match self.store.install(m.key, m.epoch, m.version, values, reserved != Reserved::No) {
            Ok(()) => {}
            Err(e) => {
                // A sync round's reservation ended with its answer. An incoming record keeps
                // its own until the entry goes (the key may still come: this copy may have
                // been a stale or bogus one); giving it back here left the entry without one,
                // so that more keys could be on their way than `store_keys_max`.
                if reserved == Reserved::Round {
                    self.store.unreserve_slots(1);
                }
                if matches!(e, InstallError::Full | InstallError::ArenaFull) && self.home(m.key) != self.me {
                    self.send_home(from, m, values);
                } else {
                    self.stats.installs_failed += 1;
                }
                return None;
            }
        }
        self.stats.relocations_in += 1;
        self.cache.forget(m.key);
        self.sync_key_installed(m.key);
        Some((self.home(m.key), OwnerChange { key: m.key, epoch: m.epoch, prev: from }))
    }

    /// A key that arrived from `from` without room here goes on to its home. The home first
    /// hears that this node owned it (epoch `m.epoch`, so that `from` drops its pointer), then
    /// gets the key itself one epoch later; both on the same FIFO path, so every request this
    /// node forwards toward the home afterwards finds the key there. A replica of the key held
    /// here goes too: its unsent updates travel in the value.
    fn send_home(&mut self, from: NodeId, m: &Moved, values: &[f32]) {
        let home = self.home(m.key);
        let mut value = values.to_vec();
        let mut version = m.version;
        let mut delta = Vec::new();
        if self.store.drop_replica(m.key, &mut delta).is_some() {
            self.sync_forget_replica(m.key);
            self.stats.replicas_destroyed += 1;
            version = crate::store::fold_unsent(&mut value, &delta, version);
        }
        self.stats.installs_sent_home += 1;
        self.cache.put(m.key, home);
        let change = OwnerChange { key: m.key, epoch: m.epoch, prev: from };
        self.send(home, Message::OwnerUpdate { changes: alloc::vec![change] });
        let moved = Moved { key: m.key, epoch: m.epoch.next(), version };
        self.send(home, Message::Relocate { moved: alloc::vec![moved], values: value });
    }

    /// `key` is held here now: complete local localizes and run what waited for it, in order.
    #[inline]
    pub(super) fn arrived(&mut self, now: Instant, key: Key) {
        // Only a localize makes a key incoming (`Technique::Relocation`): most nodes have none.
        if self.keys.incoming > 0 {
            self.run_waiting(now, key);
        }
    }

    fn run_waiting(&mut self, _now: Instant, key: Key) {
        let Some((inc, actions)) = self.keys.take_incoming(key, KeyEvent::Arrived) else { return };
        invariant!(actions.contains(Actions::RUN_WAITING), "a key arrived without running what waited");
        for req in inc.localizes {
            self.answer(req, key, &[]);
        }
        for op in inc.ops {
            match op {
                WaitingOp::Pull { origin, req, hops } => self.serve_pull(origin, req, hops, &[key]),
                WaitingOp::Write { origin, req, hops, write, values } => {
                    self.serve_write(origin, req, hops, write, &[(key, &values)])
                }
            }
        }
    }

    /// At the home node: `from` now owns these keys. Records what is newer and, in any case,
    /// lets the previous owner drop its pointer for that epoch.
    pub(super) fn record_owners(&mut self, from: NodeId, changes: &[OwnerChange]) {
        // Releases grouped by previous owner, each group in the order of `changes`.
        let mut releases: Vec<(NodeId, Release)> = Vec::with_capacity(changes.len());
        for c in changes {
            self.store.record_owner(c.key, from, c.epoch);
            releases.push((c.prev, Release { key: c.key, epoch: c.epoch }));
        }
        releases.sort_by_key(|r| r.0);
        for group in releases.chunk_by(|a, b| a.0 == b.0) {
            let p = group[0].0;
            if p == self.me {
                for r in group {
                    self.release_pointer(r.1.key, r.1.epoch);
                }
            } else {
                for chunk in group.chunks(self.cfg.keys_per_message_max) {
                    let released = chunk.iter().map(|r| r.1).collect();
                    self.send(p, Message::PointerRelease { released });
                }
            }
        }
    }

    #[inline]
    fn release_pointer(&mut self, key: Key, epoch: Epoch) {
        self.keys.release_pointer(key, epoch);
    }

    // ----- building messages within the frame and key-count bounds -----

    /// Splits `lens` (value lengths of consecutive keys) into ranges that fit one frame each.
    fn chunks_by_len(&self, lens: &[usize]) -> Vec<core::ops::Range<usize>> {
        let mut budget = Budget::new(&self.cfg);
        let mut out = Vec::new();
        let mut start = 0;
        for (i, &len) in lens.iter().enumerate() {
            if budget.take(KEY_BYTES + 4 * len) {
                out.push(start..i);
                start = i;
            }
        }
        if start < lens.len() {
            out.push(start..lens.len());
        }
        out
    }

    pub(super) fn send_keys(&mut self, to: NodeId, keys: Vec<Key>, mk: impl Fn(Vec<Key>) -> Message) {
        for chunk in keys.chunks(self.cfg.keys_per_message_max) {
            self.send(to, mk(chunk.to_vec()));
        }
    }

    fn send_keys_values(
        &mut self,
        to: NodeId,
        keys: Vec<Key>,
        values: Vec<f32>,
        mk: impl Fn(Vec<Key>, Vec<f32>) -> Message,
    ) {
        let lens: Vec<usize> = keys.iter().map(|k| self.cfg.layout.len_of(*k).unwrap_or(0)).collect();
        let mut at = 0;
        for chunk in self.chunks_by_len(&lens) {
            let n: usize = lens[chunk.clone()].iter().sum();
            self.send(to, mk(keys[chunk].to_vec(), values[at..at + n].to_vec()));
            at += n;
        }
    }

    /// Pull requests, split so that each one's reply fits a frame.
    pub(super) fn send_pulls(
        &mut self,
        to: NodeId,
        req: RequestId,
        origin: NodeId,
        hops: u8,
        keys: Vec<Key>,
    ) {
        let lens: Vec<usize> = keys.iter().map(|k| self.cfg.layout.len_of(*k).unwrap_or(0)).collect();
        for chunk in self.chunks_by_len(&lens) {
            self.send(to, Message::Pull { req, origin, hops, keys: keys[chunk].to_vec() });
        }
    }

    pub(super) fn send_writes(
        &mut self,
        to: NodeId,
        req: RequestId,
        origin: NodeId,
        hops: u8,
        write: WriteKind,
        pairs: &[(Key, &[f32])],
    ) {
        let lens: Vec<usize> = pairs.iter().map(|(_, v)| v.len()).collect();
        for chunk in self.chunks_by_len(&lens) {
            let keys = pairs[chunk.clone()].iter().map(|(k, _)| *k).collect();
            let values = pairs[chunk].iter().flat_map(|(_, v)| v.iter().copied()).collect();
            self.send(to, Message::Push { req, origin, hops, write, keys, values });
        }
    }
}

/// Fills messages up to the frame and key-count bounds: every builder of a multi-key message
/// asks it, entry by entry, whether the entry must start a new message.
pub(super) struct Budget {
    bytes: usize,
    entries: usize,
    bytes_max: usize,
    entries_max: usize,
}

impl Budget {
    pub(super) fn new(cfg: &crate::Config) -> Budget {
        Budget {
            bytes: 0,
            entries: 0,
            bytes_max: cfg.frame_len_max.saturating_sub(HEADER_LEN + FIXED_BYTES),
            entries_max: cfg.keys_per_message_max,
        }
    }

    /// Whether `entries` entries of `bytes` bytes in all fit one message: exactly when
    /// [`Budget::take`] on a new budget would answer false for every one of them.
    pub(super) fn fits(&self, entries: usize, bytes: usize) -> bool {
        entries <= 1 || (entries <= self.entries_max && self.bytes + bytes <= self.bytes_max)
    }

    /// Counts an entry of `cost` bytes; true if the message so far must be sent first (the
    /// entry then opens the next one). The first entry of a message always fits.
    pub(super) fn take(&mut self, cost: usize) -> bool {
        let full =
            self.entries > 0 && (self.bytes + cost > self.bytes_max || self.entries >= self.entries_max);
        if full {
            self.bytes = 0;
            self.entries = 0;
        }
        self.bytes += cost;
        self.entries += 1;
        full
    }
}

/// What kind of request `forward` re-sends.
enum Fwd<'a> {
    Pull(RequestId),
    Write(RequestId, WriteKind, &'a [(Key, &'a [f32])]),
    Localize,
}

/// Whose reservation, if any, a key handed over to this node may take (see
/// [`Node::install_moved`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reserved {
    /// None: the key takes a slot of its own, if there is room.
    No,
    /// The sync round's entry for the key, which its answer ends.
    Round,
    /// The key's incoming record, which keeps it while the key is asked for.
    Incoming,
}
