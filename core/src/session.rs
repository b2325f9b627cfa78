//! The session layer: what a transport over a medium that can lose a connection (TCP under
//! ZeroMQ, an RDMA queue pair) needs to keep the [`crate::Transport`] promise of frames
//! delivered reliably and in order per ordered pair of nodes, with back-pressure and failed
//! peers reported. Written once, sans-IO like the node (bytes and time in; packets, frames,
//! events and timers out; no sockets, no clock, no randomness of its own), so that every such
//! transport drives the same code and tests drive it with links cut at any moment.
//!
//! One [`Session`] per peer. Over each link (a connection of the medium) it runs:
//!
//! - **a handshake** before any data: the end with the lower node id connects and sends a
//!   Hello (protocol version, its node id and the one it expects, the configuration digest,
//!   its incarnation, a nonce, and where its receiving stands); the other answers with a
//!   Welcome proving the cluster token against that nonce, and the connecting end proves it
//!   back. A stranger, a node of another configuration or a wrong token is refused and counted;
//!   nothing of the session changes. The accepting end runs the handshake of a link the peer
//!   opened beside the session's link, which that link replaces only once it has proved the
//!   token (a peer whose old connection died unnoticed, or that comes back after a pause), so
//!   a stranger who knows the configuration digest cannot disturb an established link. The
//!   token never crosses the link: only
//!   [`Token::prove`]'s answers to fresh nonces do (a transport implements it with a keyed
//!   hash, e.g. HMAC-SHA-256);
//! - **sequence numbers and cumulative acknowledgements**: every frame gets the next number;
//!   a frame stays in a bounded retransmission buffer until the peer acknowledges it. After a
//!   new handshake each end resumes from what the other says it has, so a lost link loses and
//!   doubles nothing. A frame not acknowledged within `retransmit_timeout` goes out again with
//!   every later one (go-back-N); the receiver drops duplicates and gaps;
//! - **credits**: the receiver tells how many frames it will take beyond those it handed over
//!   (its window), and the sender keeps at most `window_bytes_max` bytes (or one larger
//!   frame alone) and `window_frames_max` frames unacknowledged: [`Session::send`] answers
//!   `WouldBlock` until [`SessionEvent::Writable`]. Neither end's memory grows with a slow
//!   peer;
//! - **heartbeats**: an idle link carries an acknowledgement every `heartbeat_interval`; a
//!   peer not heard from for `peer_timeout`, or that comes back as a new incarnation (it
//!   restarted and lost its state), becomes [`SessionEvent::PeerFailed`], once;
//! - **a clean close**: [`Session::close`] sends a Bye once every frame is acknowledged, and
//!   the peer sees [`SessionEvent::Closed`], not a failure.
//!
//! ## The driver's contract
//!
//! As for the node: after every input ([`Session::link_up`], [`Session::accept`],
//! [`Session::link_down`], [`Session::handle_packet`], [`Session::handle_timeout`],
//! [`Session::send`], [`Session::close`], [`Session::poll_recv`]), drain
//! [`Session::poll_transmit`] onto the session's current link and [`Session::poll_event`],
//! then call `handle_timeout` no later than [`Session::poll_timeout`]. Packets of one link are
//! handed over in the order they arrived. The first packet of a link the peer opened goes to
//! [`hello_of`] to learn whose it is, then to that session's [`Session::accept`], whose
//! Welcome goes back on that link; the link's next packet goes to
//! [`Session::handle_candidate`], and once that is `Ok` the link is the session's link (the
//! one before it is closed). A link whose packet was refused (an `Err`) is closed, and so is
//! the link of a handshake the session gave up ([`SessionEvent::CandidateDown`]).
//!
//! ## Without copies
//!
//! A frame is copied once on its way, by [`Session::send_with`]'s `fill` into a buffer of the
//! retransmission buffer (one of an acknowledged frame, kept for reuse within the window's
//! bounds, so that a stream of large frames does not allocate and free each). A driver whose
//! medium takes a message in parts sends [`Session::poll_transmit_parts`]: the packet's head
//! (with the acknowledgement and window of the moment) and the frame itself, shared by a
//! reference count. On the receiving end, [`Session::handle_parts`] decodes the head and says
//! whether the body is the next frame; the driver keeps the bytes it received and hands them
//! to its user, then reports them with [`Session::frames_taken`]. The bytes on the medium are
//! the same either way; [`Session::poll_transmit`], [`Session::handle_packet`] and
//! [`Session::poll_recv`] are the one-buffer forms.

mod outbound;
mod packet;
mod peer;

use core::fmt;

pub use outbound::{Frame, Outbound};
pub use packet::{
    head_len, Greeting, Packet, PacketError, DATA_OVERHEAD, HEAD_MAX, MAGIC, PROOF_LEN, VERSION,
};
pub use peer::Session;

use crate::ids::NodeId;
use crate::time::Duration;

/// Who this end is, as told in every handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// This node.
    pub me: NodeId,
    /// The digest of the shared configuration ([`crate::digest::cluster_digest`]). The
    /// handshake carries and compares it combined with the session options both ends must
    /// agree on ([`crate::digest::session_digest`]), so that ends whose options could not
    /// work together refuse each other.
    pub digest: u64,
    /// Chosen at start (random, from the driver): a node that restarts shows a new one.
    pub incarnation: u64,
}

/// Proves knowledge of the cluster token without revealing it.
pub trait Token {
    /// A keyed hash of `nonce`, `prover`, `verifier` and `digest` under the token. Both ends
    /// compute it; a peer whose answer differs does not hold the token.
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; PROOF_LEN];
}

/// Bounds and timers of a session; the same on every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Largest node frame a data packet carries.
    pub frame_len_max: usize,
    /// Most bytes of data packets kept unacknowledged (the retransmission buffer). A frame
    /// larger than this still goes, alone: when nothing else is unacknowledged. The receiver
    /// acknowledges at least every eighth of it (of its own; the options are the same on
    /// every node). The default (8 MiB) is far more than a data-centre link carries in an
    /// acknowledgement's time; a larger one only lets the sender run further ahead of the
    /// wire, into buffers that have long left the cache (over loopback, a 32 MiB window cost
    /// a tenth of the rate at 64 KiB a frame).
    pub window_bytes_max: usize,
    /// Most frames kept unacknowledged.
    pub window_frames_max: usize,
    /// Most frames received and not yet taken: the window granted to the peer. With frames of
    /// at most `frame_len_max`, this bounds what a peer's frames hold of the receiver's memory
    /// while its user takes none. The default (4,096, as `window_frames_max`) is about 4 ms of
    /// a stream of 1 KiB frames: a window of 1,024 (1 ms) halved such a stream whenever the
    /// receiving thread was off its core for longer, which on a loaded machine is often.
    pub recv_frames_max: u64,
    /// Most bytes of frames received and not yet taken. A frame that would go beyond it is
    /// dropped unacknowledged (the sender sends it again after `retransmit_timeout`), and the
    /// window grants no more frames while the bound is reached; a frame larger than the bound
    /// is taken alone, when nothing else waits. With `recv_frames_max`, this bounds what one
    /// peer's frames hold of the receiver's memory while its user takes none, whatever their
    /// size. The default (16 MiB, twice the sender's `window_bytes_max`) is not reached by a
    /// user that keeps up, so it drops nothing then.
    pub recv_bytes_max: usize,
    /// An idle link carries an acknowledgement this often.
    pub heartbeat_interval: Duration,
    /// A peer not heard from for this long has failed.
    pub peer_timeout: Duration,
    /// Frames not acknowledged for this long go out again.
    pub retransmit_timeout: Duration,
    /// A link whose handshake takes longer than this is dropped and tried again.
    pub handshake_timeout: Duration,
    /// Longest an acknowledgement waits for data to ride on.
    pub ack_delay: Duration,
    /// First wait before connecting again after a lost link; doubles up to `reconnect_max`.
    pub reconnect_min: Duration,
    /// Longest wait between attempts to connect.
    pub reconnect_max: Duration,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            frame_len_max: 16 << 20,
            window_bytes_max: 8 << 20,
            window_frames_max: 4096,
            recv_frames_max: 4096,
            recv_bytes_max: 16 << 20,
            heartbeat_interval: Duration::from_millis(500),
            peer_timeout: Duration::from_secs(5),
            retransmit_timeout: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(1),
            ack_delay: Duration::from_millis(1),
            reconnect_min: Duration::from_millis(20),
            reconnect_max: Duration::from_secs(1),
        }
    }
}

impl SessionOptions {
    /// Checks that every bound is positive and that the timers fit together.
    pub fn validate(&self) -> Result<(), Refusal> {
        let bad = |what| Err(Refusal::Options { what });
        if self.frame_len_max == 0
            || self.window_bytes_max == 0
            || self.window_frames_max == 0
            || self.recv_frames_max == 0
            || self.recv_bytes_max == 0
        {
            return bad(
                "frame_len_max, window_bytes_max, window_frames_max, recv_frames_max and recv_bytes_max must be positive",
            );
        }
        if self.heartbeat_interval.0 == 0 || self.heartbeat_interval >= self.peer_timeout {
            return bad("heartbeat_interval must be positive and below peer_timeout");
        }
        if self.reconnect_min.0 == 0 || self.reconnect_min > self.reconnect_max {
            return bad("reconnect_min must be positive and at most reconnect_max");
        }
        if self.retransmit_timeout.0 == 0 || self.handshake_timeout.0 == 0 {
            return bad("retransmit_timeout and handshake_timeout must be positive");
        }
        Ok(())
    }
}

/// Why a session gave up its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailCause {
    /// Nothing heard for `peer_timeout`.
    Silent,
    /// The peer came back as a new incarnation, or without frames it had acknowledged: it
    /// restarted, and its state is gone.
    Restarted,
}

/// What the session tells its driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// Open a link to the peer now (this end is the one that connects), then call
    /// [`Session::link_up`].
    Connect,
    /// The link is authenticated; data flows.
    Up,
    /// The session gave up its link (a handshake that took too long): close it.
    Down,
    /// The handshake on the link the peer opened ([`Session::accept`]) did not prove the
    /// token within `handshake_timeout`: close that link. The session's own link stays.
    CandidateDown,
    /// Room freed after [`Session::send`] answered `WouldBlock`.
    Writable,
    /// The peer failed; frames to it are no longer delivered.
    PeerFailed(FailCause),
    /// The session was closed cleanly, by either end.
    Closed,
}

/// Why a packet, a link or the options were refused. Nothing of the session changed beyond
/// its counters and, for a packet on its link, the loss of that link. A handshake on a link
/// the peer opened that is refused before its proof passed changes nothing of the session's
/// link, whatever the refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Not a session packet.
    Malformed(PacketError),
    /// The first packet of a link was not a Hello.
    NotHello,
    /// A greeting from or for another node than this session's.
    WrongPeer { claimed: NodeId, expected: NodeId },
    /// The peer runs another configuration, or session options that do not work with ours
    /// ([`crate::digest::session_digest`]).
    Digest { theirs: u64, ours: u64 },
    /// The peer does not hold the cluster token.
    Token,
    /// A packet the link's state does not allow (data before the handshake ended).
    Unexpected { kind: &'static str },
    /// The peer claims frames that were never sent.
    Resume { next: u64, sent: u64 },
    /// The peer restarted (see [`FailCause::Restarted`]): the session failed.
    Restarted,
    /// The session is closed or failed.
    Closed,
    /// A Hello while the session's link is up and its peer was heard from lately: a live link
    /// is not given up for one that has not proved the token.
    LinkAlive,
    /// Options that do not fit together.
    Options { what: &'static str },
}

impl Refusal {
    /// A short name of the refusal's kind, the same for every refusal of that kind (for
    /// counting and rate-limiting by kind).
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::NotHello => "not a hello",
            Refusal::WrongPeer { .. } => "wrong peer",
            Refusal::Digest { .. } => "digest",
            Refusal::Token => "token",
            Refusal::Unexpected { .. } => "unexpected",
            Refusal::Resume { .. } => "resume",
            Refusal::Restarted => "restarted",
            Refusal::Closed => "closed",
            Refusal::LinkAlive => "link alive",
            Refusal::Options { .. } => "options",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Malformed(e) => write!(f, "malformed packet: {e}"),
            Refusal::NotHello => f.write_str("a link must open with a Hello"),
            Refusal::WrongPeer { claimed, expected } => {
                write!(f, "greeting names node {claimed}, expected node {expected}")
            }
            Refusal::Digest { theirs, ours } => write!(
                f,
                "the peer's session digest {theirs:#018x} differs from ours {ours:#018x}: every node \
                 must run the same configuration and the same session options frame_len_max, \
                 window_bytes_max, heartbeat_interval and peer_timeout"
            ),
            Refusal::Token => f.write_str("the peer does not hold the cluster token"),
            Refusal::Unexpected { kind } => write!(f, "unexpected {kind} packet in this state of the link"),
            Refusal::Resume { next, sent } => {
                write!(f, "the peer acknowledges frame {next} but only {sent} were sent")
            }
            Refusal::Restarted => f.write_str("the peer restarted and lost its state"),
            Refusal::Closed => f.write_str("the session is closed"),
            Refusal::LinkAlive => f.write_str("a Hello while the link to that peer is up and alive"),
            Refusal::Options { what } => write!(f, "session options: {what}"),
        }
    }
}

impl core::error::Error for Refusal {}

/// Counters of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionStats {
    /// Packets handed to the medium, and their bytes.
    pub packets_sent: u64,
    pub bytes_sent: u64,
    /// Data packets among them (first sendings and retransmissions).
    pub frames_sent: u64,
    /// Frames scheduled again after `retransmit_timeout`.
    pub frames_retransmitted: u64,
    /// Acknowledgements sent on their own (delayed or heartbeats).
    pub heartbeats_sent: u64,
    /// Packets from the peer that decoded.
    pub packets_received: u64,
    /// Frames delivered in order.
    pub frames_received: u64,
    /// Frames received again (after a lost link or a retransmission).
    pub duplicates_dropped: u64,
    /// Frames after a gap or beyond the window (its frames, or its bytes: `recv_bytes_max`).
    pub out_of_order_dropped: u64,
    /// Packets refused on the session's link or in a handshake this end started, and proved
    /// handshakes whose resumption was refused.
    pub refused: u64,
    /// Handshakes of links the peer opened refused before they proved the token (a greeting
    /// from another node or configuration, a Hello beside a live link, a wrong proof, any
    /// other packet instead of the proof): the session's own link never changes for them.
    pub strangers_refused: u64,
    /// Handshakes completed.
    pub links_up: u64,
    /// Authenticated links lost.
    pub links_lost: u64,
    /// Handshakes given up.
    pub handshakes_timed_out: u64,
}

/// The greeting of the first packet of a link the peer opened: which session it is for.
pub fn hello_of(bytes: &[u8]) -> Result<Greeting, Refusal> {
    match Packet::is_hello(bytes) {
        Ok(true) => {}
        Ok(false) => return Err(Refusal::NotHello),
        Err(e) => return Err(Refusal::Malformed(e)),
    }
    match Packet::decode(bytes, 0) {
        Ok(Packet::Hello(g)) => Ok(g),
        Ok(_) => Err(Refusal::NotHello),
        Err(e) => Err(Refusal::Malformed(e)),
    }
}

#[cfg(test)]
mod tests;
