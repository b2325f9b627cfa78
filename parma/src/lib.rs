//! # parma: a parameter manager for sparse, skewed training
//!
//! The one crate a training loop depends on. A model's parameters are keys (`Key`), each with
//! a vector of `f32`s whose length the [`Layout`] gives; they live spread over the nodes of a
//! cluster, and every training thread holds a [`Worker`] that reads ([`Worker::pull`]) and
//! updates ([`Worker::push`]: adds) any key. Under adaptive management (the default
//! [`Technique`]) the worker tells its node which keys the coming steps will use
//! ([`Worker::announce`], or a [`Prefetch`] that keeps that a fixed number of steps ahead) and
//! the node moves or replicates them in time, so that almost every access is local.
//!
//! Two ways to get nodes:
//! - [`LocalCluster`]: N nodes in this process on the threaded in-memory transport, for one
//!   machine (and for tests);
//! - [`node::start`]: this process as one node of a multi-process cluster, from a launcher's
//!   environment (`parma launch`, torchrun, Slurm, MPI, ps-lite variables or a host list),
//!   over ZeroMQ, or over RDMA with the `rdma` feature.
//!
//! `docs/guide.md` walks through writing a loop, from one process to a cluster; the examples
//! in `parma/examples/` run one under adaptive management.
//!
//! ```
//! use parma::{Config, Key, Layout, LocalCluster, Prefetch};
//!
//! // Two nodes, one worker each; 1,000 keys of 4 floats.
//! let cfg = Config::new(2, 1, Layout::uniform(1000, 4)?);
//! let mut cluster = LocalCluster::start(cfg)?;
//! let sums = cluster.run(|w| {
//!     let me = u64::from(w.node().0);
//!     let mut steps = Prefetch::new(8)?;
//!     let mut batches = (0..100u64).map(|i| vec![Key((i * 7 + me) % 1000)]);
//!     let mut vals = [0.0f32; 4];
//!     while let Some(keys) = steps.next_step(w, &mut batches)? {
//!         w.pull(&keys, &mut vals)?;
//!         let t = w.push(&keys, &[1.0; 4])?;
//!         w.wait(t)?;
//!     }
//!     Ok::<_, parma::Error>(w.clock().0)
//! })?;
//! assert_eq!(sums, [100, 100]);
//! cluster.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod local;
pub mod node;

#[doc = include_str!("../../docs/guide.md")]
pub mod guide {}

pub use error::Error;
pub use local::LocalCluster;

pub use parma_core::{
    Announcement, Clock, Config, ConfigError, Conformity, DistId, Distribution, Gate, Init, IntentKind, Key,
    Layout, NodeId, OpError, Placement, SampleError, SampleHandle, SamplingOptions, Technique, WorkerId,
};
/// Why a node's runtime did not start or stop cleanly ([`NodeRuntime::start_with`],
/// [`NodeRuntime::shutdown`]); [`Error`] wraps it for the façade's own functions.
pub use parma_runtime::Error as RuntimeError;
pub use parma_runtime::{
    default_lookahead, DriverStats, NodeRuntime, Options, PendingPull, Prefetch, PullTicket, Stats,
    StoreView, Ticket, Worker, WorkerStats, LOOKAHEAD_EXAMPLES, LOOKAHEAD_MAX,
};

/// Checkpoints: [`Worker::checkpoint`] writes a consistent snapshot of the whole model,
/// [`Worker::restore`] loads one onto a cluster of any size; reading one offline.
pub mod checkpoint {
    pub use parma_runtime::checkpoint::{Checkpoint, CheckpointError, Manifest, PartRecord, Values};

    /// The SHA-256 of some bytes in lower-case hex, as a checkpoint's manifest records its
    /// parts' (and as `parma data fetch` checks a download).
    pub use parma_runtime::checkpoint::format::sha256_hex;
}

/// What a multi-process node needs before it starts: the launcher's environment, the cluster
/// token, the rendezvous (used by [`crate::node::start`]; for a transport of your own,
/// implement [`startup::BoundTransport`] and call [`startup::start_node`]).
pub mod startup {
    pub use parma_runtime::startup::{
        cluster_digest, connect, fnv1a, free_rendezvous_port, start_node, BoundTransport, ClusterToken,
        Launch, Launcher, NodeStartError, PeerTable, RendezvousAddr, Role, StartedNode, StartupError,
    };
}

/// Time as the protocol counts it: [`time::Duration`], whole microseconds, the unit of
/// [`Config`]'s timeouts (`Config::request_timeout`).
pub mod time {
    pub use parma_core::Duration;
}

/// Transports for a cluster whose every node runs in this process, for a program that wants
/// to choose (as `parma train --transport` and `parma demo --transport` do): the threaded
/// loopback ([`LocalCluster`]'s), and ZeroMQ over TCP on 127.0.0.1, every node's transport
/// with an I/O thread of its own. Start each node on its transport with
/// [`NodeRuntime::start_with`] (threaded) or the ZeroMQ transport's `start_node` (its driver
/// on the transport's I/O thread).
pub mod local_transports {
    #[doc(no_inline)]
    pub use parma_transport_loopback::threaded::{cluster as threaded_cluster, ThreadedOptions};
    #[doc(no_inline)]
    pub use parma_transport_zmq::{local_cluster as zmq_local_cluster, ZmqOptions};
}
