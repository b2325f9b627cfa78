//! The shapes of the ZMTP messages that carry session packets: one packet in one part or two
//! (head, then frame), or a batch of small packets behind an empty first part; what the
//! sending side puts in a batch, and how the receiving side takes a message apart.

use std::collections::VecDeque;

use bytes::Bytes;
use parma_core::session::head_len;

/// A data packet whose frame is at most this long goes out in one ZMTP part, head and frame
/// copied together, in a batch (see `State::pump` in `shared.rs`); a longer one alone, in two
/// parts, the frame lent to the socket. The crate's encoder copies every part into its write buffer anyway:
/// one part saves the second's bookkeeping at both ends and the lending (an allocation) for
/// one copy of a small frame (the receiving end takes either shape, see [`split`]).
pub(crate) const ONE_PART_MAX: usize = 8 << 10;

/// Most packets, and most bytes (each part counted with [`PART_COST`], as the receiving
/// decoder counts it against its message bound), one ZMTP message carries as a batch.
pub(crate) const BATCH_PACKETS_MAX: usize = 64;
pub(crate) const BATCH_BYTES_MAX: usize = 64 << 10;
/// What the receiving decoder counts for a message part beside its bytes
/// (`zeromq::MESSAGE_PART_COST` in the vendored crate).
pub(crate) const PART_COST: usize = 64;

/// A session packet off a socket, as its head and its body: the two parts of a ZMTP message,
/// or one part cut where the head ends. `None`: more parts than a packet has.
pub(crate) fn split(mut parts: VecDeque<Bytes>) -> Option<(Bytes, Bytes)> {
    match (parts.pop_front(), parts.pop_front(), parts.pop_front()) {
        (Some(mut one), None, _) => {
            let body = one.split_off(head_len(&one));
            Some((one, body))
        }
        (Some(head), Some(body), None) => Some((head, body)),
        _ => None,
    }
}

/// The session packets of a ZMTP message off a socket, in order, each as its head and its
/// body: one packet, in one part or in two (see [`split`]); or, behind an empty first part
/// (no packet is empty), two or more, each whole in one part (a batch, sent by the pump).
/// `None`: any other shape, a stranger's message.
pub(crate) fn packets(mut parts: VecDeque<Bytes>) -> Option<Packets> {
    if !parts.front().is_some_and(Bytes::is_empty) {
        return split(parts).map(|p| Packets::One(Some(p)));
    }
    parts.pop_front();
    if parts.len() < 2 || parts.iter().any(Bytes::is_empty) {
        return None;
    }
    Some(Packets::Batch(parts.into_iter()))
}

/// The packets of one message (see [`packets`]).
pub(crate) enum Packets {
    One(Option<(Bytes, Bytes)>),
    Batch(std::collections::vec_deque::IntoIter<Bytes>),
}

impl Iterator for Packets {
    type Item = (Bytes, Bytes);

    fn next(&mut self) -> Option<(Bytes, Bytes)> {
        match self {
            Packets::One(p) => p.take(),
            Packets::Batch(parts) => {
                let mut one = parts.next()?;
                let body = one.split_off(head_len(&one));
                Some((one, body))
            }
        }
    }
}
