//! Entry points of the fuzz targets, shared with ordinary tests.
//!
//! The targets under `fuzz/` are one-line wrappers around the functions here, so that every
//! property a fuzzer checks is also checked by `cargo test` on the committed seed corpus
//! (`fuzz/corpus/<target>/`). Compiled only under `cfg(fuzzing)`, `cfg(test)` or the `testing`
//! feature; nothing here is part of the protocol.
//!
//! An assertion failing in here is a finding: the wire code broke one of its promises (decoding
//! never panics; whatever decodes re-encodes to the same bytes; `encoded_len` is exact).

use alloc::vec::Vec;

use crate::error::WireError;
use crate::ids::{ClusterId, Epoch, Key, NodeId, RequestId, Version};
use crate::wire::{self, FailReason, Header, Message, Moved, OwnerChange, Release, WriteKind, HEADER_LEN};

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
    let again = msg.to_frame(CLUSTER, header.sender);
    assert!(again == data, "re-encoding {msg:?} changed the frame:\n{data:02x?}\n{again:02x?}");
}

/// Builds a message (and sender and cluster) from fuzz bytes and checks encode → decode →
/// encode: `encoded_len` is exact, `encode` writes exactly that many bytes and refuses a smaller
/// buffer, the frame decodes to the same header and re-encodes to the same bytes, and the frame's
/// length limit and last byte matter.
pub fn wire_round_trip(data: &[u8]) {
    let mut b = Bytes { data };
    let selector = b.u8();
    let sender = NodeId(b.u16());
    let cluster = ClusterId(b.u32());
    let msg = message(selector, &mut b);

    let len = msg.encoded_len();
    assert_eq!(len, HEADER_LEN + msg.body_len());
    let mut buf = alloc::vec![0xa5; len + 1];
    assert_eq!(msg.encode(cluster, sender, &mut buf[..len - 1]), Err(WireError::BufferTooSmall));
    assert_eq!(msg.encode(cluster, sender, &mut buf), Ok(len));
    assert_eq!(buf[len], 0xa5, "encode wrote past encoded_len for {msg:?}");
    let frame = &buf[..len];
    assert!(msg.to_frame(cluster, sender) == frame);

    let (header, decoded) = wire::decode(frame, cluster, len).expect("a frame we encoded must decode");
    let body_len = u32::try_from(msg.body_len()).unwrap_or(u32::MAX);
    assert_eq!(header, Header { kind: msg.kind() as u8, cluster, sender, body_len });
    // Compare frames, not messages: NaN != NaN, but its bits must survive.
    assert!(decoded.to_frame(cluster, sender) == frame, "{msg:?} decoded as {decoded:?}");
    assert_eq!(wire::decode(frame, cluster, len - 1), Err(WireError::Oversized { len }));
    assert!(wire::decode(&frame[..len - 1], cluster, len).is_err());
}

/// Reads fuzz bytes as fields, little-endian. Past the end every read gives zeros, so any input
/// builds some message.
struct Bytes<'a> {
    data: &'a [u8],
}

impl Bytes<'_> {
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
    let reason = |x: u8| match x % 3 {
        0 => FailReason::RoutingLoop,
        1 => FailReason::Busy,
        _ => FailReason::Unreachable,
    };
    match selector % 11 {
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
        _ => Message::BarrierRelease { generation: b.u64() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use std::path::PathBuf;

    /// One valid message of every kind, named by kind, as the `wire_decode` seeds hold them
    /// (sent by node 1 of [`CLUSTER`]).
    fn valid_samples() -> Vec<(&'static str, Message)> {
        use alloc::vec;
        let k = |ks: &[u64]| ks.iter().map(|&x| Key(x)).collect::<Vec<Key>>();
        vec![
            ("pull", Message::Pull { req: RequestId(7), origin: NodeId(1), hops: 0, keys: k(&[5, 9]) }),
            ("pull-reply", Message::PullReply { req: RequestId(7), keys: k(&[5]), values: vec![1.0, -0.5] }),
            (
                "push",
                Message::Push {
                    req: RequestId(8),
                    origin: NodeId(2),
                    hops: 1,
                    write: WriteKind::Add,
                    keys: k(&[3, 4]),
                    values: vec![0.25, 0.5, 0.75, 1.0],
                },
            ),
            ("push-reply", Message::PushReply { req: RequestId(8), keys: k(&[3, 4]) }),
            ("localize", Message::Localize { origin: NodeId(2), hops: 0, keys: k(&[11]) }),
            (
                "relocate",
                Message::Relocate {
                    moved: vec![Moved { key: Key(11), epoch: Epoch(2), version: Version(40) }],
                    values: vec![3.0, 4.0],
                },
            ),
            (
                "owner-update",
                Message::OwnerUpdate {
                    changes: vec![OwnerChange { key: Key(11), epoch: Epoch(2), prev: NodeId(1) }],
                },
            ),
            (
                "pointer-release",
                Message::PointerRelease { released: vec![Release { key: Key(11), epoch: Epoch(2) }] },
            ),
            (
                "request-failed",
                Message::RequestFailed { req: RequestId(9), reason: FailReason::Busy, keys: k(&[6]) },
            ),
            ("barrier-enter", Message::BarrierEnter { generation: 3 }),
            ("barrier-release", Message::BarrierRelease { generation: 3 }),
        ]
    }

    /// The committed seeds of the `wire_decode` target: file name, bytes, and what decoding gives.
    fn wire_decode_seeds() -> Vec<(alloc::string::String, Vec<u8>, Result<(), WireError>)> {
        use alloc::format;
        let mut out = Vec::new();
        for (i, (name, msg)) in valid_samples().into_iter().enumerate() {
            out.push((format!("valid-{:02}-{name}.bin", i + 1), msg.to_frame(CLUSTER, NodeId(1)), Ok(())));
        }
        let frame = |i: usize| valid_samples()[i].1.to_frame(CLUSTER, NodeId(1));
        let patch = |i: usize, at: usize, bytes: &[u8]| {
            let mut f = frame(i);
            f[at..at + bytes.len()].copy_from_slice(bytes);
            f
        };
        let with_body_len = |mut f: Vec<u8>, body_len: usize| {
            f[16..20].copy_from_slice(&(body_len as u32).to_le_bytes());
            f
        };
        let pull = frame(0);
        let mut bad: Vec<(&str, Vec<u8>, WireError)> = alloc::vec![
            ("empty", Vec::new(), WireError::Truncated),
            ("short-header", pull[..12].to_vec(), WireError::Truncated),
            ("magic", patch(0, 0, b"PRMB"), WireError::BadMagic),
            ("version", patch(0, 4, &[2]), WireError::UnsupportedVersion { version: 2 }),
            ("reserved-after-kind", patch(0, 6, &[0, 1]), WireError::BadField),
            ("reserved-after-sender", patch(0, 14, &[1, 0]), WireError::BadField),
            ("foreign-cluster", patch(0, 8, &[0, 0, 0, 0]), WireError::ForeignCluster { cluster: 0 }),
            ("kind-zero", patch(0, 5, &[0]), WireError::UnknownKind { kind: 0 }),
            ("kind-unknown", patch(0, 5, &[12]), WireError::UnknownKind { kind: 12 }),
            ("key-count-huge", patch(0, HEADER_LEN + 11, &u32::MAX.to_le_bytes()), WireError::CountTooLarge),
            ("write-kind", patch(2, HEADER_LEN + 11, &[2]), WireError::BadField),
            ("fail-reason", patch(8, HEADER_LEN + 8, &[3]), WireError::BadField),
        ];
        let mut longer = pull.clone();
        longer.push(0);
        bad.push(("length-mismatch", longer.clone(), WireError::LengthMismatch));
        let n = longer.len() - HEADER_LEN;
        bad.push(("trailing-byte", with_body_len(longer, n), WireError::TrailingBytes));
        let barrier = frame(9);
        bad.push((
            "body-truncated",
            with_body_len(barrier[..HEADER_LEN + 4].to_vec(), 4),
            WireError::Truncated,
        ));
        for (name, bytes, err) in bad {
            out.push((format!("bad-{name}.bin"), bytes, Err(err)));
        }
        out
    }

    /// The committed seeds of the `wire_round_trip` target: one per message kind, in the byte
    /// language `wire_round_trip` reads (selector, sender, cluster, then fields).
    fn wire_round_trip_seeds() -> Vec<(alloc::string::String, Vec<u8>)> {
        (0u8..11)
            .map(|kind| {
                let mut seed = alloc::vec![kind, 1, 0];
                seed.extend_from_slice(&CLUSTER.0.to_le_bytes());
                // Fields: small ids and counts first, then enough bytes for a few elements.
                seed.extend((0u8..96).map(|i| if i % 8 == 0 { 3 } else { i }));
                (alloc::format!("{:02}-{}.bin", kind + 1, valid_samples()[usize::from(kind)].0), seed)
            })
            .collect()
    }

    fn corpus_dir(target: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target)
    }

    /// Every file of a target's committed corpus, sorted by name.
    fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = corpus_dir(target);
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .collect();
        files.sort();
        files
    }

    /// With `PARMA_BLESS=1`, writes the generated seeds; otherwise checks that the committed ones
    /// are exactly what this code generates (a changed format must come with new seeds and docs).
    fn check_or_bless(target: &str, seeds: &[(String, Vec<u8>)]) {
        let committed = corpus(target);
        for (name, bytes) in seeds {
            if std::env::var_os("PARMA_BLESS").is_some() {
                std::fs::write(corpus_dir(target).join(name), bytes).unwrap();
                continue;
            }
            let found = committed.iter().find(|(n, _)| n == name);
            assert!(
                found.is_some_and(|(_, b)| b == bytes),
                "seed {target}/{name} is stale; rerun with PARMA_BLESS=1"
            );
        }
    }

    #[test]
    fn wire_decode_seeds_decode_as_intended() {
        for (name, bytes, want) in wire_decode_seeds() {
            let got = wire::decode(&bytes, CLUSTER, FRAME_LEN_MAX).map(|_| ());
            assert_eq!(got, want, "{name}");
        }
        let seeds: Vec<(String, Vec<u8>)> = wire_decode_seeds().into_iter().map(|(n, b, _)| (n, b)).collect();
        check_or_bless("wire_decode", &seeds);
    }

    #[test]
    fn wire_round_trip_seeds_are_committed() {
        check_or_bless("wire_round_trip", &wire_round_trip_seeds());
    }

    #[test]
    fn wire_decode_corpus() {
        let files = corpus("wire_decode");
        assert!(files.len() >= wire_decode_seeds().len(), "the wire_decode corpus is missing seeds");
        let decoded = files.iter().filter(|(_, b)| wire::decode(b, CLUSTER, FRAME_LEN_MAX).is_ok()).count();
        assert!(decoded >= valid_samples().len(), "fewer valid frames than message kinds");
        for (_, bytes) in &files {
            wire_decode(bytes);
        }
    }

    #[test]
    fn wire_round_trip_corpus() {
        let files = corpus("wire_round_trip");
        assert!(files.len() >= 11, "the wire_round_trip corpus is missing seeds");
        let mut kinds = [false; 11];
        for (_, bytes) in &files {
            wire_round_trip(bytes);
            kinds[usize::from(bytes.first().copied().unwrap_or(0) % 11)] = true;
        }
        assert!(kinds.iter().all(|k| *k), "some message kind has no round-trip seed");
    }

    #[test]
    fn round_trip_of_short_and_empty_inputs() {
        for n in 0..64u8 {
            let data: Vec<u8> = (0..n).collect();
            wire_round_trip(&data);
            wire_decode(&data);
        }
    }

    /// The annotated hex examples in `docs/wire.md` are frames this code writes.
    #[test]
    fn docs_examples_match_the_encoder() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/wire.md");
        let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let samples = valid_samples();
        for (name, msg) in samples.iter().filter(|(n, _)| ["pull", "pull-reply"].contains(n)) {
            let bytes =
                doc_example(&doc, name).unwrap_or_else(|| panic!("no example `{name}` in docs/wire.md"));
            assert_eq!(bytes, msg.to_frame(CLUSTER, NodeId(1)), "docs/wire.md example `{name}`");
        }
    }

    /// Bytes of the fenced block after `<!-- example: name -->`: the middle column of lines
    /// `offset | hex bytes | meaning`.
    fn doc_example(doc: &str, name: &str) -> Option<Vec<u8>> {
        let marker = alloc::format!("<!-- example: {name} -->");
        let after = &doc[doc.find(&marker)? + marker.len()..];
        let block = after.split("```").nth(1)?;
        let mut out = Vec::new();
        for line in block.lines().filter(|l| l.contains('|')) {
            for tok in line.split('|').nth(1)?.split_whitespace() {
                out.push(u8::from_str_radix(tok, 16).ok()?);
            }
        }
        Some(out)
    }
}
