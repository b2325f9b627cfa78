//! Counters a node keeps about itself, readable by the application.

/// Number of message kinds counted separately (wire kinds are below this).
pub const KINDS: usize = 16;

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
    /// Frames dropped because they could not be decoded or came from a stranger.
    pub frames_dropped: u64,
    /// Messages dropped because their content made no sense (keys outside the layout, wrong
    /// value lengths, impossible states).
    pub messages_rejected: u64,
    /// Messages not sent because their destination had failed.
    pub messages_undeliverable: u64,
    /// Replies for requests that had already ended (timed out or failed).
    pub replies_late: u64,
    /// Worker operations that ended with an error.
    pub ops_failed: u64,
    /// Most hops any request travelled to reach this node.
    pub hops_max: u8,
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
}
