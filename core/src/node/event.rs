//! What a node tells its driver: frames to send and completions for workers.

use alloc::vec::Vec;

use crate::error::{OpError, WireError};
use crate::ids::{ClusterId, MembershipEpoch, NodeId, Ticket, WorkerId};
use crate::wire::Message;

/// A message to send to one node. Encode it with [`Transmit::encode`] into a buffer of
/// [`Transmit::encoded_len`] bytes (the transport's own).
#[derive(Debug)]
pub struct Transmit {
    pub(crate) to: NodeId,
    pub(crate) msg: Message,
    pub(crate) cluster: ClusterId,
    pub(crate) sender: NodeId,
    pub(crate) epoch: MembershipEpoch,
}

impl Transmit {
    /// The destination.
    pub fn to(&self) -> NodeId {
        self.to
    }
    /// The message (for inspection; drivers send the encoded frame).
    pub fn message(&self) -> &Message {
        &self.msg
    }
    /// Length of the encoded frame.
    pub fn encoded_len(&self) -> usize {
        self.msg.encoded_len()
    }
    /// Encodes the frame into `buf`, which must hold at least `encoded_len()` bytes.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.msg.encode(self.cluster, self.sender, self.epoch, buf)
    }
    /// The encoded frame as a new vector.
    pub fn to_frame(&self) -> Vec<u8> {
        self.msg.to_frame(self.cluster, self.sender, self.epoch)
    }
}

/// How a worker operation completed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Completion {
    /// A pull: the values of the keys that were not local when it was issued, in the order
    /// those keys were given to [`crate::Node::pull`], concatenated.
    Pull(Vec<f32>),
    /// A push or set was applied at every key's owner.
    Write,
    /// Every key of a `localize` is now held here.
    Localize,
    /// A barrier passed.
    Barrier,
    /// Two more sync rounds ended after `wait_sync` was called (or the technique runs none).
    Sync,
    /// The worker passed its clock gate ([`crate::Node::gate`]).
    Gate,
}

/// The completion of one worker operation, to be handed to that worker.
#[derive(Debug)]
pub struct Event {
    pub(crate) worker: WorkerId,
    pub(crate) ticket: Ticket,
    pub(crate) result: Result<Completion, OpError>,
}

impl Event {
    /// The worker that issued the operation.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }
    /// The ticket the worker gave with the operation.
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }
    /// How it ended.
    pub fn result(&self) -> &Result<Completion, OpError> {
        &self.result
    }
    /// Worker, ticket and result.
    pub fn into_parts(self) -> (WorkerId, Ticket, Result<Completion, OpError>) {
        (self.worker, self.ticket, self.result)
    }
}
