//! Counters a node keeps about itself, readable by the application.

/// Number of message kinds counted separately (wire kinds are below this).
pub(crate) const KINDS: usize = 18;

/// Counters of one node's protocol work. All counts since the node started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Keys of worker pulls that had to go remote.
    pub keys_pulled_remote: u64,
    /// Keys of worker pushes and sets that had to go remote.
    pub keys_pushed_remote: u64,
    /// Keys of worker operations served by the node from its store after all (the key arrived
    /// between the worker's attempt and the node's).
    pub keys_served_late_local: u64,
    /// Keys served here for requests of other nodes.
    pub keys_served_for_peers: u64,
    /// Keys forwarded because this node did not hold them.
    pub keys_forwarded: u64,
    /// Keys of operations that waited here for a key on its way.
    pub keys_waited: u64,
    /// Keys moved here.
    pub relocations_in: u64,
    /// Keys moved away from here.
    pub relocations_out: u64,
    /// Messages and bytes sent, by wire kind.
    pub messages_sent: [u64; KINDS],
    pub bytes_sent: [u64; KINDS],
    /// Messages and bytes received and accepted, by wire kind.
    pub messages_received: [u64; KINDS],
    pub bytes_received: [u64; KINDS],
    /// Incoming frames rejected unread: undecodable, or from a stranger (the runtime counts
    /// frames it could not send as `frames_dropped`, a different thing).
    pub frames_rejected: u64,
    /// Of those, frames from another cluster, or from a node of this one whose configuration
    /// differs in what all nodes must agree on (see `Config::wire_cluster`).
    pub frames_foreign: u64,
    /// Of those, frames of another membership epoch than this node's (`docs/membership.md`).
    pub frames_other_epoch: u64,
    /// Frames and messages dropped because their sender is outside this node's membership: a
    /// peer reported failed (or that stopped cleanly), whose frames still arrived. Not in
    /// `frames_rejected`: such frames are no stranger's.
    pub from_non_members: u64,
    /// Messages dropped because their content made no sense (keys outside the layout, wrong
    /// value lengths, impossible states).
    pub messages_rejected: u64,
    /// Messages not sent because their destination had failed, or because the transport
    /// refused them ([`crate::Node::handle_send_refused`]).
    pub messages_undeliverable: u64,
    /// Messages the transport refused for good (too large for it, or a peer it does not know).
    pub messages_refused: u64,
    /// Replies for requests that had already ended (timed out or failed).
    pub replies_late: u64,
    /// Worker operations that ended with an error.
    pub ops_failed: u64,
    /// Keys this node kept instead of giving them away, because its table of forwarding
    /// pointers was full.
    pub moves_refused: u64,
    /// Keys that arrived but could not be installed (a second main copy, or values of the
    /// wrong length): always a bug, ours or a peer's.
    pub installs_failed: u64,
    /// Keys that arrived after the slot reserved for them had been given back (a late answer
    /// to a sync round that was given up) and found the store full: passed on to their home.
    pub installs_sent_home: u64,
    /// Most hops any request travelled to reach this node.
    pub hops_max: u8,
    /// Intents this node's workers signaled to it, and the keys in them (a runtime worker
    /// sends none where `Config::acts_on_intents` is false, so none are counted there).
    pub intents_signaled: u64,
    /// Keys of the intents signaled for prepared samples (counted in `intent_keys_signaled` too).
    pub sample_intent_keys: u64,
    /// Sampling distributions a peer registered differently from this node (or that this node
    /// can never register: beyond `SamplingOptions::distributions_max`).
    pub distribution_mismatches: u64,
    pub intent_keys_signaled: u64,
    /// Intents signaled by kind: read and write, read, write (see `IntentKind`).
    pub intents_by_kind: [u64; 3],
    /// Intents that expired before they were acted on (their window was already past).
    pub intents_expired_unacted: u64,
    /// Keys whose aggregated intent on this node began (0 to positive) and ended.
    pub intent_starts: u64,
    pub intent_ends: u64,
    /// Intent starts not sent in a round because the store had no room left for the key
    /// (retried next round).
    pub starts_deferred: u64,
    /// Intent starts given up because the key's way leads through a failed node.
    pub starts_abandoned: u64,
    /// Sync rounds started, and rounds given up (their answers took longer than the request
    /// timeout, or a peer failed while they were open).
    pub sync_rounds: u64,
    pub sync_rounds_abandoned: u64,
    /// Sync entries that came back unrouted (hop limit or a failed node on the way).
    pub sync_entries_failed: u64,
    /// Replicas this node created (filled) and dropped; replicas that became the main copy.
    pub replicas_created: u64,
    pub replicas_destroyed: u64,
    pub replicas_upgraded: u64,
    /// Replicas this node could not hold (`Config::replicas_max`).
    pub replicas_refused: u64,
    /// As owner: replicas given to other nodes, and refreshes sent to their holders.
    pub replicas_served: u64,
    pub refreshes_sent: u64,
    /// Replica deltas sent to owners, and deltas merged here as owner.
    pub deltas_sent: u64,
    pub deltas_merged: u64,
    /// Deltas that could not be delivered because their owner had failed.
    pub deltas_lost: u64,
    /// Replica staleness (time since the replica's last refresh or check for updates),
    /// sampled for every replica at the start of every round: sum, samples and maximum, in µs.
    pub staleness_sum_us: u64,
    pub staleness_samples: u64,
    pub staleness_max_us: u64,
    /// Under SparseSSP: gate waits that passed on speculation (before the staleness bound
    /// alone would have let them), and speculations that met a conflict and waited on.
    pub gates_speculated: u64,
    pub speculations_conflicted: u64,
}

impl Stats {
    /// Messages sent, all kinds.
    pub fn messages_sent_total(&self) -> u64 {
        self.messages_sent.iter().sum()
    }
    /// Bytes sent, all kinds.
    pub fn bytes_sent_total(&self) -> u64 {
        self.bytes_sent.iter().sum()
    }
    /// Samples the staleness of a replica last refreshed at `refreshed`, at the round's start
    /// `now`.
    #[inline]
    pub(crate) fn sample_staleness(&mut self, now: crate::time::Instant, refreshed: crate::time::Instant) {
        let age = now.saturating_since(refreshed).as_micros();
        self.staleness_sum_us += age;
        self.staleness_samples += 1;
        self.staleness_max_us = self.staleness_max_us.max(age);
    }

    /// Mean replica staleness in µs over all samples (0 without samples).
    pub fn staleness_mean_us(&self) -> f64 {
        if self.staleness_samples == 0 {
            0.0
        } else {
            self.staleness_sum_us as f64 / self.staleness_samples as f64
        }
    }
}

/// The sizes of a node's tables that can grow with the cluster or with the keys it handles,
/// at one moment (see [`crate::Node::tables`]). Entries, not bytes, except `store_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tables {
    /// Keys with a protocol record (the hot part: intent counts and round flags).
    pub key_records: usize,
    /// Keys with a cold part: a forwarding pointer, a replica, holders, or an incoming key.
    pub cold_records: usize,
    /// Of those: forwarding pointers of keys given away.
    pub pointers: usize,
    /// Replicas held here.
    pub replicas: usize,
    /// As owner: keys with replica holders, the holder entries over all of them, and the
    /// longest holder list.
    pub keys_with_holders: usize,
    pub holder_entries: usize,
    pub holders_longest: usize,
    /// Requests of local workers waiting for other nodes.
    pub pending_requests: usize,
    /// Frames waiting in the outbox for the driver.
    pub outbox_frames: usize,
    /// Keys that arrived lately and are held back from moving on (the relocation hold).
    pub arrived: usize,
    /// Keys waiting for the next sync round, and ownership changes for home nodes waiting for it.
    pub touched: usize,
    pub owner_updates: usize,
    /// Slots of the per-peer vectors (flushed clocks, the barrier's entries): one per node of
    /// the cluster, allocated at start.
    pub peer_slots: usize,
    /// Bytes the store has allocated ([`crate::store::Footprint`]: slots, arenas, free lists).
    pub store_bytes: usize,
}

impl Tables {
    /// The larger of each field of `self` and `other` (a high-water mark over samples or
    /// nodes).
    pub fn max(self, other: Tables) -> Tables {
        Tables {
            key_records: self.key_records.max(other.key_records),
            cold_records: self.cold_records.max(other.cold_records),
            pointers: self.pointers.max(other.pointers),
            replicas: self.replicas.max(other.replicas),
            keys_with_holders: self.keys_with_holders.max(other.keys_with_holders),
            holder_entries: self.holder_entries.max(other.holder_entries),
            holders_longest: self.holders_longest.max(other.holders_longest),
            pending_requests: self.pending_requests.max(other.pending_requests),
            outbox_frames: self.outbox_frames.max(other.outbox_frames),
            arrived: self.arrived.max(other.arrived),
            touched: self.touched.max(other.touched),
            owner_updates: self.owner_updates.max(other.owner_updates),
            peer_slots: self.peer_slots.max(other.peer_slots),
            store_bytes: self.store_bytes.max(other.store_bytes),
        }
    }
}
