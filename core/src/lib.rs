//! # parma-core: the protocol of one node, as a pure state machine
//!
//! This crate is parma's protocol: ownership and routing of keys, relocation, the requests of
//! workers, the wire format and the parameter store. It is `#![no_std]` (with `alloc`) and it
//! **never** does I/O, spawns threads, reads a clock, uses OS randomness or panics on what a peer
//! sends. Drivers (`parma-runtime`, the simulator, fuzz targets) feed it inputs and carry out
//! its outputs.
//!
//! A [`Node`] has four kinds of methods, after quinn-proto:
//! - **inputs** (`&mut self`), after each of which the driver drains the outputs:
//!   - from the network and the clock: [`Node::handle_frame`] / [`Node::handle_message`],
//!     [`Node::handle_timeout`], [`Node::handle_peer_failed`], [`Node::handle_send_refused`];
//!   - worker operations, each completed by an [`Event`] under the worker's ticket:
//!     [`Node::pull`], [`Node::push`] (adds and sets), [`Node::localize`], [`Node::barrier`],
//!     [`Node::wait_sync`];
//!   - worker intents and clocks, which complete nothing: [`Node::intent`],
//!     [`Node::end_intents`], [`Node::advance_clock`];
//!   - sampling: [`Node::register_distribution`], [`Node::announce_distributions`] (tell the
//!     peers what a worker registered in the shared registry), [`Node::prepare_sample`], and
//!     [`Node::sample_intent`] (the intent for keys a worker's own [`Sampler`] drew);
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
//! that involves another node, become commands. Each worker's path is a [`WorkerAccess`]
//! ([`access`]), which every driver runs: the runtime, the simulator and the fuzzer.
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
//! 5. Every worker's pulls, pushes, sets, localizes, waits and barriers go through that
//!    worker's own [`WorkerAccess`]: local keys are served from the [`Store`], the misses
//!    become the node command, the command's ticket is [`WorkerAccess::record`]ed, and its
//!    completion [`WorkerAccess::complete`]s it. **The ordering rule:** an access the path
//!    holds ([`Hold::Overtakes`]: it would overtake the same worker's own remote operation on
//!    one of its keys, pulls and adds commuting among themselves) must not start until that
//!    operation completed; the node does not order it (a key can arrive here before an add
//!    that was sent to its old owner and forwarded after it). Invariant 4 rests on this.
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
//!
//! ## A key's state at a node
//!
//! Everything a node's protocol knows about one key is one record (`node/record.rs`), in two
//! parts under the key: an 8-byte hot part touched on every key-intent (intent count, the
//! sync round's flags, where a final delta went), and, for the few keys that have one, a cold
//! part with what few keys have (a forwarding pointer, operations waiting for the key to
//! arrive, a replica's owner, an owner's replica holders); which of these it has is the key's
//! lifecycle tag. The tag's transitions are one pure function, `node/lifecycle.rs`'s `step`,
//! and the owner's decision to move a key, replicate it or wait is another, `decide`; both
//! are tested over every input, and every change of a cold part goes through
//! `Keys::transition`, which asserts that the parts it leaves make the tag the step names
//! (`invariant!`: in debug and fuzzing builds).
//! Why the parts are two maps, and why when a key last arrived is kept apart as a timer, is
//! argued in `node/record.rs`.
//!
//! ## Invariants, and where they are kept
//!
//! `DESIGN.md`'s invariants, with the code that keeps each and the checks that watch it
//! ([`Node::check_invariants`] after every input in tests, the simulator and the fuzzer; the
//! cluster-wide ones in the simulator's checks and the fuzzer's `cluster_schedule`):
//!
//! 1. **One main copy per key, or one relocation in flight.** The old owner's `Store::take`
//!    removes the main copy in the step that writes the `Relocate` (or the `SyncReply` that
//!    moves it), and only the receiver's `Store::install` creates it again; a key is sent only
//!    to a node that reserved a slot for it (`Store::reserve_slots`, [`wire::ReplicaSync::ROOM`]).
//!    The home keeps the newest ownership epoch (`Store::record_owner`), so a late update
//!    cannot name a former owner. A forwarding pointer exists only in a record whose key
//!    departed (`lifecycle::step`: only `Departed` makes one, `Installed` drops it), asserted
//!    at every transition. Checked: no key both held and pointed away
//!    ([`Node::check_invariants`]); the simulator's `exactly_one_copy`; the fuzzer counts
//!    holders plus relocation frames in flight after every step.
//! 2. **No update lost or applied twice.** A remote write is one request applied once by the
//!    owner it reaches (forwarded, never copied; a late reply is dropped by its
//!    [`RequestId`]). A replica keeps local adds in an unsent delta (`Store::add`), hands it
//!    over with the version it holds (`Store::take_delta`), and on the owner's refresh
//!    becomes the owner's value plus what it added since (`Store::refresh_replica`).
//!    Checked: exact sums after the heal, in the simulator and the fuzzer.
//! 3. **Replicas converge.** Every sync round sends each replica's delta and version; the
//!    owner answers with its value whenever its version is newer ([`wire::Refresh`]).
//!    Checked: the simulator's `replicas_converged`, the fuzzer's heal.
//! 4. **A worker's pull after its own push sees it** (keys not replicated). Per-pair FIFO
//!    delivery, a forwarded request following its key, operations waiting in order at a
//!    node the key is on its way to, and the ordering rule of [`access`] (contract item 5)
//!    for what the node cannot order. Checked: the simulator's strict reads, the fuzzer's
//!    lower bound of every read, and `access`'s test of the race.
//! 5. **No request loops or waits forever.** Forwarding pointers released only for their
//!    own epoch, the home as the fallback route, a hop limit ([`wire::FailReason::RoutingLoop`]),
//!    a deadline on every pending request ([`Config::request_timeout`], scanned in
//!    [`Node::handle_timeout`]), and [`Node::handle_peer_failed`] failing what waits on a dead
//!    peer. Checked: the fuzzer (no request outlives its deadline by more than one scan;
//!    every operation completes in the heal) and the simulator's heal.
//! 6. **A replica only while its node has intent** (plus one round). The round in which a
//!    node's intent for a key ends drops its replica and sends the final delta
//!    ([`wire::ReplicaSync::FINAL`]); an owner gives replicas only to nodes that told it of
//!    intent, and moves a key only while no other replica exists (`lifecycle::decide`). Checked: the simulator's `no_replicas` and the fuzzer's heal.
//! 7. **Decoding never panics.** [`wire::decode`] reads through a checked reader: the kind by
//!    [`wire::Kind`]'s `TryFrom<u8>`, every count bounded by the bytes left
//!    ([`wire::size`]). Checked: the `wire_decode` and `wire_round_trip` fuzz targets, whose
//!    corpora run in `cargo test`.
#![no_std]
#![deny(unsafe_code)]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

/// Asserts an invariant (of the store, of a node's records) where a transition could break
/// it: in debug builds, and in fuzzing builds always. Never about a caller's input, which gets
/// an error instead. In other builds the condition is not evaluated (it may cost a lookup).
macro_rules! invariant {
    ($($t:tt)*) => {
        if cfg!(any(debug_assertions, fuzzing)) {
            assert!($($t)*);
        }
    };
}

pub mod access;
pub mod action_timing;
pub mod config;
pub mod digest;
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
pub mod transport;
pub mod wire;

pub use access::{AccessKind, Hold, Issue, WorkerAccess};
pub use config::{Announcement, Config, Gate, Init, Placement, Technique};
pub use digest::{cluster_digest, fnv1a};
pub use error::{ConfigError, OpError, WireError};
pub use ids::*;
pub use layout::Layout;
pub use node::{Completion, Event, IntentKind, Node, Stats, Tables, Transmit};
pub use sampling::{Conformity, Distribution, SampleError, Sampler, SamplingOptions};
pub use store::Store;
pub use time::{Duration, Instant};
pub use transport::Transport;
pub use wire::WriteKind;
