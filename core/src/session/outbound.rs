//! What a session hands its driver to put on the medium: a packet's head, and a data packet's
//! frame shared with the retransmission buffer.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::packet::{Packet, HEAD_MAX};

/// A frame's bytes, shared between the retransmission buffer and the driver putting it on the
/// medium (a reference count, no copy).
#[derive(Clone, Debug, Default)]
pub struct Frame(pub(super) Arc<Vec<u8>>);

impl Frame {
    /// The frame's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
    /// Bytes of the frame.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub(super) fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// One packet for the medium: its head, and a data packet's frame after it.
#[derive(Clone, Debug)]
pub struct Outbound {
    head: [u8; HEAD_MAX],
    head_len: u8,
    body: Option<Frame>,
}

impl Outbound {
    pub(super) fn of(p: &Packet, body: Option<Frame>) -> Outbound {
        let mut head = [0u8; HEAD_MAX];
        let n = p.encode_head(&mut head);
        Outbound { head, head_len: n as u8, body }
    }
    /// The packet's head: all of a packet that is not a data packet.
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }
    /// A data packet's frame, which follows the head.
    pub fn body(&self) -> Option<&Frame> {
        self.body.as_ref()
    }
    /// The frame, taken out.
    pub fn into_body(self) -> Option<Frame> {
        self.body
    }
    /// Bytes of the whole packet.
    pub fn len(&self) -> usize {
        usize::from(self.head_len) + self.body.as_ref().map_or(0, Frame::len)
    }
    /// Never: a packet has at least a header.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The whole packet as one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(self.head());
        if let Some(b) = &self.body {
            v.extend_from_slice(b.as_slice());
        }
        v
    }
}
