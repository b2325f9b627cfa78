//! In-process transports for parma: nodes that live in one process.
//!
//! # Room
//!
//! This crate moves opaque byte frames between the nodes of one cluster and reports peers that
//! fail. It never interprets a frame: it does not decode, inspect, reorder by content or drop by
//! content. Everything it knows about a frame is its sender, its receiver and its length.
//! Protocol decisions belong in `parma-core`; driving loops belong in `parma-runtime`.
//!
//! # Two transports
//!
//! - [`threaded`]: `n` nodes in one process, each driven by its own thread, for real runs (the
//!   embedded default). Bounded FIFO queues per ordered pair, back-pressure through
//!   [`SendError::WouldBlock`](parma_core::transport::SendError::WouldBlock) and wakers.
//! - [`sim`]: a deterministic network on virtual time, driven from one thread by a simulator,
//!   with delays, cross-pair reordering and node pauses all derived from a seed. The same seed
//!   and the same sequence of calls give the same deliveries, which
//!   [`SimNet::trace_hash`](sim::SimNet::trace_hash) lets a test check.
//!
//! Both keep the contract of [`Transport`](parma_core::transport::Transport): delivery is
//! reliable and in order per ordered pair (sender, receiver), frames to oneself are allowed, and
//! a peer that closes or dies is reported once as
//! [`TransportEvent::PeerFailed`](parma_core::transport::TransportEvent::PeerFailed). Both add
//! one promise on top: once `PeerFailed(p)` is reported, no further frame from `p` is handed
//! over. A peer that closed gracefully has every frame it sent before closing delivered first; a
//! peer that was killed loses the frames still queued from it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod sim;
pub mod threaded;

pub use sim::{Faults, SimNet, SimTransport};
pub use threaded::{cluster, ThreadedController, ThreadedOptions, ThreadedTransport};

/// Buffers kept for reuse by one pool at most.
const POOL_LEN_MAX: usize = 256;
/// Buffers with a larger capacity are freed instead of pooled, so that one huge frame does not
/// pin its memory.
const POOL_BUF_CAPACITY_MAX: usize = 1 << 20;

/// A small free list of frame buffers.
#[derive(Debug, Default)]
struct BufPool {
    free: Vec<Vec<u8>>,
}

impl BufPool {
    /// A zeroed buffer of exactly `len` bytes, reused if one is free.
    fn take(&mut self, len: usize) -> Vec<u8> {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.resize(len, 0);
        buf
    }

    /// Returns a buffer for reuse.
    fn give(&mut self, buf: Vec<u8>) {
        if self.free.len() < POOL_LEN_MAX && buf.capacity() <= POOL_BUF_CAPACITY_MAX {
            self.free.push(buf);
        }
    }
}
