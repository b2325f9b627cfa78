//! The wire format: one frame per message, a fixed header and a body of fields and sections.
//!
//! Decoding untrusted bytes goes through [`decode`] only: it never panics, never allocates more
//! than the frame's length justifies, and returns a typed [`WireError`]. [`Message::encode`]
//! never panics given a buffer of [`Message::encoded_len`] bytes. `docs/wire.md` specifies
//! the format byte by byte.

use alloc::vec::Vec;

use crate::error::WireError;
use crate::ids::{ClusterId, DistId, Epoch, Key, MembershipEpoch, NodeId, RequestId, Version};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"PRMA";
/// The format version this code writes and reads. Version 6 (2026-12-03) carries the
/// sender's membership epoch in header bytes 14–15; `docs/wire.md` lists the changes.
pub const FORMAT_VERSION: u8 = 6;
/// Bytes in the fixed header.
pub const HEADER_LEN: usize = 20;

/// Sizes of the fields and records of a body, used by the encoder ([`Message::body_len`],
/// the writer) and the decoder (the counts it accepts) alike, so the two can't disagree.
pub mod size {
    /// A request id, a generation or a fingerprint (`u64`).
    pub const U64: usize = 8;
    /// A round, a distribution id or an epoch (`u32`).
    pub const U32: usize = 4;
    /// A node id (`u16`).
    pub const NODE: usize = 2;
    /// A hop count, a write kind, a reason code or replica flags (`u8`).
    pub const U8: usize = 1;
    /// The element count in front of every section (`u32`).
    pub const COUNT: usize = 4;
    /// A key in a key section.
    pub const KEY: usize = 8;
    /// A float in a value section.
    pub const VALUE: usize = 4;
    /// A [`super::Moved`] record: key, epoch, version.
    pub const MOVED: usize = KEY + U32 + U64;
    /// An [`super::OwnerChange`] record: key, epoch, previous owner.
    pub const OWNER_CHANGE: usize = KEY + U32 + NODE;
    /// A [`super::Release`] record: key, epoch.
    pub const RELEASE: usize = KEY + U32;
    /// A [`super::ReplicaSync`] record: key, version, flags.
    pub const REPLICA_SYNC: usize = KEY + U64 + U8;
    /// A [`super::Refresh`] record: key, version.
    pub const REFRESH: usize = KEY + U64;
    /// The fixed fields of a pull: request, origin, hops.
    pub const PULL_HEAD: usize = U64 + NODE + U8;
    /// The fixed fields of a push: request, origin, hops, write kind.
    pub const PUSH_HEAD: usize = PULL_HEAD + U8;
    /// The fixed fields of a localize: origin, hops.
    pub const LOCALIZE_HEAD: usize = NODE + U8;
    /// The fixed fields of a failure: request, reason code, reason node.
    pub const FAILED_HEAD: usize = U64 + U8 + NODE;
    /// The fixed fields of a sync request: round, origin, hops.
    pub const SYNC_HEAD: usize = U32 + NODE + U8;

    // The record sizes of format version 3 (`docs/wire.md`); a change here changes the format.
    const _: () = assert!(MOVED == 20 && OWNER_CHANGE == 14 && RELEASE == 12);
    const _: () = assert!(REPLICA_SYNC == 17 && REFRESH == 16 && PULL_HEAD == 11 && FAILED_HEAD == 11);
}

/// The fixed header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The message kind (see [`Kind`]).
    pub kind: u8,
    /// The cluster the sender belongs to.
    pub cluster: ClusterId,
    /// The node that sent this frame (not necessarily the request's origin).
    pub sender: NodeId,
    /// The sender's membership epoch when it sent this frame.
    pub epoch: MembershipEpoch,
    /// Bytes after the header.
    pub body_len: u32,
}

/// Whether a push adds to the value or replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// Add the values (the usual gradient update).
    Add,
    /// Replace the values.
    Set,
}

/// Why a node gave up on (part of) a request it could not serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// The request exceeded the hop limit.
    RoutingLoop,
    /// A node on the way had no room to hold the request.
    Busy,
    /// A node on the way knows that `node`, the next one, has failed.
    Unreachable { node: NodeId },
    /// The key's home node has no room to create the key (its store is full).
    StoreFull,
    /// The transport of a node on the way refused a frame of the request or of its answer
    /// for good (too large for it, or a peer it does not know).
    Refused,
}

/// A key handed over in a relocation, with its ownership epoch and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    /// The key.
    pub key: Key,
    /// Its new ownership epoch.
    pub epoch: Epoch,
    /// Its version.
    pub version: Version,
}

/// A key's ownership change, as reported to its home node or confirmed by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerChange {
    /// The key.
    pub key: Key,
    /// The epoch the change created.
    pub epoch: Epoch,
    /// The owner before the change.
    pub prev: NodeId,
}

/// A forwarding pointer the receiver may drop: the one for `key` created by the move to `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// The key.
    pub key: Key,
    /// The epoch the move that created the pointer gave the key.
    pub epoch: Epoch,
}

/// A replica holder's state of one key in a sync request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaSync {
    /// The key.
    pub key: Key,
    /// The owner's version the replica was last refreshed to.
    pub version: Version,
    /// [`ReplicaSync::DELTA`], [`ReplicaSync::FINAL`] and [`ReplicaSync::ROOM`].
    pub flags: u8,
}

impl ReplicaSync {
    /// The request's `deltas` hold this key's delta (in the order of the entries).
    pub const DELTA: u8 = 1;
    /// The holder's intent ended: it dropped the replica; the delta, if any, is its last.
    pub const FINAL: u8 = 2;
    /// The holder has a slot reserved for the key's main copy: the owner may hand the key
    /// over in its answer (AdaPM's upgrade of the last replica). Without it the owner keeps
    /// the key, since a node must never be sent a key it has no room for.
    pub const ROOM: u8 = 4;
    /// Every flag a record may carry.
    pub const ALL: u8 = Self::DELTA | Self::FINAL | Self::ROOM;
    /// Whether the entry carries a delta.
    pub fn has_delta(&self) -> bool {
        self.flags & Self::DELTA != 0
    }
    /// Whether the holder dropped its replica.
    pub fn is_final(&self) -> bool {
        self.flags & Self::FINAL != 0
    }
    /// Whether the holder has room for the key's main copy.
    pub fn has_room(&self) -> bool {
        self.flags & Self::ROOM != 0
    }
}

/// A key's value as an owner sends it to a replica holder: a new replica or a refresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refresh {
    /// The key.
    pub key: Key,
    /// The main copy's version.
    pub version: Version,
}

/// Every message of the protocol.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// Read `keys`; answered by one or more [`Message::PullReply`] to `origin`.
    Pull { req: RequestId, origin: NodeId, hops: u8, keys: Vec<Key> },
    /// Values of some keys of a pull, concatenated in key order.
    PullReply { req: RequestId, keys: Vec<Key>, values: Vec<f32> },
    /// Add or set values; answered by [`Message::PushReply`] to `origin`.
    Push { req: RequestId, origin: NodeId, hops: u8, write: WriteKind, keys: Vec<Key>, values: Vec<f32> },
    /// These keys of a push were applied.
    PushReply { req: RequestId, keys: Vec<Key> },
    /// Move `keys` to `origin` (Lapse's localize).
    Localize { origin: NodeId, hops: u8, keys: Vec<Key> },
    /// Keys handed over to the receiver: ownership, version and values (concatenated).
    Relocate { moved: Vec<Moved>, values: Vec<f32> },
    /// To a home node: the sender now owns these keys.
    OwnerUpdate { changes: Vec<OwnerChange> },
    /// From a home node: the receiver may drop its forwarding pointers for these epochs.
    PointerRelease { released: Vec<Release> },
    /// These keys of a request could not be served.
    RequestFailed { req: RequestId, reason: FailReason, keys: Vec<Key> },
    /// To the barrier coordinator: all workers of the sender entered barrier `generation`.
    BarrierEnter { generation: u64 },
    /// From the coordinator: barrier `generation` is complete.
    BarrierRelease { generation: u64 },
    /// A sync round's grouped request from `origin` to the owners (believed) of its keys,
    /// forwarded like a request: keys where `origin`'s intent began (`starts`) or ended
    /// (`ends`), its replicas' versions and deltas (`replicas`, deltas concatenated in
    /// `deltas`), and, for the receiver as home node, ownership changes (`owners`, never
    /// forwarded). Answered by [`Message::SyncReply`].
    Sync {
        round: u32,
        origin: NodeId,
        hops: u8,
        starts: Vec<Key>,
        ends: Vec<Key>,
        replicas: Vec<ReplicaSync>,
        deltas: Vec<f32>,
        owners: Vec<OwnerChange>,
    },
    /// An owner's grouped answer to the entries of a sync request of round `round`: keys moved
    /// to the receiver (`relocated`), new or refreshed replicas (`refreshed`), entries that need
    /// nothing sent back (`acks`), entries that could not be routed (`failed`). Values of
    /// `relocated`, then of `refreshed`, concatenated in `values`.
    SyncReply {
        round: u32,
        relocated: Vec<Moved>,
        refreshed: Vec<Refresh>,
        acks: Vec<Key>,
        failed: Vec<Key>,
        values: Vec<f32>,
    },
    /// The sender registered a sampling distribution as `dist`, with this fingerprint (a hash
    /// of the distribution, its conformity level and the sampling options). Every node must
    /// register the same ones in the same order; a receiver that registered something else
    /// as `dist` records the mismatch.
    DistCheck { dist: DistId, fingerprint: u64 },
    /// Under a clock gate: every update the sender's workers made at clocks below `clock` is
    /// applied at its main copy (the sender's flushed clock; `u64::MAX` once all its workers
    /// retired). Sent to every peer whenever it grows.
    Flushed { clock: u64 },
    /// Under SparseSSP, to a node whose flushed clock is below `below`: may a worker of the
    /// sender read `keys` now, or may an update made on the receiver at a clock below `below`
    /// to one of them still be unapplied at its main copy, or still be made? Answered by
    /// [`Message::SpeculateReply`] with the same `query`.
    Speculate { query: u64, below: u64, keys: Vec<Key> },
    /// The answer to [`Message::Speculate`] `query`: `clear` when none of its keys has such an
    /// update on the sender.
    SpeculateReply { query: u64, clear: bool },
}

/// Message kinds as numbered on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum Kind {
    Pull = 1,
    PullReply = 2,
    Push = 3,
    PushReply = 4,
    Localize = 5,
    Relocate = 6,
    OwnerUpdate = 7,
    PointerRelease = 8,
    RequestFailed = 9,
    BarrierEnter = 10,
    BarrierRelease = 11,
    Sync = 12,
    SyncReply = 13,
    DistCheck = 14,
    Flushed = 15,
    Speculate = 16,
    SpeculateReply = 17,
}

impl TryFrom<u8> for Kind {
    type Error = WireError;

    /// The kind numbered `n` on the wire; [`WireError::UnknownKind`] for any other number.
    fn try_from(n: u8) -> Result<Kind, WireError> {
        const ALL: [Kind; 17] = [
            Kind::Pull,
            Kind::PullReply,
            Kind::Push,
            Kind::PushReply,
            Kind::Localize,
            Kind::Relocate,
            Kind::OwnerUpdate,
            Kind::PointerRelease,
            Kind::RequestFailed,
            Kind::BarrierEnter,
            Kind::BarrierRelease,
            Kind::Sync,
            Kind::SyncReply,
            Kind::DistCheck,
            Kind::Flushed,
            Kind::Speculate,
            Kind::SpeculateReply,
        ];
        ALL.into_iter().find(|k| *k as u8 == n).ok_or(WireError::UnknownKind { kind: n })
    }
}

impl Message {
    /// The kind of this message.
    pub fn kind(&self) -> Kind {
        match self {
            Message::Pull { .. } => Kind::Pull,
            Message::PullReply { .. } => Kind::PullReply,
            Message::Push { .. } => Kind::Push,
            Message::PushReply { .. } => Kind::PushReply,
            Message::Localize { .. } => Kind::Localize,
            Message::Relocate { .. } => Kind::Relocate,
            Message::OwnerUpdate { .. } => Kind::OwnerUpdate,
            Message::PointerRelease { .. } => Kind::PointerRelease,
            Message::RequestFailed { .. } => Kind::RequestFailed,
            Message::BarrierEnter { .. } => Kind::BarrierEnter,
            Message::BarrierRelease { .. } => Kind::BarrierRelease,
            Message::Sync { .. } => Kind::Sync,
            Message::SyncReply { .. } => Kind::SyncReply,
            Message::DistCheck { .. } => Kind::DistCheck,
            Message::Flushed { .. } => Kind::Flushed,
            Message::Speculate { .. } => Kind::Speculate,
            Message::SpeculateReply { .. } => Kind::SpeculateReply,
        }
    }

    /// Length of the body (without header) in bytes.
    pub fn body_len(&self) -> usize {
        use size::*;
        let keys = |k: &Vec<Key>| COUNT + KEY * k.len();
        let vals = |v: &Vec<f32>| COUNT + VALUE * v.len();
        match self {
            Message::Pull { keys: k, .. } => PULL_HEAD + keys(k),
            Message::PullReply { keys: k, values, .. } => U64 + keys(k) + vals(values),
            Message::Push { keys: k, values, .. } => PUSH_HEAD + keys(k) + vals(values),
            Message::PushReply { keys: k, .. } => U64 + keys(k),
            Message::Localize { keys: k, .. } => LOCALIZE_HEAD + keys(k),
            Message::Relocate { moved, values } => COUNT + MOVED * moved.len() + vals(values),
            Message::OwnerUpdate { changes } => COUNT + OWNER_CHANGE * changes.len(),
            Message::PointerRelease { released } => COUNT + RELEASE * released.len(),
            Message::RequestFailed { keys: k, .. } => FAILED_HEAD + keys(k),
            Message::BarrierEnter { .. } | Message::BarrierRelease { .. } | Message::Flushed { .. } => U64,
            Message::DistCheck { .. } => U32 + U64,
            Message::Speculate { keys: k, .. } => U64 + U64 + keys(k),
            Message::SpeculateReply { .. } => U64 + U8,
            Message::Sync { starts, ends, replicas, deltas, owners, .. } => {
                SYNC_HEAD
                    + keys(starts)
                    + keys(ends)
                    + COUNT
                    + REPLICA_SYNC * replicas.len()
                    + vals(deltas)
                    + COUNT
                    + OWNER_CHANGE * owners.len()
            }
            Message::SyncReply { relocated, refreshed, acks, failed, values, .. } => {
                U32 + COUNT
                    + MOVED * relocated.len()
                    + COUNT
                    + REFRESH * refreshed.len()
                    + keys(acks)
                    + keys(failed)
                    + vals(values)
            }
        }
    }

    /// Length of the whole frame in bytes.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Writes the frame into `buf[..encoded_len()]` and returns its length.
    pub fn encode(
        &self,
        cluster: ClusterId,
        sender: NodeId,
        epoch: MembershipEpoch,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let len = self.encoded_len();
        let body_len = u32::try_from(self.body_len()).map_err(|_| WireError::Oversized { len })?;
        let buf = buf.get_mut(..len).ok_or(WireError::BufferTooSmall)?;
        let mut w = Writer { buf, at: 0 };
        w.bytes(&MAGIC);
        w.u8(FORMAT_VERSION);
        w.u8(self.kind() as u8);
        w.u16(0);
        w.u32(cluster.0);
        w.u16(sender.0);
        w.u16(epoch.0);
        w.u32(body_len);
        self.encode_body(&mut w);
        // A sizing bug must not pass as a frame: `body_len` and the writer disagree.
        if w.at != len {
            return Err(WireError::BufferTooSmall);
        }
        Ok(len)
    }

    /// The frame as a new vector; empty if the message cannot be encoded (a body over
    /// `u32::MAX` bytes, which no configuration allows).
    pub fn to_frame(&self, cluster: ClusterId, sender: NodeId, epoch: MembershipEpoch) -> Vec<u8> {
        let mut v = alloc::vec![0u8; self.encoded_len()];
        match self.encode(cluster, sender, epoch, &mut v) {
            Ok(_) => v,
            Err(_) => Vec::new(),
        }
    }

    fn encode_body(&self, w: &mut Writer<'_>) {
        match self {
            Message::Pull { req, origin, hops, keys } => {
                w.u64(req.0);
                w.u16(origin.0);
                w.u8(*hops);
                w.keys(keys);
            }
            Message::PullReply { req, keys, values } => {
                w.u64(req.0);
                w.keys(keys);
                w.values(values);
            }
            Message::Push { req, origin, hops, write, keys, values } => {
                w.u64(req.0);
                w.u16(origin.0);
                w.u8(*hops);
                w.u8(match write {
                    WriteKind::Add => 0,
                    WriteKind::Set => 1,
                });
                w.keys(keys);
                w.values(values);
            }
            Message::PushReply { req, keys } => {
                w.u64(req.0);
                w.keys(keys);
            }
            Message::Localize { origin, hops, keys } => {
                w.u16(origin.0);
                w.u8(*hops);
                w.keys(keys);
            }
            Message::Relocate { moved, values } => {
                w.moved(moved);
                w.values(values);
            }
            Message::OwnerUpdate { changes } => w.changes(changes),
            Message::PointerRelease { released } => {
                w.count(released.len());
                for r in released {
                    w.u64(r.key.0);
                    w.u32(r.epoch.0);
                }
            }
            Message::RequestFailed { req, reason, keys } => {
                w.u64(req.0);
                let (code, node) = match reason {
                    FailReason::RoutingLoop => (0, 0),
                    FailReason::Busy => (1, 0),
                    FailReason::Unreachable { node } => (2, node.0),
                    FailReason::StoreFull => (3, 0),
                    FailReason::Refused => (4, 0),
                };
                w.u8(code);
                w.u16(node);
                w.keys(keys);
            }
            Message::BarrierEnter { generation } | Message::BarrierRelease { generation } => {
                w.u64(*generation)
            }
            Message::Flushed { clock } => w.u64(*clock),
            Message::Speculate { query, below, keys } => {
                w.u64(*query);
                w.u64(*below);
                w.keys(keys);
            }
            Message::SpeculateReply { query, clear } => {
                w.u64(*query);
                w.u8(u8::from(*clear));
            }
            Message::DistCheck { dist, fingerprint } => {
                w.u32(dist.0);
                w.u64(*fingerprint);
            }
            Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners } => {
                w.u32(*round);
                w.u16(origin.0);
                w.u8(*hops);
                w.keys(starts);
                w.keys(ends);
                w.count(replicas.len());
                for r in replicas {
                    w.u64(r.key.0);
                    w.u64(r.version.0);
                    w.u8(r.flags);
                }
                w.values(deltas);
                w.changes(owners);
            }
            Message::SyncReply { round, relocated, refreshed, acks, failed, values } => {
                w.u32(*round);
                w.moved(relocated);
                w.count(refreshed.len());
                for r in refreshed {
                    w.u64(r.key.0);
                    w.u64(r.version.0);
                }
                w.keys(acks);
                w.keys(failed);
                w.values(values);
            }
        }
    }
}

/// Reads and checks only the header of `frame`.
pub fn decode_header(frame: &[u8], cluster: ClusterId, frame_len_max: usize) -> Result<Header, WireError> {
    if frame.len() > frame_len_max {
        return Err(WireError::Oversized { len: frame.len() });
    }
    let mut r = Reader { buf: frame };
    if r.take(4)? != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = r.u8()?;
    if version != FORMAT_VERSION {
        return Err(WireError::UnsupportedVersion { version });
    }
    let kind = r.u8()?;
    if r.u16()? != 0 {
        return Err(WireError::BadField);
    }
    let their_cluster = r.u32()?;
    let sender = NodeId(r.u16()?);
    let epoch = MembershipEpoch(r.u16()?);
    let body_len = r.u32()?;
    if their_cluster != cluster.0 {
        return Err(WireError::ForeignCluster { cluster: their_cluster });
    }
    if body_len as usize != r.buf.len() {
        return Err(WireError::LengthMismatch);
    }
    Ok(Header { kind, cluster: ClusterId(their_cluster), sender, epoch, body_len })
}

/// Decodes one frame: checks the header (magic, version, cluster, lengths) and the body.
pub fn decode(
    frame: &[u8],
    cluster: ClusterId,
    frame_len_max: usize,
) -> Result<(Header, Message), WireError> {
    let header = decode_header(frame, cluster, frame_len_max)?;
    let mut r = Reader { buf: &frame[HEADER_LEN..] };
    let msg = match Kind::try_from(header.kind)? {
        Kind::Pull => Message::Pull {
            req: RequestId(r.u64()?),
            origin: NodeId(r.u16()?),
            hops: r.u8()?,
            keys: r.keys()?,
        },
        Kind::PullReply => {
            Message::PullReply { req: RequestId(r.u64()?), keys: r.keys()?, values: r.values()? }
        }
        Kind::Push => {
            let req = RequestId(r.u64()?);
            let origin = NodeId(r.u16()?);
            let hops = r.u8()?;
            let write = match r.u8()? {
                0 => WriteKind::Add,
                1 => WriteKind::Set,
                _ => return Err(WireError::BadField),
            };
            Message::Push { req, origin, hops, write, keys: r.keys()?, values: r.values()? }
        }
        Kind::PushReply => Message::PushReply { req: RequestId(r.u64()?), keys: r.keys()? },
        Kind::Localize => Message::Localize { origin: NodeId(r.u16()?), hops: r.u8()?, keys: r.keys()? },
        Kind::Relocate => Message::Relocate { moved: r.moved()?, values: r.values()? },
        Kind::OwnerUpdate => Message::OwnerUpdate { changes: r.changes()? },
        Kind::PointerRelease => {
            let n = r.count(size::RELEASE)?;
            let mut released = Vec::with_capacity(n);
            for _ in 0..n {
                released.push(Release { key: Key(r.u64()?), epoch: Epoch(r.u32()?) });
            }
            Message::PointerRelease { released }
        }
        Kind::RequestFailed => {
            let req = RequestId(r.u64()?);
            let (code, node) = (r.u8()?, NodeId(r.u16()?));
            let reason = match (code, node.0) {
                (0, 0) => FailReason::RoutingLoop,
                (1, 0) => FailReason::Busy,
                (2, _) => FailReason::Unreachable { node },
                (3, 0) => FailReason::StoreFull,
                (4, 0) => FailReason::Refused,
                _ => return Err(WireError::BadField),
            };
            Message::RequestFailed { req, reason, keys: r.keys()? }
        }
        Kind::BarrierEnter => Message::BarrierEnter { generation: r.u64()? },
        Kind::BarrierRelease => Message::BarrierRelease { generation: r.u64()? },
        Kind::Sync => {
            let (round, origin, hops) = (r.u32()?, NodeId(r.u16()?), r.u8()?);
            let (starts, ends) = (r.keys()?, r.keys()?);
            let n = r.count(size::REPLICA_SYNC)?;
            let mut replicas = Vec::with_capacity(n);
            for _ in 0..n {
                let (key, version, flags) = (Key(r.u64()?), Version(r.u64()?), r.u8()?);
                if flags & !ReplicaSync::ALL != 0 {
                    return Err(WireError::BadField);
                }
                replicas.push(ReplicaSync { key, version, flags });
            }
            Message::Sync {
                round,
                origin,
                hops,
                starts,
                ends,
                replicas,
                deltas: r.values()?,
                owners: r.changes()?,
            }
        }
        Kind::SyncReply => {
            let (round, relocated) = (r.u32()?, r.moved()?);
            let n = r.count(size::REFRESH)?;
            let mut refreshed = Vec::with_capacity(n);
            for _ in 0..n {
                refreshed.push(Refresh { key: Key(r.u64()?), version: Version(r.u64()?) });
            }
            Message::SyncReply {
                round,
                relocated,
                refreshed,
                acks: r.keys()?,
                failed: r.keys()?,
                values: r.values()?,
            }
        }
        Kind::DistCheck => Message::DistCheck { dist: DistId(r.u32()?), fingerprint: r.u64()? },
        Kind::Flushed => Message::Flushed { clock: r.u64()? },
        Kind::Speculate => Message::Speculate { query: r.u64()?, below: r.u64()?, keys: r.keys()? },
        Kind::SpeculateReply => {
            let query = r.u64()?;
            let clear = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(WireError::BadField),
            };
            Message::SpeculateReply { query, clear }
        }
    };
    if !r.buf.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok((header, msg))
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    // The caller sized `buf` with `encoded_len()`, so the slices below are in range; `get_mut`
    // keeps a sizing bug from becoming a panic (it would show as a failed round trip instead).
    fn bytes(&mut self, b: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + b.len()) {
            dst.copy_from_slice(b);
        }
        self.at += b.len();
    }
    fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn count(&mut self, n: usize) {
        // Frames are at most u32::MAX bytes, so any section count fits.
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    /// `items`, `N` bytes each as `le` gives them, with one range check for the whole section.
    fn array<T: Copy, const N: usize>(&mut self, items: &[T], le: impl Fn(T) -> [u8; N]) {
        self.count(items.len());
        let n = N * items.len();
        if let Some(dst) = self.buf.get_mut(self.at..self.at + n) {
            for (d, v) in dst.chunks_exact_mut(N).zip(items) {
                d.copy_from_slice(&le(*v));
            }
        }
        self.at += n;
    }
    fn keys(&mut self, keys: &[Key]) {
        self.array(keys, |k| k.0.to_le_bytes());
    }
    fn values(&mut self, values: &[f32]) {
        self.array(values, f32::to_le_bytes);
    }
    fn moved(&mut self, moved: &[Moved]) {
        self.count(moved.len());
        for m in moved {
            self.u64(m.key.0);
            self.u32(m.epoch.0);
            self.u64(m.version.0);
        }
    }
    fn changes(&mut self, changes: &[OwnerChange]) {
        self.count(changes.len());
        for c in changes {
            self.u64(c.key.0);
            self.u32(c.epoch.0);
            self.u16(c.prev.0);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// A count of elements of `elem` bytes each; refuses counts the remaining bytes can't hold,
    /// so no allocation is ever larger than the frame.
    fn count(&mut self, elem: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n.checked_mul(elem).is_none_or(|b| b > self.buf.len()) {
            return Err(WireError::CountTooLarge);
        }
        Ok(n)
    }
    fn keys(&mut self) -> Result<Vec<Key>, WireError> {
        let n = self.count(size::KEY)?;
        let bytes = self.take(n * size::KEY)?;
        Ok(bytes
            .chunks_exact(size::KEY)
            .map(|c| Key(u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))))
            .collect())
    }
    fn values(&mut self) -> Result<Vec<f32>, WireError> {
        let n = self.count(size::VALUE)?;
        let bytes = self.take(n * size::VALUE)?;
        Ok(bytes
            .chunks_exact(size::VALUE)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect())
    }
    fn moved(&mut self) -> Result<Vec<Moved>, WireError> {
        let n = self.count(size::MOVED)?;
        let mut moved = Vec::with_capacity(n);
        for _ in 0..n {
            moved.push(Moved {
                key: Key(self.u64()?),
                epoch: Epoch(self.u32()?),
                version: Version(self.u64()?),
            });
        }
        Ok(moved)
    }
    fn changes(&mut self) -> Result<Vec<OwnerChange>, WireError> {
        let n = self.count(size::OWNER_CHANGE)?;
        let mut changes = Vec::with_capacity(n);
        for _ in 0..n {
            changes.push(OwnerChange {
                key: Key(self.u64()?),
                epoch: Epoch(self.u32()?),
                prev: NodeId(self.u16()?),
            });
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests;
