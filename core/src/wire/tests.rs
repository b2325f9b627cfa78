use super::*;
use alloc::vec;

const C: ClusterId = ClusterId(7);

fn samples() -> Vec<Message> {
    vec![
        Message::Pull { req: RequestId(1), origin: NodeId(2), hops: 3, keys: vec![Key(1), Key(u64::MAX)] },
        Message::PullReply { req: RequestId(9), keys: vec![Key(4)], values: vec![1.0, -2.5] },
        Message::Push {
            req: RequestId(5),
            origin: NodeId(0),
            hops: 0,
            write: WriteKind::Set,
            keys: vec![Key(3)],
            values: vec![f32::NAN],
        },
        Message::PushReply { req: RequestId(5), keys: vec![] },
        Message::Localize { origin: NodeId(1), hops: 2, keys: vec![Key(8)] },
        Message::Relocate {
            moved: vec![Moved { key: Key(8), epoch: Epoch(3), version: Version(99) }],
            values: vec![0.5; 4],
        },
        Message::OwnerUpdate { changes: vec![OwnerChange { key: Key(8), epoch: Epoch(3), prev: NodeId(4) }] },
        Message::PointerRelease { released: vec![Release { key: Key(8), epoch: Epoch(3) }] },
        Message::RequestFailed { req: RequestId(2), reason: FailReason::Busy, keys: vec![Key(1)] },
        Message::BarrierEnter { generation: 4 },
        Message::BarrierRelease { generation: 4 },
    ]
}

fn same(a: &Message, b: &Message) -> bool {
    // NaN != NaN, so compare frames instead of values.
    a.to_frame(C, NodeId(0), MembershipEpoch::START) == b.to_frame(C, NodeId(0), MembershipEpoch::START)
}

#[test]
fn round_trip_every_kind() {
    for m in samples() {
        let f = m.to_frame(C, NodeId(3), MembershipEpoch(0x0102));
        assert_eq!(f.len(), m.encoded_len());
        assert_eq!(f[14..16], [2, 1], "the epoch is header bytes 14-15, little-endian");
        let (h, d) = decode(&f, C, 1 << 20).unwrap();
        assert_eq!((h.sender, h.epoch), (NodeId(3), MembershipEpoch(0x0102)));
        assert_eq!(h.kind, m.kind() as u8);
        assert!(same(&m, &d), "{m:?} vs {d:?}");
    }
}

#[test]
fn every_truncation_is_an_error() {
    for m in samples() {
        let f = m.to_frame(C, NodeId(0), MembershipEpoch::START);
        for cut in 0..f.len() {
            assert!(decode(&f[..cut], C, 1 << 20).is_err());
        }
    }
}

#[test]
fn header_checks() {
    let m = Message::BarrierEnter { generation: 1 };
    let f = m.to_frame(C, NodeId(0), MembershipEpoch::START);
    assert_eq!(decode(&f, ClusterId(8), 1 << 20), Err(WireError::ForeignCluster { cluster: 7 }));
    assert_eq!(decode(&f, C, 10), Err(WireError::Oversized { len: f.len() }));
    for version in [5, 7] {
        let mut g = f.clone();
        g[4] = version;
        assert_eq!(decode(&g, C, 1 << 20), Err(WireError::UnsupportedVersion { version }));
    }
    let mut g = f.clone();
    g[0] = b'X';
    assert_eq!(decode(&g, C, 1 << 20), Err(WireError::BadMagic));
    let mut g = f.clone();
    g[5] = 200;
    assert_eq!(decode(&g, C, 1 << 20), Err(WireError::UnknownKind { kind: 200 }));
    let mut g = f.clone();
    g.push(0);
    assert_eq!(decode(&g, C, 1 << 20), Err(WireError::LengthMismatch));
}

#[test]
fn huge_counts_do_not_allocate() {
    // A pull claiming 2^32-1 keys in a tiny frame.
    let m = Message::Pull { req: RequestId(1), origin: NodeId(0), hops: 0, keys: vec![] };
    let mut f = m.to_frame(C, NodeId(0), MembershipEpoch::START);
    let at = HEADER_LEN + 11;
    f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(decode(&f, C, 1 << 20), Err(WireError::CountTooLarge));
}

#[test]
fn encode_into_small_buffer_fails_cleanly() {
    let m = Message::BarrierEnter { generation: 1 };
    let mut buf = [0u8; 5];
    assert_eq!(m.encode(C, NodeId(0), MembershipEpoch::START, &mut buf), Err(WireError::BufferTooSmall));
}

/// Every kind, with the sections the samples above leave out (sync, its reply, the
/// distribution check, every failure reason).
fn every_kind() -> Vec<Message> {
    let mut all = samples();
    all.push(Message::Sync {
        round: 7,
        origin: NodeId(2),
        hops: 1,
        starts: vec![Key(1), Key(2)],
        ends: vec![Key(3)],
        replicas: vec![
            ReplicaSync { key: Key(4), version: Version(5), flags: ReplicaSync::DELTA },
            ReplicaSync { key: Key(6), version: Version(0), flags: ReplicaSync::FINAL | ReplicaSync::ROOM },
        ],
        deltas: vec![0.25, -1.0],
        owners: vec![OwnerChange { key: Key(9), epoch: Epoch(2), prev: NodeId(1) }],
    });
    all.push(Message::SyncReply {
        round: 7,
        relocated: vec![Moved { key: Key(1), epoch: Epoch(4), version: Version(8) }],
        refreshed: vec![Refresh { key: Key(4), version: Version(6) }],
        acks: vec![Key(3)],
        failed: vec![Key(11)],
        values: vec![1.0, 2.0, 3.0, 4.0],
    });
    all.push(Message::DistCheck { dist: DistId(3), fingerprint: 0x0123_4567_89ab_cdef });
    all.push(Message::Flushed { clock: 41 });
    all.push(Message::Speculate { query: 9, below: 40, keys: vec![Key(2), Key(8)] });
    all.push(Message::SpeculateReply { query: 9, clear: true });
    all.push(Message::SpeculateReply { query: 10, clear: false });
    for reason in [
        FailReason::RoutingLoop,
        FailReason::Unreachable { node: NodeId(6) },
        FailReason::StoreFull,
        FailReason::Refused,
    ] {
        all.push(Message::RequestFailed { req: RequestId(3), reason, keys: vec![Key(2)] });
    }
    all
}

/// FNV-1a over every frame of [`every_kind`], each preceded by its length: the bytes this
/// format version puts on the wire (version 6, membership epoch 0x0203), pinned so that a
/// change to the code can't change them unnoticed.
#[test]
fn wire_bytes_are_pinned() {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    for m in every_kind() {
        let f = m.to_frame(C, NodeId(3), MembershipEpoch(0x0203));
        assert_eq!(decode(&f, C, 1 << 20).map(|(_, d)| same(&m, &d)), Ok(true), "{m:?}");
        (f.len() as u32).to_le_bytes().into_iter().for_each(&mut eat);
        f.into_iter().for_each(&mut eat);
    }
    assert_eq!(h, PINNED, "the wire bytes changed: {h:#018x}");
}

const PINNED: u64 = 0x2d5f_c47f_c682_76dc;

#[test]
fn kinds_convert_from_their_wire_numbers_only() {
    for m in every_kind() {
        assert_eq!(Kind::try_from(m.kind() as u8), Ok(m.kind()));
    }
    for n in (0..=u8::MAX).filter(|n| !(1..=17).contains(n)) {
        assert_eq!(Kind::try_from(n), Err(WireError::UnknownKind { kind: n }));
    }
}
