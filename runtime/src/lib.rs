//! # parma-runtime: the std driver of one node
//!
//! ## Room
//!
//! This crate runs a [`parma_core::Node`] on real threads: it owns the node's driver thread,
//! the loop that moves frames between a [`parma_core::Transport`] and the node, the timers, and
//! the handles that worker threads use ([`Worker`]). It **never decides anything about the
//! protocol**: it does not look at what a message means, where a key lives or how a request is
//! routed. It calls the node's inputs, carries out its outputs and hands completions back to
//! the workers that wait for them. A `match` on a message kind here would belong in core.
//!
//! Before a node starts, [`startup`] tells a process of a multi-process cluster its rank,
//! the world size and its peers' endpoints (from the launcher's environment and a
//! rendezvous), for any transport.
//!
//! ## Two planes
//!
//! - **Data plane.** A worker's access to a key held here is served by the worker thread
//!   itself, in the shared [`parma_core::Store`]: one shard latch, a copy or an add in place.
//!   It never goes through the driver thread and never takes a node-wide lock. Sampling too:
//!   each worker draws with its own [`parma_core::Sampler`] (the node's pools are shared,
//!   one latch per distribution), and sampled keys held here are read on the worker thread.
//! - **Control plane.** Keys that miss, `localize` and barriers become commands in a bounded
//!   queue that the driver thread feeds to the node. Each worker has a completion slot where
//!   the driver leaves the results; every wait for one ends (a result, an error, or a
//!   timeout). A waiting worker first watches its slot for up to `Options::wait_spin`
//!   (only while the nodes of the process run no more threads than there are cores), then
//!   sleeps until the driver wakes it.
//!
//! A worker never lets an access overtake its own earlier remote operation on the same key
//! (pulls may pass pulls, adds may pass adds): its pull after its own push sees the push.
//!
//! ## The driving loop
//!
//! One thread per node, named `parma-driver-<id>`, owns the `Node` and the transport (or the
//! transport's own thread runs the loop, see below). Each turn:
//!
//! 1. transport events: a failed peer becomes [`parma_core::Node::handle_peer_failed`];
//! 2. frames the node produced earlier are handed to the transport, in order per
//!    destination (a destination that answers `WouldBlock` keeps its frames for the next turn);
//! 3. received frames go to `handle_frame`, in small batches; then, while the driver's
//!    unsent frames are within `Config::outbox_frames_max`, worker commands go to
//!    `pull`/`push`/`localize`/`barrier` (above it, workers feel back-pressure; frames are
//!    still read, up to `Options::unsent_frames_max`, so that two nodes blocked on sending
//!    to each other keep reading each other);
//! 4. if [`parma_core::Node::poll_timeout`] is due, `handle_timeout`;
//! 5. after **every** input, `poll_transmit` and `poll_event` are drained until `None` (frames
//!    into the per-destination queues, completions to the workers' slots);
//! 6. with nothing to do, the thread parks until a worker queues a command (intents and clock
//!    advances, which the node reads only when a sync round starts, wake it only every so
//!    many: they wait for the round's timeout, and step 3 comes before step 4), the transport
//!    wakes it (a frame arrived, room to send) or the node's next timeout; a transport that
//!    `needs_polling` is polled every `Options::poll_interval`.
//!
//! Time is [`parma_core::Instant`]: microseconds since the driver started.
//!
//! ## A driver on the transport's thread
//!
//! A transport that has an I/O thread of its own can run the same loop there instead
//! ([`host`]; [`NodeRuntime::start_hosted`]): the transport implements [`DriverHost`] and calls
//! [`HostedDriver::turn`] as one more task of its event loop, sleeping when a turn answers
//! [`HostTurn::Idle`] until the driver's waker fires. Frames then pass between the node and
//! the sockets without waking another thread, which halves the thread wakes of a remote pull
//! (`docs/performance-transports.md`, "ZeroMQ transport"). The ZeroMQ transport does this
//! (`ZmqTransport::start_node`).
//!
//! ## Shutdown
//!
//! [`NodeRuntime::shutdown`] waits until every worker was finalized or dropped and the node is
//! idle (bounded by `Options::drain_timeout`), closes the transport and joins the thread (a
//! hosted driver's host is joined instead: [`DriverHost::join`]).
//! Dropping the runtime stops it too, without waiting for workers. No thread is left behind.
//! Finalize the workers of every node ([`Worker::finalize`] ends with a cluster-wide barrier)
//! before shutting any node down: a node that closes its transport is a failed peer to the
//! others.
//!
//! ## Example
//!
//! ```
//! use parma_core::{Config, Key, Layout, NodeId};
//! use parma_runtime::NodeRuntime;
//! use parma_transport_loopback::threaded::{cluster, ThreadedOptions};
//!
//! // Two nodes in one process, one worker each; keys 0..1000 with 2 floats each.
//! let cfg = Config::new(2, 1, Layout::uniform(1000, 2).unwrap());
//! let (mut nodes, mut workers) = (Vec::new(), Vec::new());
//! for (i, transport) in cluster(2, ThreadedOptions::default()).into_iter().enumerate() {
//!     let (node, handles) = NodeRuntime::start(cfg.clone(), NodeId(i as u16), transport).unwrap();
//!     nodes.push(node);
//!     workers.extend(handles);
//! }
//!
//! std::thread::scope(|s| {
//!     for mut w in workers {
//!         s.spawn(move || {
//!             let keys: Vec<Key> = (0..10).map(Key).collect();
//!             let t = w.push(&keys, &[1.0; 20]).unwrap(); // local keys are added at once
//!             w.wait(t).unwrap(); // the rest are applied at their owners
//!             w.barrier().unwrap(); // every worker's pushes are in
//!             let mut vals = [0.0; 20];
//!             w.pull(&keys, &mut vals).unwrap();
//!             assert_eq!(vals, [2.0; 20]);
//!             w.finalize().unwrap();
//!         });
//!     }
//! });
//! for node in nodes {
//!     let stats = node.shutdown().unwrap();
//!     assert_eq!(stats.workers_total().keys_pushed_local + stats.workers_total().keys_pushed_remote, 10);
//! }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checkpoint;
mod driver;
mod error;
pub mod host;
mod inspect;
mod options;
mod prefetch;
mod runtime;
mod shared;
mod slot;
pub mod startup;
mod stats;
mod worker;

pub use error::{Error, Undrained};
pub use host::{DriverHost, HostTurn, HostedDriver};
pub use inspect::StoreView;
pub use options::Options;
pub use prefetch::{default_lookahead, Prefetch, LOOKAHEAD_EXAMPLES, LOOKAHEAD_MAX};
pub use runtime::NodeRuntime;
pub use stats::{DriverStats, Stats, WorkerStats};
pub use worker::{PendingPull, PullTicket, Ticket, Worker};
