//! What crosses between the process executor and its agents: one JSON object per line, the
//! executor's [`Request`]s on the agent's stdin, the agent's [`Response`]s on its stdout.
//!
//! Values (`f32`, and a weighted distribution's probabilities) cross as their bit patterns,
//! so that nothing is rounded on the way. Ids cross as their numbers. Every line is read
//! with a bound on its length ([`read_line`]), and whatever a line holds is checked on its
//! way in: a bad line is an error value, never a panic.

use std::io::BufRead;

use parma_core::sampling::{SampleError, SamplingStats};
use parma_core::{
    Conformity, DistId, Distribution, Gate, Key, Layout, NodeId, OpError, Placement, SampleHandle,
    SamplingOptions, Technique,
};
use serde::{Deserialize, Serialize};

use crate::trace::{CheckpointOp, Setup};

/// Longest line either side reads; a longer one ends the conversation.
pub const LINE_LEN_MAX: usize = 16 << 20;

/// Reads one line of at most [`LINE_LEN_MAX`] bytes, without its end: `Ok(None)` at the end
/// of the input.
pub fn read_line<R: BufRead>(input: &mut R) -> Result<Option<String>, String> {
    let mut line = Vec::new();
    let n = <&mut R as std::io::Read>::take(input, LINE_LEN_MAX as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("cannot read: {e}"))?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(if n > LINE_LEN_MAX {
            format!("a line longer than {LINE_LEN_MAX} bytes")
        } else {
            "the input ended inside a line".into()
        });
    }
    line.pop();
    String::from_utf8(line).map(Some).map_err(|_| "a line that is not UTF-8".into())
}

/// A trace's [`Setup`] as it crosses: the first line an agent reads. Only uniform layouts
/// cross (every trace's is).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSetup {
    nodes: u16,
    workers: u16,
    keys: u64,
    len: u32,
    technique: String,
    placement: String,
    pool_size: u32,
    reuse: u32,
    with_replacement: bool,
    distributions_max: usize,
    handles_max: usize,
    sample_size_max: u64,
    hot_keys: Vec<u64>,
    hold_us: Option<u64>,
    gate: String,
}

impl WireSetup {
    /// `setup` as it crosses; errs on a layout that is not uniform.
    pub fn from_setup(s: &Setup) -> Result<WireSetup, String> {
        let len = s.layout.uniform_len().ok_or("only a uniform layout crosses to an agent")?;
        let o = &s.sampling;
        Ok(WireSetup {
            nodes: s.nodes,
            workers: s.workers,
            keys: s.layout.key_end(),
            len: u32::try_from(len).map_err(|_| "a value longer than u32::MAX")?,
            technique: s.technique.name().into(),
            placement: s.placement.name().into(),
            pool_size: o.pool_size,
            reuse: o.reuse,
            with_replacement: o.with_replacement,
            distributions_max: o.distributions_max,
            handles_max: o.handles_max,
            sample_size_max: o.sample_size_max,
            hot_keys: s.hot_keys.iter().map(|k| k.0).collect(),
            hold_us: s.relocation_hold.map(|h| h.as_micros()),
            gate: s.gate.name(),
        })
    }

    /// The setup again; errs on names or a layout that do not exist.
    pub fn to_setup(&self) -> Result<Setup, String> {
        let technique = Technique::from_name(&self.technique)
            .ok_or_else(|| format!("unknown technique `{}`", self.technique))?;
        let placement = Placement::from_name(&self.placement)
            .ok_or_else(|| format!("unknown placement `{}`", self.placement))?;
        let gate = Gate::from_name(&self.gate).ok_or_else(|| format!("unknown gate `{}`", self.gate))?;
        let sampling = SamplingOptions::default()
            .with_pool_size(self.pool_size)
            .with_reuse(self.reuse)
            .with_replacement(self.with_replacement)
            .with_distributions_max(self.distributions_max)
            .with_handles_max(self.handles_max)
            .with_sample_size_max(self.sample_size_max);
        Ok(Setup {
            nodes: self.nodes,
            workers: self.workers,
            layout: Layout::uniform(self.keys, self.len).map_err(|e| format!("layout: {e}"))?,
            technique,
            placement,
            sampling,
            hot_keys: self.hot_keys.iter().copied().map(Key).collect(),
            relocation_hold: self.hold_us.map(parma_core::Duration),
            gate,
        })
    }
}

/// A sampling distribution as it crosses. A weighted one crosses as its keys and
/// probabilities and is rebuilt from them: its probabilities may then differ from the
/// original's in the last bit (every agent rebuilds the same one), which changes a draw with
/// a chance of about 2^-52.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum WireDist {
    Uniform { start: u64, end: u64 },
    Weighted { keys: Vec<u64>, prob_bits: Vec<u64> },
}

impl WireDist {
    pub fn from_dist(d: &Distribution) -> Result<WireDist, String> {
        match d {
            Distribution::Uniform { start, end } => Ok(WireDist::Uniform { start: start.0, end: end.0 }),
            Distribution::Weighted(_) => {
                let keys: Vec<Key> = (0..d.support_len()).map(|i| d.key_at(i)).collect();
                let prob_bits = keys.iter().map(|k| d.probability(*k).to_bits()).collect();
                Ok(WireDist::Weighted { keys: keys.iter().map(|k| k.0).collect(), prob_bits })
            }
            _ => Err("a kind of distribution that does not cross to an agent".into()),
        }
    }

    pub fn to_dist(&self) -> Result<Distribution, OpError> {
        match self {
            WireDist::Uniform { start, end } => Ok(Distribution::uniform(Key(*start), Key(*end))?),
            WireDist::Weighted { keys, prob_bits } => {
                let keys: Vec<Key> = keys.iter().copied().map(Key).collect();
                let probs: Vec<f64> = prob_bits.iter().copied().map(f64::from_bits).collect();
                Ok(Distribution::weighted(&keys, &probs)?)
            }
        }
    }
}

/// One call of the executor on one agent's node; `worker` is a worker of that node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    Pull {
        worker: u16,
        keys: Vec<u64>,
    },
    Write {
        worker: u16,
        set: bool,
        keys: Vec<u64>,
        val_bits: Vec<u32>,
    },
    Localize {
        worker: u16,
        keys: Vec<u64>,
    },
    /// Whether the node holds `key`, and whether it holds a filled replica of it.
    Look {
        key: u64,
    },
    Intent {
        worker: u16,
        keys: Vec<u64>,
        start: u64,
        end: u64,
    },
    Advance {
        worker: u16,
        by: u64,
    },
    WaitSync {
        worker: u16,
    },
    ConcurrentPush {
        keys: Vec<u64>,
        rounds: u32,
        each_bits: u32,
    },
    /// This node's part of a `gated-steps`; `slow` is the slow worker's (node, worker).
    GatedSteps {
        keys: Vec<u64>,
        steps: u32,
        each_bits: u32,
        slow: Option<(u16, u16)>,
    },
    Register {
        dist: WireDist,
        level: String,
    },
    PrepareSample {
        worker: u16,
        dist: u32,
        n: u64,
        start: u64,
        end: u64,
    },
    PullSample {
        worker: u16,
        handle: u64,
        count: usize,
    },
    FinishSample {
        worker: u16,
        handle: u64,
    },
    SamplingStats {
        worker: u16,
    },
    /// The node's counters the executor needs ([`Reply::Counters`]).
    Counters,
    /// Every worker of the node checkpoints to or restores from `dir`, a directory on this
    /// machine that every agent sees (the executor's scratch directory for the trace run).
    Checkpoint {
        op: CheckpointOp,
        dir: String,
    },
    /// Every worker of the node enters the cluster-wide barrier.
    Barrier,
    /// Every worker of the node finalizes.
    Finalize,
    /// The node shuts down; the agent answers and exits.
    Shutdown,
}

/// What a call returned.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Reply {
    /// The agent's node is up; the setup it runs, as it understood it.
    Ready {
        setup: WireSetup,
    },
    Done,
    Pulled {
        val_bits: Vec<u32>,
        local: Vec<bool>,
    },
    Look {
        holds: bool,
        replica: bool,
    },
    Clock {
        clock: u64,
    },
    Dist {
        id: u32,
    },
    Handle {
        handle: u64,
    },
    Sampled {
        keys: Vec<u64>,
        val_bits: Vec<u32>,
        local: Vec<bool>,
    },
    Sampling(WireSamplingStats),
    Counters {
        keys_forwarded: u64,
        peers_failed: u64,
    },
    /// One result per worker of the node, in worker order.
    Workers(Vec<Result<(), WireError>>),
    /// How a `gated-steps` ended on the node: the sums one worker read, or every failure.
    Steps(Result<Vec<u32>, String>),
    /// How each worker's `checkpoint` or `restore` ended, in worker order (an error as the
    /// `CheckpointError`'s Display).
    Checkpoint(Vec<Result<(), String>>),
}

/// One response line.
pub type Response = Result<Reply, WireError>;

/// The sampler counters a trace prints.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct WireSamplingStats {
    pools_drawn: u64,
    samples_pulled: u64,
    samples_local: u64,
    samples_remote: u64,
    samples_postponed: u64,
}

impl From<SamplingStats> for WireSamplingStats {
    fn from(s: SamplingStats) -> WireSamplingStats {
        WireSamplingStats {
            pools_drawn: s.pools_drawn,
            samples_pulled: s.samples_pulled,
            samples_local: s.samples_local,
            samples_remote: s.samples_remote,
            samples_postponed: s.samples_postponed,
        }
    }
}

impl From<WireSamplingStats> for SamplingStats {
    fn from(w: WireSamplingStats) -> SamplingStats {
        let mut s = SamplingStats::default();
        s.pools_drawn = w.pools_drawn;
        s.samples_pulled = w.samples_pulled;
        s.samples_local = w.samples_local;
        s.samples_remote = w.samples_remote;
        s.samples_postponed = w.samples_postponed;
        s
    }
}

/// An [`OpError`] as it crosses, or why the agent could not run the call ([`WireError::Agent`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireError {
    KeyOutsideLayout {
        key: u64,
    },
    ValueLength {
        expected: usize,
        got: usize,
    },
    DuplicateKey {
        key: u64,
    },
    Busy,
    StoreFull,
    Timeout,
    PeerFailed {
        node: u16,
    },
    RoutingLoop,
    Unreachable {
        node: u16,
    },
    FrameRefused {
        node: u16,
    },
    Closed,
    InvalidArgument,
    Sampling(WireSampleError),
    /// An error this protocol does not know yet, as the agent printed it.
    Unnamed(String),
    /// The agent could not run the call (a bad request, a node that did not start).
    Agent(String),
}

/// A [`SampleError`] as it crosses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireSampleError {
    BadDistribution,
    TooManyDistributions,
    UnknownDistribution { dist: u32 },
    DistributionMismatch { dist: u32, node: u16 },
    UnknownHandle { handle: u64 },
    TooManyHandles,
    BadSize { n: u64 },
    CountBeyondSample { count: u64, left: u64 },
    BufferLength { expected: usize, got: usize },
    NoLocalKey,
    Unnamed(String),
}

impl From<OpError> for WireError {
    fn from(e: OpError) -> WireError {
        match e {
            OpError::KeyOutsideLayout { key } => WireError::KeyOutsideLayout { key: key.0 },
            OpError::ValueLength { expected, got } => WireError::ValueLength { expected, got },
            OpError::DuplicateKey { key } => WireError::DuplicateKey { key: key.0 },
            OpError::Busy => WireError::Busy,
            OpError::StoreFull => WireError::StoreFull,
            OpError::Timeout => WireError::Timeout,
            OpError::PeerFailed { node } => WireError::PeerFailed { node: node.0 },
            OpError::RoutingLoop => WireError::RoutingLoop,
            OpError::Unreachable { node } => WireError::Unreachable { node: node.0 },
            OpError::FrameRefused { node } => WireError::FrameRefused { node: node.0 },
            OpError::Closed => WireError::Closed,
            OpError::InvalidArgument => WireError::InvalidArgument,
            OpError::Sampling(s) => WireError::Sampling(s.into()),
            other => WireError::Unnamed(other.to_string()),
        }
    }
}

impl From<SampleError> for WireSampleError {
    fn from(e: SampleError) -> WireSampleError {
        use SampleError as S;
        use WireSampleError as W;
        match e {
            S::BadDistribution => W::BadDistribution,
            S::TooManyDistributions => W::TooManyDistributions,
            S::UnknownDistribution { dist } => W::UnknownDistribution { dist: dist.0 },
            S::DistributionMismatch { dist, node } => W::DistributionMismatch { dist: dist.0, node: node.0 },
            S::UnknownHandle { handle } => W::UnknownHandle { handle: handle.0 },
            S::TooManyHandles => W::TooManyHandles,
            S::BadSize { n } => W::BadSize { n },
            S::CountBeyondSample { count, left } => W::CountBeyondSample { count, left },
            S::BufferLength { expected, got } => W::BufferLength { expected, got },
            S::NoLocalKey => W::NoLocalKey,
            other => W::Unnamed(other.to_string()),
        }
    }
}

impl WireError {
    /// The [`OpError`] again, or what the executor cannot name (an error of a newer agent, or
    /// the agent's own trouble).
    pub fn to_op(&self) -> Result<OpError, String> {
        Ok(match self {
            WireError::KeyOutsideLayout { key } => OpError::KeyOutsideLayout { key: Key(*key) },
            WireError::ValueLength { expected, got } => {
                OpError::ValueLength { expected: *expected, got: *got }
            }
            WireError::DuplicateKey { key } => OpError::DuplicateKey { key: Key(*key) },
            WireError::Busy => OpError::Busy,
            WireError::StoreFull => OpError::StoreFull,
            WireError::Timeout => OpError::Timeout,
            WireError::PeerFailed { node } => OpError::PeerFailed { node: NodeId(*node) },
            WireError::RoutingLoop => OpError::RoutingLoop,
            WireError::Unreachable { node } => OpError::Unreachable { node: NodeId(*node) },
            WireError::FrameRefused { node } => OpError::FrameRefused { node: NodeId(*node) },
            WireError::Closed => OpError::Closed,
            WireError::InvalidArgument => OpError::InvalidArgument,
            WireError::Sampling(s) => OpError::Sampling(s.to_sample()?),
            WireError::Unnamed(what) => return Err(format!("an error this executor cannot name: {what}")),
            WireError::Agent(what) => return Err(what.clone()),
        })
    }
}

impl WireSampleError {
    fn to_sample(&self) -> Result<SampleError, String> {
        use SampleError as S;
        use WireSampleError as W;
        Ok(match self {
            W::BadDistribution => S::BadDistribution,
            W::TooManyDistributions => S::TooManyDistributions,
            W::UnknownDistribution { dist } => S::UnknownDistribution { dist: DistId(*dist) },
            W::DistributionMismatch { dist, node } => {
                S::DistributionMismatch { dist: DistId(*dist), node: NodeId(*node) }
            }
            W::UnknownHandle { handle } => S::UnknownHandle { handle: SampleHandle(*handle) },
            W::TooManyHandles => S::TooManyHandles,
            W::BadSize { n } => S::BadSize { n: *n },
            W::CountBeyondSample { count, left } => S::CountBeyondSample { count: *count, left: *left },
            W::BufferLength { expected, got } => S::BufferLength { expected: *expected, got: *got },
            W::NoLocalKey => S::NoLocalKey,
            W::Unnamed(what) => return Err(format!("a sampling error this executor cannot name: {what}")),
        })
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_op() {
            Ok(op) => op.fmt(f),
            Err(what) => f.write_str(&what),
        }
    }
}

impl std::error::Error for WireError {}

impl std::fmt::Display for WireSampleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_sample() {
            Ok(e) => e.fmt(f),
            Err(what) => f.write_str(&what),
        }
    }
}

impl std::error::Error for WireSampleError {}

/// A conformity level by name, as it crosses.
pub fn level_named(name: &str) -> Result<Conformity, WireError> {
    Conformity::from_name(name).ok_or_else(|| WireError::Agent(format!("unknown conformity level `{name}`")))
}

/// `f32`s as their bit patterns, and back.
pub fn to_bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn from_bits(v: &[u32]) -> Vec<f32> {
    v.iter().copied().map(f32::from_bits).collect()
}

pub fn to_keys(v: &[u64]) -> Vec<Key> {
    v.iter().copied().map(Key).collect()
}

pub fn key_numbers(v: &[Key]) -> Vec<u64> {
    v.iter().map(|k| k.0).collect()
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
