//! Typed errors. Bad input from a peer or a caller is a value, never a panic.

use core::fmt;

use crate::ids::{Key, NodeId, WorkerId};

/// A configuration that cannot work.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The key space has no keys.
    EmptyKeySpace,
    /// A value length of zero or above [`crate::layout::VALUE_LEN_MAX`].
    ValueLen { len: u32 },
    /// Per-range lengths must begin with a range at key 0.
    RangesMustStartAtZero,
    /// Range starts must increase strictly and stay below the key end.
    RangesNotIncreasing,
    /// A cluster needs between 1 and `NODES_MAX` nodes.
    NodeCount { nodes: u16 },
    /// This node's id is not below the node count.
    NodeOutOfRange { node: NodeId },
    /// A node needs at least one worker.
    NoWorkers,
    /// A bound that must be positive (or a power of two) is not.
    Bound { name: &'static str },
}

/// Why a frame could not be decoded (or encoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than a header, or a field runs past the end of the frame.
    Truncated,
    /// Longer than the configured maximum frame length.
    Oversized { len: usize },
    /// Does not start with the magic bytes.
    BadMagic,
    /// Written by a newer (or unknown) format version.
    UnsupportedVersion { version: u8 },
    /// From another cluster.
    ForeignCluster { cluster: u32 },
    /// A message kind this version does not know.
    UnknownKind { kind: u8 },
    /// A reserved field is not zero, or an enum field has no meaning.
    BadField,
    /// A count does not fit in the bytes that follow it.
    CountTooLarge,
    /// Bytes left over after the message's last field.
    TrailingBytes,
    /// The header's body length disagrees with the frame length.
    LengthMismatch,
    /// Encoding: the buffer is smaller than `encoded_len()`.
    BufferTooSmall,
}

/// Why a worker operation was refused or did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpError {
    /// A key outside the layout; nothing was changed.
    KeyOutsideLayout { key: Key },
    /// The value buffer's length does not match the keys' value lengths; nothing was changed.
    ValueLength { expected: usize, got: usize },
    /// A key appears twice in one call; nothing was changed.
    DuplicateKey { key: Key },
    /// A bounded queue or table is full; try again after waiting for earlier operations.
    Busy,
    /// This node cannot hold more keys (`Config::store_keys_max`).
    StoreFull,
    /// No answer within `Config::request_timeout`.
    Timeout,
    /// A peer failed while the operation was outstanding.
    PeerFailed { node: NodeId },
    /// The request travelled more than `HOPS_MAX` hops: a bug, reported instead of looping.
    RoutingLoop,
    /// A node on the request's way knew that the next node, `node`, had failed.
    Unreachable { node: NodeId },
    /// A transport refused for good a frame of the request, or of its answer, on its way to or
    /// from `node` (larger than it accepts although within `Config::frame_len_max`, or a peer
    /// it does not know).
    FrameRefused { node: NodeId },
    /// The node is shutting down or has shut down.
    Closed,
    /// The call is not valid in the current state (e.g. a worker id out of range).
    InvalidArgument,
    /// A sampling call was refused; nothing was changed.
    Sampling(crate::sampling::SampleError),
    /// The worker's command queue to its node stayed full for `Config::request_timeout`: the
    /// node's driver took none of the commands ahead of it meanwhile.
    QueueStalled,
    /// Not every worker reached the barrier within the runtime's barrier timeout (a runtime
    /// option, unset by default: a barrier then waits as long as every peer is alive).
    BarrierTimeout,
    /// The clock gate did not let the worker go on within the runtime's barrier timeout.
    GateTimeout,
    /// Worker `worker` of this node was dropped without `finalize`: no barrier of the node can
    /// pass without it.
    WorkerLeft { worker: WorkerId },
    /// The node's waits were aborted (the runtime's `abort`, e.g. because another worker of the
    /// job failed); nothing more is done for this worker.
    Aborted,
    /// An intent (or an announcement, or a prepared sample) for the clock window
    /// `[start, end)` whose start is not before its end: such a window holds no clock.
    IntentWindow { start: crate::Clock, end: crate::Clock },
}

impl OpError {
    /// Whether this error can be what a worker sees when a peer failed: the peer's own
    /// failure, a node on the way knowing of it, a frame to it refused, a request it never
    /// answered, or the node's waits aborted because another worker stopped for one of these.
    /// A caller that also knows a peer failed reports the peer, the cause, rather than this.
    pub fn may_come_from_a_failed_peer(&self) -> bool {
        matches!(
            self,
            OpError::PeerFailed { .. }
                | OpError::Unreachable { .. }
                | OpError::FrameRefused { .. }
                | OpError::Timeout
                | OpError::Aborted
        )
    }
}

impl From<crate::sampling::SampleError> for OpError {
    fn from(e: crate::sampling::SampleError) -> OpError {
        OpError::Sampling(e)
    }
}

/// What a valid value of the bound `name` (as [`ConfigError::Bound`] names it) looks like.
fn bound_rule(name: &str) -> &'static str {
    match name {
        "store_shards" => "a power of two from 1 to config::STORE_SHARDS_MAX",
        "location_cache_slots" => "a power of two",
        "frame_len_max" => {
            "at least a header plus one key with the longest value (4 bytes a float), and at most u32::MAX"
        }
        "request_timeout" | "sync_idle_interval" => {
            "a positive duration (and sync_rounds_per_sec_max, if set, positive)"
        }
        "gate speculation" => "Gate::SparseSsp's speculation of at least 1",
        "timing" => "alpha in (0, 1], p in (0, 1) and lambda0 at least 0",
        "sampling" => "every SamplingOptions bound positive and pool_size at most sample_size_max",
        "replicas_max" => {
            "full replication needs replicas_max and intent_keys_max at least the number of keys"
        }
        "hot_keys" => "at most replicas_max hot keys, each inside the layout",
        _ => "a positive value",
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::config::NODES_MAX;
        use crate::layout::VALUE_LEN_MAX;
        match self {
            ConfigError::EmptyKeySpace => f.write_str("the key space has no keys: give at least one key"),
            ConfigError::ValueLen { len } => {
                write!(f, "value length {len} is not valid: it must be from 1 to {VALUE_LEN_MAX} floats")
            }
            ConfigError::RangesMustStartAtZero => {
                f.write_str("the first range of per-range value lengths must start at key 0")
            }
            ConfigError::RangesNotIncreasing => {
                f.write_str("range starts must increase strictly and stay below the end of the key space")
            }
            ConfigError::NodeCount { nodes } => {
                write!(f, "a cluster of {nodes} nodes is not valid: it needs from 1 to {NODES_MAX}")
            }
            ConfigError::NodeOutOfRange { node } => {
                write!(f, "node id {node} is out of range: it must be below the configuration's node count")
            }
            ConfigError::NoWorkers => f.write_str("workers_per_node is 0: a node needs at least one worker"),
            ConfigError::Bound { name } => write!(f, "bad {name}: it must be {}", bound_rule(name)),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::wire::FORMAT_VERSION;
        match self {
            WireError::Truncated => f.write_str("frame truncated: a field runs past its end"),
            WireError::Oversized { len } => {
                write!(f, "frame of {len} bytes is longer than the configured frame_len_max")
            }
            WireError::BadMagic => f.write_str("not a parma frame (it does not start with the magic bytes)"),
            WireError::UnsupportedVersion { version } => {
                write!(f, "frame format version {version}, this node reads version {FORMAT_VERSION}")
            }
            WireError::ForeignCluster { cluster } => write!(
                f,
                "frame from cluster {cluster:#010x}, not this node's: check that every node has the same configuration"
            ),
            WireError::UnknownKind { kind } => write!(f, "unknown message kind {kind} in a frame"),
            WireError::BadField => f.write_str("frame with a nonzero reserved field or an enum field out of range"),
            WireError::CountTooLarge => f.write_str("frame with a count larger than the bytes that follow it"),
            WireError::TrailingBytes => f.write_str("frame with bytes left over after its last field"),
            WireError::LengthMismatch => f.write_str("frame whose header body length disagrees with its length"),
            WireError::BufferTooSmall => f.write_str("encode buffer smaller than the message's encoded_len()"),
        }
    }
}
impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::KeyOutsideLayout { key } => write!(f, "key {key} is outside the layout"),
            OpError::ValueLength { expected, got } => {
                write!(f, "value buffer has {got} floats, the keys need {expected}")
            }
            OpError::DuplicateKey { key } => write!(f, "key {key} appears twice in one call"),
            OpError::Busy => f.write_str("a bounded queue is full; wait for earlier operations"),
            OpError::StoreFull => f.write_str("this node's store is full"),
            OpError::Timeout => f.write_str("no answer within the request timeout (Config::request_timeout)"),
            OpError::PeerFailed { node } => write!(f, "node {node} failed"),
            OpError::RoutingLoop => f.write_str("request exceeded the hop limit (a parma bug)"),
            OpError::Unreachable { node } => write!(f, "node {node} failed (a node on the way knew)"),
            OpError::FrameRefused { node } => write!(
                f,
                "a transport refused a frame of this request on its way to or from node {node} \
                 (too large for it, or a peer it does not know)"
            ),
            OpError::Closed => f.write_str("the node is shut down"),
            OpError::InvalidArgument => f.write_str("invalid argument"),
            OpError::Sampling(e) => write!(f, "sampling: {e}"),
            OpError::QueueStalled => f.write_str(
                "the command queue to the node stayed full for the request timeout \
                 (Config::request_timeout): the node's driver did not take commands",
            ),
            OpError::BarrierTimeout => f.write_str(
                "not every worker reached the barrier within the barrier timeout \
                 (Options::barrier_timeout; unset, a barrier waits as long as every peer is alive)",
            ),
            OpError::GateTimeout => f.write_str(
                "the clock gate did not open within the barrier timeout (Options::barrier_timeout; \
                 unset, a gate waits as long as every peer is alive)",
            ),
            OpError::WorkerLeft { worker } => write!(
                f,
                "worker {} of this node was dropped without finalize, so no barrier can pass",
                worker.0
            ),
            OpError::Aborted => f.write_str("aborted: another worker of the job failed"),
            OpError::IntentWindow { start, end } => write!(
                f,
                "empty clock window [{}, {}): an intent's start must be before its end (end is exclusive)",
                start.0, end.0
            ),
        }
    }
}

impl core::error::Error for ConfigError {}
impl core::error::Error for WireError {}
impl core::error::Error for OpError {}

#[cfg(test)]
mod tests;
