//! # parma-train: the training tasks
//!
//! ## Room
//!
//! Training real models on a parma cluster (`parma train`; every node in this process, or this
//! process as one node of a cluster of processes, `parma node train`), and the same models on a
//! shared-memory baseline without parma; their data sets, the shipped ones and those fetched
//! into a cache (`parma data fetch`). This crate uses only the public API of the façade,
//! `parma`: it never names parma-core, parma-runtime or a transport crate, and it parses no
//! command line (`parma-cli` does, over this crate).
//!
//! - [`kg`]: knowledge graphs in the LibKGE layout, and the ones shipped with parma;
//! - [`task`]: what the harness needs from a task ([`task::Task`]);
//! - [`kge`]: ComplEx and DistMult, one training step (negative sampling, AdaGrad);
//! - [`mf`]: biased matrix factorization with SGD, ratings files and their fixed split;
//! - [`lr`]: logistic regression on hashed sparse features, AdaGrad or FTRL-Proximal; its
//!   tables (UCI Adult, MovieLens-100k as clicks) in [`lr::data`];
//! - [`wv`]: word vectors, skip-gram with negative sampling (negatives from the sampling
//!   manager); its corpus and evaluation sets in [`wv::corpus`], quality in [`wv::eval`];
//! - [`eval`]: filtered link-prediction ranking;
//! - [`params`]: where a training thread reads and updates parameters: a parma worker, or a
//!   plain shared array (Hogwild!), behind one trait;
//! - [`harness`]: the cluster, the threads, the epoch loop with intents signaled ahead,
//!   evaluation and timing;
//! - [`checkpointing`]: `--checkpoint-every`, `--checkpoint-dir` and `--resume`;
//! - [`report`]: one record per epoch (`--metrics`), the summary table;
//! - [`plot`]: validation quality over time and epochs as SVG (`--plot`);
//! - [`nodes`]: the run's parma nodes, in this process or as one node of a cluster of
//!   processes (through the façade's [`parma::node`]);
//! - [`metrics`]: a node's counters served to Prometheus (`--metrics-addr`);
//! - [`fetch`]: data sets that may not be redistributed, fetched with pip into a cache and
//!   checked against a pinned sha256 (`parma data fetch`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checkpointing;
pub mod eval;
pub mod fetch;
pub mod harness;
pub mod kg;
pub mod kge;
pub mod lr;
pub mod metrics;
pub mod mf;
pub mod nodes;
pub mod params;
pub mod plot;
pub mod report;
pub mod task;
pub mod wv;

use std::fmt;

use parma::{Conformity, OpError, Technique};

use kge::{Loss, Model, Reg, RegOn};

/// What runs the model's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// An in-process parma cluster.
    Parma,
    /// One shared array, racy updates, no parma (Hogwild!).
    Hogwild,
}

impl Engine {
    /// The engine's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Parma => "parma",
            Engine::Hogwild => "hogwild",
        }
    }

    /// The engine called `name`.
    pub fn from_name(name: &str) -> Option<Engine> {
        [Engine::Parma, Engine::Hogwild].into_iter().find(|e| e.name() == name)
    }
}

/// Options every training task shares.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    /// Nodes of the in-process cluster (the baseline runs `nodes * workers` threads).
    pub nodes: u16,
    /// What carries the frames between the in-process nodes: the threaded loopback, or
    /// ZeroMQ over TCP on 127.0.0.1 (each node's driver on its transport's I/O thread).
    pub transport: crate::nodes::LocalTransport,
    /// Worker threads per node.
    pub workers: u16,
    /// Passes over the training data.
    pub epochs: u32,
    /// Reals per embedding.
    pub dim: usize,
    /// Learning rate.
    pub lr: f32,
    /// Seed of the initialization, the data order, the negatives and the nodes.
    pub seed: u64,
    /// Evaluate on the validation split every this many epochs (0: only after the last).
    pub eval_every: u32,
    /// Steps ahead a worker signals intent (under relocation: localizes);
    /// [`TrainOptions::ahead_for`] the batch by default.
    pub ahead: usize,
    /// Training examples per step.
    pub batch: usize,
    /// Every this many steps a parma worker waits until its node has finished two more sync
    /// rounds (`Worker::wait_sync`), so that its replicas lag at most this many of its steps
    /// behind their owners (0: never; bounded staleness, as in SSP).
    pub sync_every: u32,
    /// Every step, all threads read their values before any of them pushes an update, and all
    /// have pushed before the next step: synchronous data-parallel training, the reference for
    /// what concurrent updates cost quality (slow: two barriers per step).
    pub lockstep: bool,
    /// How parma manages the parameters.
    pub technique: Technique,
    /// The clock gate (consistency model) of parma's workers: each step is a clock.
    pub gate: parma::Gate,
    /// parma, or the baseline.
    pub engine: Engine,
    /// Draw a progress bar per epoch on the terminal.
    pub progress: bool,
    /// Checkpoints written during the run, and the one it resumes from.
    pub checkpoint: checkpointing::CheckpointOptions,
    /// `--metrics`: where each epoch's record is appended as the epoch ends.
    pub metrics: Option<report::MetricsFile>,
    /// Run as one node of a cluster of processes (`parma node train ...`): this process starts
    /// one node over the network and runs its `workers` threads; `nodes` is the world size.
    /// `None`: every node in this process.
    pub cluster: Option<crate::nodes::NetOptions>,
    /// Most time a parma worker waits in a barrier or at a clock gate (`None`: as long as
    /// every peer is alive; another thread may evaluate for minutes).
    pub barrier_timeout: Option<std::time::Duration>,
    /// Most time a node waits for the answer to a remote request (`None`: the default of
    /// `parma::Config::request_timeout`).
    pub request_timeout: Option<std::time::Duration>,
    /// Most sync rounds a parma node starts per second (`parma::Config::
    /// sync_rounds_per_sec_max`; `None`: back to back, as soon as the last one was answered).
    pub sync_rounds_per_sec: Option<u32>,
}

impl Default for TrainOptions {
    fn default() -> TrainOptions {
        TrainOptions {
            nodes: 1,
            transport: crate::nodes::LocalTransport::Threaded,
            workers: 2,
            epochs: 30,
            dim: 100,
            lr: 0.1,
            seed: 1,
            eval_every: 5,
            ahead: TrainOptions::ahead_for(32),
            batch: 32,
            sync_every: 0,
            lockstep: false,
            technique: Technique::Adaptive,
            gate: parma::Gate::Async,
            engine: Engine::Parma,
            progress: false,
            cluster: None,
            checkpoint: checkpointing::CheckpointOptions::default(),
            metrics: None,
            barrier_timeout: None,
            request_timeout: None,
            sync_rounds_per_sec: None,
        }
    }
}

/// Examples a worker announces ahead by default: the keys of the next this many examples are
/// signaled as intents (AdaPM's KGE app signals 1,000 triples ahead). Intents signaled early
/// cost nothing until action timing acts on them, while intents signaled too late (fewer
/// steps ahead than a sync round's round trip lasts) leave the keys remote when the step
/// comes: at one example per step and 8 steps ahead, two processes sent 4.5 times the bytes
/// and took 3 times as long per epoch.
pub const AHEAD_EXAMPLES: usize = 1024;

impl TrainOptions {
    /// The default look-ahead in steps for `batch` examples per step: [`AHEAD_EXAMPLES`]
    /// worth, at least 8 steps and at most 1,024.
    pub fn ahead_for(batch: usize) -> usize {
        AHEAD_EXAMPLES.div_ceil(batch.max(1)).clamp(8, 1024)
    }
}

/// Most nodes or workers per node of an in-process run.
pub const THREADS_MAX: u16 = 256;
/// Largest embedding (reals).
pub const DIM_MAX: usize = 4096;

impl TrainOptions {
    /// Refuses options that cannot work, with the flag to fix.
    pub fn check(&self) -> Result<(), TrainError> {
        let bad = |s: String| Err(TrainError::Options(s));
        if self.nodes == 0 || self.nodes > THREADS_MAX {
            return bad(format!("--nodes must be between 1 and {THREADS_MAX}, not {}", self.nodes));
        }
        if self.workers == 0 || self.workers > THREADS_MAX {
            return bad(format!("--workers must be between 1 and {THREADS_MAX}, not {}", self.workers));
        }
        if self.epochs == 0 {
            return bad("--epochs must be at least 1".into());
        }
        for (flag, t) in
            [("--barrier-timeout", self.barrier_timeout), ("--request-timeout", self.request_timeout)]
        {
            if t.is_some_and(|t| t < std::time::Duration::from_millis(1)) {
                return bad(format!("{flag} must be at least 0.001 seconds"));
            }
        }
        if self.dim == 0 || self.dim > DIM_MAX {
            return bad(format!("--dim must be between 1 and {DIM_MAX}, not {}", self.dim));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("--lr must be a finite number > 0, not {}", self.lr));
        }
        if self.batch == 0 || self.batch > 1 << 16 {
            return bad(format!("--batch must be between 1 and 65536, not {}", self.batch));
        }
        if self.sync_every > 1 << 20 {
            return bad(format!("--sync-every must be at most 2^20 steps, not {}", self.sync_every));
        }
        if self.ahead > 1024 {
            return bad(format!("--ahead must be at most 1024 steps, not {}", self.ahead));
        }
        let p = self.gate.speculation() as usize;
        if self.ahead < p {
            return bad(format!(
                "--gate {} declares a step's keys only when they are signaled {p} steps ahead: --ahead must be at least {p}, not {}",
                self.gate.name(),
                self.ahead
            ));
        }
        if self.cluster.is_some() && self.engine != Engine::Parma {
            return bad(
                "--engine hogwild runs in one process, not as one node of a cluster of processes".into()
            );
        }
        self.checkpoint.check(self.engine)
    }

    /// The number of training threads.
    pub fn threads(&self) -> usize {
        usize::from(self.nodes) * usize::from(self.workers)
    }
}

/// Options of `parma train kge`.
#[derive(Clone, Debug, PartialEq)]
pub struct KgeOptions {
    /// The scoring function.
    pub model: Model,
    /// Negatives per side (head and tail) of each triple, or, with `shared_negatives`, per step.
    pub negatives: usize,
    /// Draw `negatives` per step and use them as the candidate heads and tails of every triple
    /// of the step.
    pub shared_negatives: bool,
    /// The loss.
    pub loss: Loss,
    /// The regularizer.
    pub reg: Reg,
    /// Which embeddings the regularizer applies to: the positive triples' (AdaPM's app, the
    /// default) or every score's.
    pub reg_on: RegOn,
    /// The sampling manager's conformity level for the negatives.
    pub conformity: Conformity,
    /// Standard deviation of the normal initialization.
    pub init_std: f32,
}

impl Default for KgeOptions {
    fn default() -> KgeOptions {
        KgeOptions {
            model: Model::ComplEx,
            negatives: 6,
            shared_negatives: false,
            loss: Loss::Bce,
            reg: Reg::L2(1e-3),
            reg_on: RegOn::Positives,
            conformity: Conformity::Conform,
            init_std: 0.1,
        }
    }
}

impl KgeOptions {
    /// Refuses options that cannot work with `common`.
    pub fn check(&self, common: &TrainOptions) -> Result<(), TrainError> {
        let bad = |s: String| Err(TrainError::Options(s));
        if self.model == Model::ComplEx && common.dim % 2 != 0 {
            return bad(format!(
                "--dim {} is odd: ComplEx stores dim/2 complex numbers, so --dim must be even",
                common.dim
            ));
        }
        let most = if self.shared_negatives { 1 << 16 } else { 1024 };
        if self.negatives == 0 || self.negatives > most {
            return bad(format!("--negatives must be between 1 and {most}, not {}", self.negatives));
        }
        if !(self.init_std.is_finite() && self.init_std > 0.0) {
            return bad(format!("--init-std must be a finite number > 0, not {}", self.init_std));
        }
        let per_step = if self.shared_negatives {
            self.negatives as u64
        } else {
            2 * self.negatives as u64 * common.batch as u64
        };
        if per_step > 1 << 20 {
            return bad(format!("--batch x 2 x --negatives = {per_step} negatives per step; at most 2^20"));
        }
        Ok(())
    }
}

/// Why training failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrainError {
    /// The options cannot work.
    Options(String),
    /// The data could not be loaded or does not fit the options.
    Data(String),
    /// A node did not start.
    Start(parma::RuntimeError),
    /// A worker operation failed.
    Worker {
        /// The worker's node.
        node: u16,
        /// The worker's id on its node.
        worker: u16,
        /// The step (the worker's clock) it was at.
        step: u64,
        /// The operation.
        op: &'static str,
        /// What went wrong.
        error: OpError,
    },
    /// A training thread could not be spawned, or panicked.
    Thread(String),
    /// A baseline thread stopped because another one failed (that one's error is the cause).
    Aborted,
    /// A node did not stop cleanly.
    Shutdown(parma::RuntimeError),
    /// The `--metrics` file could not be written.
    Metrics(std::io::Error),
    /// A checkpoint could not be written or restored.
    Checkpoint(parma::checkpoint::CheckpointError),
    /// This process's node could not join its cluster of processes (start-up, transport).
    Node(crate::nodes::NodeError),
    /// The launcher's environment makes this process no node (ps-lite's scheduler, after the
    /// rendezvous, or its workers): it has nothing to train.
    NotANode,
    /// A broken promise inside the harness (a bug).
    Internal(String),
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrainError::Options(s) => write!(f, "bad options: {s}"),
            TrainError::Data(s) => write!(f, "bad data: {s}"),
            TrainError::Start(e) => write!(f, "a node did not start: {e}"),
            TrainError::Worker { node, worker, step, op, error } => {
                write!(f, "worker {worker} of node {node}: {op} at step {step} failed: {error}")
            }
            TrainError::Thread(s) => write!(f, "training thread: {s}"),
            TrainError::Aborted => f.write_str("stopped because another training thread failed"),
            TrainError::Shutdown(e) => write!(f, "a node did not stop cleanly: {e}"),
            TrainError::Metrics(e) => write!(f, "cannot write the metrics file: {e}"),
            TrainError::Checkpoint(e) => write!(f, "{e}"),
            TrainError::Node(e) => write!(f, "{e}"),
            TrainError::NotANode => f.write_str("this process is not a node (ps-lite scheduler or worker)"),
            TrainError::Internal(s) => write!(f, "internal error: {s}"),
        }
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrainError::Start(e) | TrainError::Shutdown(e) => Some(e),
            TrainError::Worker { error, .. } => Some(error),
            TrainError::Metrics(e) => Some(e),
            TrainError::Checkpoint(e) => Some(e),
            TrainError::Node(e) => Some(e),
            _ => None,
        }
    }
}

/// splitmix64: derives independent seeds from one.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
