//! # parma-core: the protocol of one node, as a pure state machine
//!
//! This crate is parma's protocol: ownership and routing of keys, relocation, the requests of
//! workers, the wire format and the parameter store. It is `#![no_std]` (with `alloc`) and it
//! **never** does I/O, spawns threads, reads a clock, uses OS randomness or panics on what a peer
//! sends. Drivers (`parma-runtime`, the simulator, fuzz targets) feed it inputs and carry out
//! its outputs.
//!
//! A [`Node`] has four kinds of methods, after quinn-proto:
//! - **inputs** (`&mut self`): [`Node::handle_frame`] / [`Node::handle_message`],
//!   [`Node::handle_timeout`], [`Node::handle_peer_failed`], and the worker commands
//!   [`Node::pull`], [`Node::push`], [`Node::localize`], [`Node::barrier`], [`Node::intent`],
//!   [`Node::advance_clock`], [`Node::wait_sync`];
//! - **outputs** (`&mut self`, `#[must_use]`): [`Node::poll_transmit`] (a message for a peer),
//!   [`Node::poll_event`] (a completion for a worker), [`Node::poll_timeout`] (when to call
//!   `handle_timeout` next);
//! - **getters** (`&self`): [`Node::stats`], [`Node::store`], [`Node::config`], ...;
//! - nothing else: the core never calls back into its driver.
//!
//! Sampling ([`sampling`], nups-sigmod22.txt §4): distributions are registered with the node
//! ([`Node::register_distribution`]); each worker draws with its own [`Sampler`] (from
//! [`Node::sampler`]), and [`Node::prepare_sample`] signals intent for the drawn keys through the
//! node's intent machinery. A driver that keeps samplers on worker threads calls
//! [`Sampler::prepare`] there and passes the keys it returns to [`Node::intent`].
//!
//! Local accesses do not go through the `Node` at all: worker threads read and update the
//! [`Store`] (shared as an `Arc`) directly, one shard latch per key. Only misses, and everything
//! that involves another node, become commands.
//!
//! ## The driver's contract
//!
//! 1. After **every** input, drain [`Node::poll_transmit`] until it returns `None`, handing each
//!    [`Transmit`] to the transport (encode it with [`Transmit::encode`] into the transport's
//!    buffer), then drain [`Node::poll_event`] until `None`, handing each [`Event`] to the worker
//!    it names.
//! 2. Then read [`Node::poll_timeout`] and call [`Node::handle_timeout`] no later than the time
//!    it gives (calling it early is harmless).
//! 3. Time is an [`Instant`] the driver passes in (microseconds from an origin of its choice);
//!    it must never go backwards.
//! 4. Frames from one peer are handed to [`Node::handle_frame`] in the order the peer sent them
//!    (the transport guarantees per-pair FIFO order). [`Node::wants_input`] gates *worker
//!    commands* only: keep reading frames from peers even while sends are blocked, or two nodes
//!    whose queues toward each other are full would wait on each other forever. A driver bounds
//!    its own queue of unsent frames separately and reports the overflow.
//!
//! ```
//! use parma_core::{Completion, Config, Instant, Key, Layout, Node, NodeId, Ticket, WorkerId};
//!
//! // Two nodes, one worker each, keys 0..100 with 4 floats each; messages are passed by hand.
//! let cfg = Config::new(2, 1, Layout::uniform(100, 4).unwrap());
//! let mut nodes = [Node::new(cfg.clone(), NodeId(0)).unwrap(), Node::new(cfg, NodeId(1)).unwrap()];
//! let now = Instant(0);
//!
//! // Worker 0 of node 0 pulls every key; keys homed on node 1 need the network.
//! let keys: Vec<Key> = (0..100).map(Key).collect();
//! nodes[0].pull(now, WorkerId(0), Ticket(1), &keys).unwrap();
//!
//! // The driver loop: drain transmits into the "network", deliver them, repeat until quiet.
//! let mut done = None;
//! loop {
//!     let mut frames = Vec::new();
//!     for node in nodes.iter_mut() {
//!         while let Some(t) = node.poll_transmit() {
//!             frames.push((node.id(), t.to(), t.to_frame()));
//!         }
//!         while let Some(ev) = node.poll_event() {
//!             done = Some(ev.into_parts());
//!         }
//!     }
//!     if frames.is_empty() {
//!         break;
//!     }
//!     for (from, to, frame) in frames {
//!         nodes[to.index()].handle_frame(now, from, &frame);
//!     }
//! }
//! let (worker, ticket, result) = done.unwrap();
//! assert_eq!((worker, ticket), (WorkerId(0), Ticket(1)));
//! assert_eq!(result, Ok(Completion::Pull(vec![0.0; 400])));
//! ```
#![no_std]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod access;
pub mod config;
pub mod error;
#[cfg(any(fuzzing, test, feature = "testing"))]
pub mod fuzzing;
pub mod ids;
pub mod layout;
pub mod node;
pub mod placement;
pub mod sampling;
pub mod session;
pub mod store;
pub mod time;
pub mod timing;
pub mod transport;
pub mod wire;

pub use access::{AccessKind, Hold, Issue, WorkerAccess};
pub use config::{Config, Init, Placement, Technique};
pub use error::{ConfigError, OpError, WireError};
pub use ids::*;
pub use layout::Layout;
pub use node::{Completion, Event, IntentKind, Node, Stats, Transmit};
pub use sampling::{Conformity, Distribution, SampleError, Sampler, SamplingOptions};
pub use store::Store;
pub use time::{Duration, Instant};
pub use transport::Transport;
pub use wire::WriteKind;
