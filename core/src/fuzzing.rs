//! Entry points of the fuzz targets, shared with ordinary tests.
//!
//! The targets under `fuzz/` are one-line wrappers around the functions here, so that every
//! property a fuzzer checks is also checked by `cargo test` on the committed seed corpus
//! (`fuzz/corpus/<target>/`). Compiled only under `cfg(fuzzing)`, `cfg(test)` or the `testing`
//! feature; nothing here is part of the protocol.
//!
//! An assertion failing in here is a finding: the wire code broke one of its promises (decoding
//! never panics; whatever decodes re-encodes to the same bytes; `encoded_len` is exact), or the
//! protocol did, as one node ([`mod@node_ops`]) or as a small cluster ([`mod@cluster`]): those
//! modules describe the byte language of their target and what it checks.

pub mod cluster;
pub mod node_ops;
pub mod session_ops;

pub use cluster::cluster_schedule;
pub use node_ops::node_ops;
pub use session_ops::session_ops;

use alloc::vec::Vec;

use crate::config::Technique;
use crate::error::WireError;
use crate::ids::{ClusterId, DistId, Epoch, Key, MembershipEpoch, NodeId, RequestId, Version};
use crate::wire::{
    self, FailReason, Header, Message, Moved, OwnerChange, Refresh, Release, ReplicaSync, WriteKind,
    HEADER_LEN,
};

/// The cluster the `wire_decode` target decodes for: [`crate::Config::new`]'s default, so that
/// frames from a default cluster are valid seeds.
pub const CLUSTER: ClusterId = ClusterId(0x7061_726d);
/// The largest frame the `wire_decode` target accepts.
pub const FRAME_LEN_MAX: usize = 1 << 20;

/// Decodes untrusted bytes as a frame of [`CLUSTER`]. Must not panic on any input; when the
/// bytes decode, the header must agree with the message and re-encoding must reproduce them
/// exactly (the format has one encoding per message).
pub fn wire_decode(data: &[u8]) {
    let Ok((header, msg)) = wire::decode(data, CLUSTER, FRAME_LEN_MAX) else { return };
    assert_eq!(header.cluster, CLUSTER);
    assert_eq!(header.kind, msg.kind() as u8);
    assert_eq!(header.body_len as usize, data.len() - HEADER_LEN);
    assert_eq!(msg.encoded_len(), data.len(), "encoded_len of {msg:?}");
    assert_eq!(wire::decode_header(data, CLUSTER, FRAME_LEN_MAX), Ok(header));
    let again = msg.to_frame(CLUSTER, header.sender, header.epoch);
    assert!(again == data, "re-encoding {msg:?} changed the frame:\n{data:02x?}\n{again:02x?}");
}

/// Builds a message (and sender, cluster and membership epoch) from fuzz bytes and checks
/// encode → decode →
/// encode: `encoded_len` is exact, `encode` writes exactly that many bytes and refuses a smaller
/// buffer, the frame decodes to the same header and re-encodes to the same bytes, and the frame's
/// length limit and last byte matter.
pub fn wire_round_trip(data: &[u8]) {
    let mut b = Bytes { data };
    let selector = b.u8();
    let sender = NodeId(b.u16());
    let cluster = ClusterId(b.u32());
    let epoch = MembershipEpoch(b.u16());
    let msg = message(selector, &mut b);

    let len = msg.encoded_len();
    assert_eq!(len, HEADER_LEN + msg.body_len());
    let mut buf = alloc::vec![0xa5; len + 1];
    assert_eq!(msg.encode(cluster, sender, epoch, &mut buf[..len - 1]), Err(WireError::BufferTooSmall));
    assert_eq!(msg.encode(cluster, sender, epoch, &mut buf), Ok(len));
    assert_eq!(buf[len], 0xa5, "encode wrote past encoded_len for {msg:?}");
    let frame = &buf[..len];
    assert!(msg.to_frame(cluster, sender, epoch) == frame);

    let (header, decoded) = wire::decode(frame, cluster, len).expect("a frame we encoded must decode");
    let body_len = u32::try_from(msg.body_len()).unwrap_or(u32::MAX);
    assert_eq!(header, Header { kind: msg.kind() as u8, cluster, sender, epoch, body_len });
    // Compare frames, not messages: NaN != NaN, but its bits must survive.
    assert!(decoded.to_frame(cluster, sender, epoch) == frame, "{msg:?} decoded as {decoded:?}");
    assert_eq!(wire::decode(frame, cluster, len - 1), Err(WireError::Oversized { len }));
    assert!(wire::decode(&frame[..len - 1], cluster, len).is_err());
}

/// Reads fuzz bytes as fields, little-endian. Past the end every read gives zeros, so any input
/// builds some message.
/// The technique a 3-bit field of a fuzz target's header selects: 0 is relocation and 7 static
/// partitioning (what the targets ran before they knew the others, so older inputs keep their
/// meaning), the adaptive default twice.
fn technique_of(x: u8) -> Technique {
    const TABLE: [Technique; 8] = [
        Technique::Relocation,
        Technique::Adaptive,
        Technique::AdaptiveNoReplication,
        Technique::AdaptiveNoRelocation,
        Technique::FullReplication,
        Technique::MultiTechnique,
        Technique::Adaptive,
        Technique::StaticPartitioning,
    ];
    TABLE[usize::from(x & 7)]
}

struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// The next `n` bytes, or as many as are left.
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let n = N.min(self.data.len());
        a[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        a
    }
    fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    /// A count of at most 255 elements, and no more than the bytes left can fill.
    fn count(&mut self, elem_bytes: usize) -> usize {
        usize::from(self.u8()).min(self.data.len() / elem_bytes)
    }
    fn keys(&mut self) -> Vec<Key> {
        (0..self.count(8)).map(|_| Key(self.u64())).collect()
    }
    fn values(&mut self) -> Vec<f32> {
        // Any bit pattern, NaNs with payloads included.
        (0..self.count(4)).map(|_| f32::from_bits(self.u32())).collect()
    }
}

/// One message of the kind `selector` picks, its fields read from `b`.
fn message(selector: u8, b: &mut Bytes<'_>) -> Message {
    let write = |x: u8| if x & 1 == 0 { WriteKind::Add } else { WriteKind::Set };
    let reason = |x: u8| match x % 5 {
        0 => FailReason::RoutingLoop,
        1 => FailReason::Busy,
        2 => FailReason::Unreachable { node: NodeId(u16::from(x) % 3) },
        3 => FailReason::StoreFull,
        _ => FailReason::Refused,
    };
    match selector % 17 {
        0 => Message::Pull { req: RequestId(b.u64()), origin: NodeId(b.u16()), hops: b.u8(), keys: b.keys() },
        1 => Message::PullReply { req: RequestId(b.u64()), keys: b.keys(), values: b.values() },
        2 => Message::Push {
            req: RequestId(b.u64()),
            origin: NodeId(b.u16()),
            hops: b.u8(),
            write: write(b.u8()),
            keys: b.keys(),
            values: b.values(),
        },
        3 => Message::PushReply { req: RequestId(b.u64()), keys: b.keys() },
        4 => Message::Localize { origin: NodeId(b.u16()), hops: b.u8(), keys: b.keys() },
        5 => {
            let n = b.count(20);
            let moved =
                (0..n).map(|_| Moved { key: Key(b.u64()), epoch: Epoch(b.u32()), version: Version(b.u64()) });
            Message::Relocate { moved: moved.collect(), values: b.values() }
        }
        6 => {
            let n = b.count(14);
            let changes = (0..n).map(|_| OwnerChange {
                key: Key(b.u64()),
                epoch: Epoch(b.u32()),
                prev: NodeId(b.u16()),
            });
            Message::OwnerUpdate { changes: changes.collect() }
        }
        7 => {
            let n = b.count(12);
            let released = (0..n).map(|_| Release { key: Key(b.u64()), epoch: Epoch(b.u32()) });
            Message::PointerRelease { released: released.collect() }
        }
        8 => Message::RequestFailed { req: RequestId(b.u64()), reason: reason(b.u8()), keys: b.keys() },
        9 => Message::BarrierEnter { generation: b.u64() },
        10 => Message::BarrierRelease { generation: b.u64() },
        11 => {
            let (round, origin, hops) = (b.u32(), NodeId(b.u16()), b.u8());
            let (starts, ends) = (b.keys(), b.keys());
            let n = b.count(17);
            let replicas = (0..n)
                .map(|_| ReplicaSync {
                    key: Key(b.u64()),
                    version: Version(b.u64()),
                    flags: b.u8() & ReplicaSync::ALL,
                })
                .collect();
            let deltas = b.values();
            let n = b.count(14);
            let owners = (0..n).map(|_| OwnerChange {
                key: Key(b.u64()),
                epoch: Epoch(b.u32()),
                prev: NodeId(b.u16()),
            });
            Message::Sync { round, origin, hops, starts, ends, replicas, deltas, owners: owners.collect() }
        }
        12 => {
            let round = b.u32();
            let n = b.count(20);
            let relocated =
                (0..n).map(|_| Moved { key: Key(b.u64()), epoch: Epoch(b.u32()), version: Version(b.u64()) });
            let relocated = relocated.collect();
            let n = b.count(16);
            let refreshed =
                (0..n).map(|_| Refresh { key: Key(b.u64()), version: Version(b.u64()) }).collect();
            Message::SyncReply {
                round,
                relocated,
                refreshed,
                acks: b.keys(),
                failed: b.keys(),
                values: b.values(),
            }
        }
        13 => Message::DistCheck { dist: DistId(b.u32()), fingerprint: b.u64() },
        14 => Message::Flushed { clock: b.u64() },
        15 => Message::Speculate { query: b.u64(), below: b.u64(), keys: b.keys() },
        _ => Message::SpeculateReply { query: b.u64(), clear: b.u8() & 1 == 1 },
    }
}

#[cfg(test)]
mod tests;
