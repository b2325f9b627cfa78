//! The `Transport` trait: how frames move between nodes. `no_std`, so anyone can plug in one.
//!
//! A transport moves opaque byte frames between the nodes of one cluster, reliably and in order
//! for each ordered pair of nodes, and reports a peer as failed when it can no longer do that.
//! It knows nothing about what a frame means.
//!
//! The shape avoids copies: [`Transport::try_send`] hands the transport's own buffer (a pooled
//! `Vec`, a ZeroMQ message, a registered RDMA buffer) to a closure that encodes the frame into
//! it, and [`Transport::poll_recv`] lends each received frame to a closure for as long as it
//! runs. One encode into the send buffer, one decode out of the receive buffer, no other copy.
//!
//! Readiness: a driver that has nothing to do sleeps until the [`core::task::Waker`] it gave to
//! [`Transport::register_waker`] is woken. A transport wakes it when frames arrive or when
//! back-pressure ends. A transport that cannot notify (a polling RDMA transport) says so through
//! [`Transport::needs_polling`] and the driver polls it.
//!
//! The contract, beyond the method docs (`parma_conformance::kit` checks it on any transport
//! with one call):
//! - frames between each ordered pair, a node to itself included, arrive complete and in the
//!   order sent, or not at all once the pair has failed; a frame of zero bytes is a frame;
//! - once [`TransportEvent::PeerFailed`] for a peer has been handed out, no frame from that
//!   peer follows; the event is reported once. A peer that closed is reported as failed too;
//! - [`Transport::frame_len_max`] is at least the configuration's `Config::frame_len_max`
//!   (the runtime refuses to start otherwise), so a frame the node produced is refused only if
//!   the transport breaks its word; the runtime then fails the requests behind it at once;
//! - memory is bounded: a peer that does not read makes `try_send` answer `WouldBlock`, and
//!   the waker fires when room frees.
//!
//! One more rule, not checked by the kit (it would need a crash the kit cannot stage through
//! the trait): failures are reported cause first. The node names the first peer reported
//! failed in every error it gives for a broken cluster, so when a peer stops because it lost
//! another, a transport that can tell (both of this repository's do: their goodbye names the
//! first peer its sender lost) reports the lost peer before the one that left. Otherwise a
//! survivor would blame the messenger, not the dead node.

use core::task::Waker;

use crate::ids::NodeId;

/// Why a frame was not accepted for sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The transport's buffers toward this peer are full: back-pressure. Try again after the
    /// waker fires; nothing was sent.
    WouldBlock,
    /// The frame is larger than [`Transport::frame_len_max`].
    TooLarge,
    /// The peer is unknown to this transport.
    UnknownPeer,
    /// The peer has failed; frames to it are no longer delivered.
    PeerFailed,
    /// The transport is closed.
    Closed,
}

/// Why receiving stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// The transport is closed; no more frames will arrive.
    Closed,
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SendError::WouldBlock => {
                "the transport's buffers toward the peer are full; send again after its waker fires"
            }
            SendError::TooLarge => "the frame is larger than the transport's frame_len_max",
            SendError::UnknownPeer => "the peer is not one this transport knows",
            SendError::PeerFailed => "the peer has failed; frames to it are no longer delivered",
            SendError::Closed => "the transport is closed",
        })
    }
}

impl core::error::Error for SendError {}

impl core::fmt::Display for RecvError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RecvError::Closed => f.write_str("the transport is closed; no more frames will arrive"),
        }
    }
}

impl core::error::Error for RecvError {}

/// Something the transport observed about the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportEvent {
    /// The peer can no longer be reached; frames to it may have been lost.
    PeerFailed(NodeId),
}

/// A transport's own counters, for the node's statistics and its operators. A transport
/// fills what it knows and leaves the rest 0 (an in-process transport has no wire).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportCounters {
    /// Frames accepted by `try_send` (to itself included), and their bytes.
    pub frames_sent: u64,
    pub bytes_sent: u64,
    /// Frames handed out by `poll_recv`, and their bytes.
    pub frames_received: u64,
    pub bytes_received: u64,
    /// Packets and bytes put on the medium (data, retransmissions, acknowledgements,
    /// handshakes).
    pub packets_sent: u64,
    pub wire_bytes_sent: u64,
    /// Frames scheduled again after a retransmission timeout. Frames sent again on a new
    /// connection after a reconnect are not counted: the peer's greeting says which it lacks.
    pub frames_retransmitted: u64,
    /// Frames received twice and dropped.
    pub duplicates_dropped: u64,
    /// Connections to a peer opened again after the first.
    pub reconnects: u64,
    /// Connection attempts that failed.
    pub connects_failed: u64,
    /// Handshakes that did not finish in time, and connections to this node that sent nothing
    /// within the handshake timeout.
    pub handshakes_timed_out: u64,
    /// Packets a peer's session refused on its own link or in a handshake this node started
    /// (a malformed or unexpected packet, a Welcome with another digest or a wrong proof), and
    /// handshakes that proved the token but could not resume the session.
    pub session_refusals: u64,
    /// Strangers refused: connections that failed the medium's own handshake, and connections
    /// that never proved the token (another digest or node id, a Hello beside a live link, a
    /// wrong proof or anything else instead of it; a stale packet of a link just replaced by
    /// a reconnection counts too). Each refusal counts once, here or in `session_refusals`.
    pub strangers_refused: u64,
    /// `try_send` calls answered `WouldBlock`.
    pub sends_blocked: u64,
    /// Peers reported failed (closed peers included).
    pub peers_failed: u64,
}

/// Moves frames between nodes: reliable and in order per ordered pair, with back-pressure
/// instead of unbounded buffering.
pub trait Transport {
    /// This node's id.
    fn local_id(&self) -> NodeId;

    /// The largest frame this transport accepts, in bytes.
    fn frame_len_max(&self) -> usize;

    /// Sends one frame of exactly `len` bytes to `to`: the transport lends a buffer of `len`
    /// bytes to `fill`, which writes the frame into it. On `Err`, `fill` was not called and
    /// nothing was sent. Sending to `local_id()` is allowed and delivers to this node.
    fn try_send(&mut self, to: NodeId, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Result<(), SendError>;

    /// Hands up to `max_frames` received frames to `sink`, each with its sender, in arrival
    /// order; returns how many were handed over. Never blocks.
    fn poll_recv(
        &mut self,
        max_frames: usize,
        sink: &mut dyn FnMut(NodeId, &[u8]),
    ) -> Result<usize, RecvError>;

    /// The next cluster event (a failed peer), if any.
    fn poll_event(&mut self) -> Option<TransportEvent>;

    /// Registers the waker to wake when frames arrive or back-pressure ends. Replaces the
    /// previous one.
    fn register_waker(&mut self, waker: &Waker);

    /// The transport's counters (all 0 unless the transport keeps them).
    fn counters(&self) -> TransportCounters {
        TransportCounters::default()
    }

    /// True if the transport cannot wake a waker and must be polled.
    fn needs_polling(&self) -> bool {
        false
    }

    /// Stops sending and receiving. Frames accepted before are delivered if the medium allows.
    fn close(&mut self);
}
