//! The sampling manager (nups-sigmod22.txt §4): the parameter manager draws samples of keys
//! from a registered distribution under a chosen conformity level, and the level selects the
//! sampling scheme.
//!
//! | conformity | scheme | what `prepare` does | what `pull` does |
//! | --- | --- | --- | --- |
//! | [`Conformity::Conform`] | independent | draws `n` iid keys, intent for them | returns them in order |
//! | [`Conformity::Bounded`] | pool reuse | takes `n` keys from the pool stream, intent for them | returns them in order |
//! | [`Conformity::LongTerm`] | pool reuse + postponing | as BOUNDED, after the samples carried from earlier handles | a key not local now moves to the end of the handle's samples, once |
//! | [`Conformity::NonConform`] | local | nothing | draws among the keys local now |
//!
//! **What each scheme returns**, checked on the pulled keys with keys local and remote
//! (`sampling/tests_locality.rs`). Independent and pool reuse return what they drew, local or
//! not: locality never changes which keys a worker sees. Postponing changes only the order
//! within a handle; the postponed samples a handle leaves un-pulled at [`Sampler::finish`]
//! start the worker's next handle of the distribution, so that pulling handles in part does
//! not favour local keys. Local sampling returns draws from π restricted to the keys local at
//! the pull (by rejection, exact unless the local keys' total probability is below about
//! 2·10⁻⁴, where it falls back to the first local key after a random position of the support).
//!
//! **Pools.** A pool is `G` iid draws; the pool stream traverses it `U` times, each time in a
//! fresh random order, then draws the next pool. Every position of a pool is therefore used
//! exactly `U` times, and draws more than `U·G` apart come from different pools, hence are
//! independent (BOUNDED with `B = U·G` at the node). As in NuPS, a node has one pool stream per
//! distribution, shared by its workers: the node localizes `G` keys per pool, not `G` per
//! worker.
//!
//! **Localization.** The keys of a handle are announced as an intent of the worker for the
//! handle's clock window `[start, end)`, through the node's intent machinery
//! ([`crate::Node::intent`]). Action timing then acts on it as early as the measured clock rate
//! requires, so a pool's keys become local in time; this replaces NuPS's background thread
//! that relocates pools "as far ahead as the measured relocation time requires".
//!
//! **Where the state lives.** The distributions are registered with the node (the same ones, in
//! the same order, on every node; [`Registry`] is shared like the store). The handles, pools and
//! the random generator are per worker ([`Sampler`]), so that pulling a sample of local keys
//! never waits for the node. The generator is seeded from `Config::seed`, the node and the
//! worker, so a simulation replays exactly.

mod dist;
mod pool;
mod registry;
mod rng;
mod sampler;

use core::fmt;

pub use dist::{AliasTable, Distribution};
pub use registry::{Registered, Registry};
pub use rng::SampleRng;
pub use sampler::{Sampler, SamplingStats};

use crate::ids::{DistId, NodeId, SampleHandle};

/// How closely samples must follow the target distribution (nups-sigmod22.txt §4.1), from the
/// strictest to the loosest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Conformity {
    /// L1: mutually independent samples from π.
    Conform,
    /// L2: each sample follows π; dependence only on the node's last `B` samples.
    Bounded,
    /// L3: each node's long-run frequencies match π.
    LongTerm,
    /// L4: no promise about π; parma's local sampling draws from π restricted to the keys
    /// local at the pull.
    NonConform,
}

/// The sampling scheme that carries out a conformity level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// Independent draws, localized by intent.
    Independent,
    /// Pools of `G` iid draws, each traversed `U` times in a fresh random order.
    PoolReuse,
    /// Pool reuse, and a sample not local at pull time is postponed once to the end of its
    /// handle's samples.
    PoolReusePostpone,
    /// Draws only among the keys local at pull time.
    Local,
}

impl Conformity {
    /// Every level, strictest first.
    pub const ALL: [Conformity; 4] =
        [Conformity::Conform, Conformity::Bounded, Conformity::LongTerm, Conformity::NonConform];

    /// The scheme that provides this level at the least communication.
    pub const fn scheme(self) -> Scheme {
        match self {
            Conformity::Conform => Scheme::Independent,
            Conformity::Bounded => Scheme::PoolReuse,
            Conformity::LongTerm => Scheme::PoolReusePostpone,
            Conformity::NonConform => Scheme::Local,
        }
    }

    /// The level's name in traces and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Conformity::Conform => "conform",
            Conformity::Bounded => "bounded",
            Conformity::LongTerm => "long-term",
            Conformity::NonConform => "non-conform",
        }
    }

    /// The level called `name` (see [`Conformity::name`]).
    pub fn from_name(name: &str) -> Option<Conformity> {
        Conformity::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Options of the sampling manager; the same on every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplingOptions {
    /// `G`: iid draws per pool (NuPS: 250); at most `sample_size_max`.
    pub pool_size: u32,
    /// `U`: how often each pool is traversed (the use frequency; NuPS "untuned": 16).
    pub reuse: u32,
    /// Whether a key may occur more than once among one handle's samples.
    pub with_replacement: bool,
    /// Most distributions a node registers.
    pub distributions_max: usize,
    /// Most open handles per worker.
    pub handles_max: usize,
    /// Most samples in one handle.
    pub sample_size_max: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            pool_size: 250,
            reuse: 16,
            with_replacement: true,
            distributions_max: 64,
            handles_max: 1 << 12,
            sample_size_max: 1 << 20,
        }
    }
}

impl SamplingOptions {
    /// Sets `G`, the iid draws per pool: [`SamplingOptions::pool_size`].
    #[must_use]
    pub fn with_pool_size(mut self, pool_size: u32) -> SamplingOptions {
        self.pool_size = pool_size;
        self
    }

    /// Sets `U`, how often each pool is traversed: [`SamplingOptions::reuse`].
    #[must_use]
    pub fn with_reuse(mut self, reuse: u32) -> SamplingOptions {
        self.reuse = reuse;
        self
    }

    /// Sets whether a key may occur more than once among one handle's samples: [`SamplingOptions::with_replacement`].
    #[must_use]
    pub fn with_replacement(mut self, with_replacement: bool) -> SamplingOptions {
        self.with_replacement = with_replacement;
        self
    }

    /// Sets the most distributions a node registers: [`SamplingOptions::distributions_max`].
    #[must_use]
    pub fn with_distributions_max(mut self, distributions_max: usize) -> SamplingOptions {
        self.distributions_max = distributions_max;
        self
    }

    /// Sets the most open handles per worker: [`SamplingOptions::handles_max`].
    #[must_use]
    pub fn with_handles_max(mut self, handles_max: usize) -> SamplingOptions {
        self.handles_max = handles_max;
        self
    }

    /// Sets the most samples in one handle: [`SamplingOptions::sample_size_max`].
    #[must_use]
    pub fn with_sample_size_max(mut self, sample_size_max: u64) -> SamplingOptions {
        self.sample_size_max = sample_size_max;
        self
    }

    /// Whether every bound is positive.
    pub fn is_valid(&self) -> bool {
        self.pool_size > 0
            && self.reuse > 0
            && self.distributions_max > 0
            && self.handles_max > 0
            && self.sample_size_max > 0
    }
}

/// Why a sampling call was refused. Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SampleError {
    /// An empty range, weights that are negative, not finite or all zero, repeated keys, or
    /// keys outside the layout.
    BadDistribution,
    /// The node already registered `SamplingOptions::distributions_max` distributions.
    TooManyDistributions,
    /// No distribution with this id was registered here.
    UnknownDistribution { dist: DistId },
    /// Node `node` registered another distribution (or level, or options) under this id:
    /// the nodes did not register the same distributions in the same order.
    DistributionMismatch { dist: DistId, node: NodeId },
    /// No open handle with this id (never prepared, or finished).
    UnknownHandle { handle: SampleHandle },
    /// The worker already has `SamplingOptions::handles_max` open handles.
    TooManyHandles,
    /// `n` is zero, above `SamplingOptions::sample_size_max`, or (without replacement) above
    /// the number of keys the distribution can draw.
    BadSize { n: u64 },
    /// More samples asked for than the handle has left.
    CountBeyondSample { count: u64, left: u64 },
    /// The keys buffer and the values buffer disagree with the count or the keys' lengths.
    BufferLength { expected: usize, got: usize },
    /// Local sampling found no key of the distribution that is local now (or not yet in this
    /// handle, without replacement).
    NoLocalKey,
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SampleError::DistributionMismatch { dist, node } => write!(
                f,
                "distribution {dist} differs on node {node}: every node must register the same \
                 distributions, levels and options in the same order"
            ),
            SampleError::BadDistribution => f.write_str(
                "bad distribution: it needs a nonempty range, or distinct keys inside the layout \
                 with finite, nonnegative weights not all zero",
            ),
            SampleError::TooManyDistributions => {
                f.write_str("this node already has SamplingOptions::distributions_max distributions")
            }
            SampleError::UnknownDistribution { dist } => {
                write!(f, "no distribution {dist} was registered on this node")
            }
            SampleError::UnknownHandle { handle } => {
                write!(f, "no open sample handle {}: never prepared, or already finished", handle.0)
            }
            SampleError::TooManyHandles => f.write_str(
                "the worker already has SamplingOptions::handles_max open sample handles; finish one first",
            ),
            SampleError::BadSize { n } => write!(
                f,
                "sample size {n} is not valid: it must be from 1 to SamplingOptions::sample_size_max, \
                 and without replacement at most the keys the distribution can draw"
            ),
            SampleError::CountBeyondSample { count, left } => {
                write!(f, "{count} samples asked for, the handle has {left} left")
            }
            SampleError::BufferLength { expected, got } => write!(
                f,
                "sample buffer holds {got} entries, the count and the keys' value lengths need {expected}"
            ),
            SampleError::NoLocalKey => {
                f.write_str("local sampling found no key of the distribution held on this node now")
            }
        }
    }
}

impl core::error::Error for SampleError {}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_locality;
