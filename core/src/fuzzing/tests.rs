//! The fuzz targets' seeds and committed corpora, run as ordinary tests.

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
        (
            "sync",
            Message::Sync {
                round: 4,
                origin: NodeId(1),
                hops: 0,
                starts: k(&[12]),
                ends: k(&[13]),
                replicas: vec![ReplicaSync { key: Key(14), version: Version(6), flags: ReplicaSync::DELTA }],
                deltas: vec![0.5, -0.5],
                owners: vec![OwnerChange { key: Key(11), epoch: Epoch(2), prev: NodeId(2) }],
            },
        ),
        (
            "sync-reply",
            Message::SyncReply {
                round: 4,
                relocated: vec![Moved { key: Key(12), epoch: Epoch(1), version: Version(3) }],
                refreshed: vec![Refresh { key: Key(14), version: Version(7) }],
                acks: k(&[13]),
                failed: Vec::new(),
                values: vec![1.0, 2.0, 3.0, 4.0],
            },
        ),
        ("dist-check", Message::DistCheck { dist: DistId(2), fingerprint: 0x0123_4567_89ab_cdef }),
        ("flushed", Message::Flushed { clock: 0x0000_0001_0000_0002 }),
        ("speculate", Message::Speculate { query: 3, below: 9, keys: k(&[4, 21]) }),
        ("speculate-reply", Message::SpeculateReply { query: 3, clear: true }),
    ]
}

/// The committed seeds of the `wire_decode` target: file name, bytes, and what decoding gives.
fn wire_decode_seeds() -> Vec<(alloc::string::String, Vec<u8>, Result<(), WireError>)> {
    use alloc::format;
    let mut out = Vec::new();
    for (i, (name, msg)) in valid_samples().into_iter().enumerate() {
        out.push((
            format!("valid-{:02}-{name}.bin", i + 1),
            msg.to_frame(CLUSTER, NodeId(1), crate::ids::MembershipEpoch::START),
            Ok(()),
        ));
    }
    let frame =
        |i: usize| valid_samples()[i].1.to_frame(CLUSTER, NodeId(1), crate::ids::MembershipEpoch::START);
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
        ("version", patch(0, 4, &[9]), WireError::UnsupportedVersion { version: 9 }),
        ("reserved-after-kind", patch(0, 6, &[0, 1]), WireError::BadField),
        ("foreign-cluster", patch(0, 8, &[0, 0, 0, 0]), WireError::ForeignCluster { cluster: 0 }),
        ("kind-zero", patch(0, 5, &[0]), WireError::UnknownKind { kind: 0 }),
        ("kind-unknown", patch(0, 5, &[18]), WireError::UnknownKind { kind: 18 }),
        ("key-count-huge", patch(0, HEADER_LEN + 11, &u32::MAX.to_le_bytes()), WireError::CountTooLarge),
        ("write-kind", patch(2, HEADER_LEN + 11, &[2]), WireError::BadField),
        ("fail-reason", patch(8, HEADER_LEN + 8, &[5]), WireError::BadField),
    ];
    let mut longer = pull.clone();
    longer.push(0);
    bad.push(("length-mismatch", longer.clone(), WireError::LengthMismatch));
    let n = longer.len() - HEADER_LEN;
    bad.push(("trailing-byte", with_body_len(longer, n), WireError::TrailingBytes));
    let barrier = frame(9);
    bad.push(("body-truncated", with_body_len(barrier[..HEADER_LEN + 4].to_vec(), 4), WireError::Truncated));
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
            seed.extend_from_slice(&[0, 0]); // membership epoch 0
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
        let bytes = doc_example(&doc, name).unwrap_or_else(|| panic!("no example `{name}` in docs/wire.md"));
        assert_eq!(
            bytes,
            msg.to_frame(CLUSTER, NodeId(1), crate::ids::MembershipEpoch::START),
            "docs/wire.md example `{name}`"
        );
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

// ----- node_ops and cluster_schedule -----

/// A tiny fixed-seed generator (splitmix64) for pseudo-random inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, len_max: u64) -> Vec<u8> {
        let n = self.next() % (len_max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Runs `target` on `data`, naming the input if it panics.
fn run_named(target: fn(&[u8]), name: &str, data: &[u8]) {
    if std::panic::catch_unwind(|| target(data)).is_err() {
        let hex: String = data.iter().map(|b| alloc::format!("{b:02x}")).collect();
        panic!("{name} failed; input (hex): {hex}");
    }
}

/// Ops of the `node_ops` byte language (see `fuzzing/node_ops.rs`).
mod nops {
    pub const DELIVER_PLAUSIBLE: u8 = 2;
    pub const ANSWER: u8 = 4;
    pub const PULL: u8 = 6;
    pub const PUSH: u8 = 7;
    pub const SET: u8 = 8;
    pub const LOCALIZE: u8 = 9;
    pub const BARRIER: u8 = 10;
    pub const TIME: u8 = 11;
    pub const PEER_FAILED: u8 = 12;
    pub const DRAIN_TRANSMITS: u8 = 13;
    pub const DRAIN_ALL: u8 = 15;
    /// Header: Relocation, draining after every input.
    pub const CONTRACT: u8 = 0x10;
    /// Header: Relocation, draining only when an op says so.
    pub const MANUAL: u8 = 0x00;
    /// Header: static partitioning, draining after every input.
    pub const STATIC: u8 = 0x1f;
    /// Header: adaptive, draining after every input.
    pub const ADAPTIVE: u8 = 0x30;
    /// Header: full replication, draining after every input.
    pub const FULL: u8 = 0x90;
    /// Clock commands (op 10 with the command in bits 5 and 6; bit 4 picks worker 1).
    pub const INTENT: u8 = 0x2a;
    pub const ADVANCE: u8 = 0x4a;
    pub const WAIT_SYNC: u8 = 0x6a;
    pub const END_INTENTS: u8 = 0x8a;
}

/// A seed from its ops, one slice each.
fn ops(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The committed seeds of the `node_ops` target. Node 1 of 3 is the home of keys 2, 3 and
/// 6 (among 0..8); keys 0 and 1 live on node 0, key 5 on node 2.
fn node_ops_seeds() -> Vec<(String, Vec<u8>)> {
    use nops::*;
    // Ops, with their field bytes.
    const P: u8 = DELIVER_PLAUSIBLE;
    let mut outbox_full = alloc::vec![MANUAL];
    for i in 0..10u8 {
        outbox_full.extend_from_slice(&[PULL, 4, 0, 1, 5, 4 + i]);
    }
    outbox_full.extend_from_slice(&[DRAIN_TRANSMITS, 20, PULL, 2, 0, 5, DRAIN_ALL]);
    let mut seeds: Vec<(&str, Vec<u8>)> = alloc::vec![
        // A pull of a remote and a local key; the peer answers.
        ("pull-answered", ops(&[&[CONTRACT], &[PULL, 2, 0, 2], &[ANSWER, 0, 0, 0, 0]])),
        // A push and a set of remote keys, answered; then a pull forwarded back (hops + 1).
        (
            "push-set-answered",
            ops(&[
                &[CONTRACT],
                &[PUSH, 2, 0, 5, 0, 1, 2, 3, 4],
                &[SET, 1, 1, 0, 7, 7],
                &[ANSWER, 0, 0, 0],
                &[ANSWER, 1, 0, 0],
                &[PULL, 1, 5],
                &[ANSWER, 2, 0x40, 0],
                &[ANSWER, 2, 0, 0, 0],
            ]),
        ),
        // Localize a remote key; a pull and a push of it wait here; the key arrives, the
        // node tells its home; the home asks for it for another node; the key leaves
        // (forwarding pointer); the home releases the pointer; a pull follows the pointer.
        (
            "localize-wait-arrive-leave",
            ops(&[
                &[CONTRACT],
                &[LOCALIZE, 1, 0],
                &[PULL, 1, 0],
                &[PUSH | 0x10, 1, 0, 0, 3, 3],
                &[ANSWER, 0, 0, 1, 5],
                &[ANSWER, 1, 0, 0],
                &[ANSWER, 2, 0, 0],
                &[ANSWER, 3, 0, 0],
                &[P, 0, 0, 0, 0, 0, 1, 0, 0],
            ]),
        ),
        // Without draining, commands fill the outbox until they are refused as Busy; then a
        // partial drain, and more.
        ("outbox-full", outbox_full),
        // Requests time out; late answers are counted and ignored.
        (
            "timeout-then-late-answer",
            ops(&[
                &[CONTRACT],
                &[PULL, 1, 0],
                &[LOCALIZE, 1, 5],
                &[TIME, 0x10],
                &[TIME, 0xf2],
                &[ANSWER, 0, 0, 0],
                &[ANSWER, 1, 0, 0, 0],
            ]),
        ),
        // A peer fails while a localize, a waiting pull and a barrier are under way.
        (
            "peer-failed",
            ops(&[
                &[CONTRACT],
                &[LOCALIZE, 1, 5],
                &[PULL, 1, 5],
                &[BARRIER],
                &[PEER_FAILED, 2],
                &[PULL, 1, 5],
                &[BARRIER | 0x10],
            ]),
        ),
        // Both workers enter the barrier; the coordinator releases it.
        ("barrier", ops(&[&[CONTRACT], &[BARRIER], &[BARRIER | 0x10], &[ANSWER, 0, 0, 0]])),
        // Adaptive: intents for a key homed elsewhere and one homed here, a round starts
        // (time passes), the owner answers the round; the worker advances past the window,
        // waits for two rounds, and ends what is left.
        (
            "adaptive-intents-and-rounds",
            ops(&[
                &[ADAPTIVE],
                &[INTENT, 2, 0, 2, 0x08],
                &[INTENT | 0x10, 1, 5, 0x00],
                &[TIME, 0x02],
                &[ANSWER, 0, 0, 0],
                &[ANSWER, 1, 0x20, 0],
                &[PULL, 2, 0, 2],
                &[ADVANCE, ADVANCE, ADVANCE],
                &[WAIT_SYNC | 0x10],
                &[TIME, 0x02, TIME, 0x02],
                &[END_INTENTS],
                &[TIME, 0xf1],
            ]),
        ),
        // Full replication: every key is replicated; rounds carry deltas of local pushes.
        (
            "full-replication-rounds",
            ops(&[
                &[FULL],
                &[TIME, 0x02],
                &[PUSH, 2, 0, 5, 0, 1, 2, 3, 4],
                &[TIME, 0x02],
                &[ANSWER, 0, 0, 0],
                &[PULL, 1, 0],
                &[WAIT_SYNC, TIME, 0x02, TIME, 0x02],
            ]),
        ),
        // Static partitioning: localize completes at once; a relocation is refused.
        (
            "static",
            ops(&[
                &[STATIC],
                &[LOCALIZE, 1, 0],
                &[PULL, 2, 0, 2],
                &[PUSH, 1, 3, 0, 1, 1],
                &[P, 0, 5, 1, 2, 0, 1, 0, 2],
                &[3, 0],
            ]),
        ),
        // Invalid commands: worker out of range, key outside the layout, a key twice, short
        // values.
        (
            "bad-commands",
            ops(&[
                &[CONTRACT],
                &[PULL | 0xe0, 1, 0],
                &[PULL, 2, 0, 0xfc],
                &[PULL, 2, 3, 3],
                &[PUSH, 1, 3, 0xf9, 1],
            ]),
        ),
    ];
    // One plausible message of every kind (op, sender, kind, fields, delivery), after a
    // prefix that leaves a pull (request 1) and a push (request 2) of key 0 under way.
    // Senders: 0 is node 0, 1 is node 2; delivery 3 encodes a frame.
    let m = |parts: &[&[u8]]| ops(&[&[CONTRACT, PULL, 2, 0, 3, PUSH, 1, 0, 0, 1, 1], &parts.concat()]);
    // Node 2 localizes key 2 (homed here): it moves, leaving a pointer.
    const LOCALIZE_2: &[u8] = &[P, 1, 4, 2, 0, 1, 2, 3];
    seeds.extend([
        // Served here, and forwarded toward key 0's home.
        ("msg-pull", m(&[&[P, 0, 0, 0, 0, 0, 2, 2, 3, 3], &[P, 1, 0, 0, 2, 1, 1, 0, 3]])),
        ("msg-pull-reply", m(&[&[P, 0, 1, 1, 1, 0, 0, 3]])),
        ("msg-push", m(&[&[P, 1, 2, 0, 2, 0, 0, 2, 2, 6, 0, 3]])),
        ("msg-push-reply", m(&[&[P, 0, 3, 0, 1, 0, 3]])),
        // Keys leave; a pull for one of them follows the home's record.
        ("msg-localize", m(&[&[P, 1, 4, 2, 0, 2, 2, 3, 3], &[P, 0, 0, 0, 0, 0, 1, 2, 3]])),
        // Keys 0 and 1 arrive while a localize of key 1 and a pull of it wait here.
        (
            "msg-relocate",
            m(&[
                &[LOCALIZE, 1, 1],
                &[PULL, 1, 1],
                &[P, 0, 5, 2, 0, 1, 5, 1, 1, 0, 0, 3],
                &[P, 1, 0, 0, 2, 0, 1, 1, 3],
            ]),
        ),
        // Key 2 moved to node 2, then on to node 0, which tells the home (here).
        ("msg-owner-update", m(&[LOCALIZE_2, &[P, 0, 6, 1, 0, 2, 2, 3], &[P, 1, 0, 0, 2, 0, 1, 2, 3]])),
        ("msg-pointer-release", m(&[LOCALIZE_2, &[P, 1, 7, 1, 2, 1, 3]])),
        ("msg-request-failed", m(&[&[P, 0, 8, 2, 1, 1, 0, 3]])),
        ("msg-barrier-enter", m(&[&[P, 0, 9, 0, 3]])),
        ("msg-barrier-release", m(&[&[BARRIER], &[BARRIER | 0x10], &[P, 0, 10, 0, 3]])),
    ]);
    // Messages of every kind with arbitrary fields.
    let mut v = alloc::vec![CONTRACT];
    for kind in 0..11u8 {
        v.extend_from_slice(&[1, 0, kind, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        v.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
    }
    seeds.push(("msg-arbitrary", v));
    seeds.into_iter().map(|(n, v)| (alloc::format!("{n}.bin"), v)).collect()
}

/// Ops of the `cluster_schedule` byte language (see `fuzzing/cluster.rs`).
mod cops {
    pub const DELIVER: u8 = 0;
    pub const PULL: u8 = 6;
    pub const PUSH: u8 = 8;
    pub const SET: u8 = 10;
    pub const LOCALIZE: u8 = 11;
    pub const TIME: u8 = 13;
    pub const BURST: u8 = 14;
    /// Header: three nodes, relocation.
    pub const THREE: u8 = 1;
    /// Header: two nodes, static partitioning.
    pub const TWO_STATIC: u8 = 0x1c;
    /// Header: four nodes, relocation.
    pub const FOUR: u8 = 2;
    /// Header: one worker, 3 keys a message, 3 requests, room for every key.
    pub const ROOMY: u8 = 0x0a;
    /// Header: two workers, 1 key a message, 2 requests, a tight store.
    pub const TIGHT: u8 = 0xe1;
    /// Header: three nodes, adaptive.
    pub const ADAPTIVE: u8 = 0x04;
    /// Header: three nodes, full replication.
    pub const FULL: u8 = 0x10;
    /// Header: four nodes, multi-technique with key 0 hot.
    pub const MULTI: u8 = 0x14;
    /// A worker signals intent (parameter byte, keys, window byte).
    pub const INTENT: u8 = 12;
    /// A worker's clock step (parameter byte: node, worker, what).
    pub const CLOCK: u8 = 15;
    /// A clock step's parameter byte: node `n`, worker 0; advance, wait for rounds, end.
    pub fn advance(n: u8) -> u8 {
        n | 0x10
    }
    pub fn wait_sync(n: u8) -> u8 {
        n | 0x20
    }
    pub fn end(n: u8) -> u8 {
        n | 0x30
    }
    /// A worker parameter byte: node `n`, `k` keys, the local path first.
    pub fn at(n: u8, k: u8, local_first: bool) -> u8 {
        n | ((k - 1) << 4) | if local_first { 0x80 } else { 0 }
    }
}

/// The committed seeds of the `cluster_schedule` target. With three nodes, keys 0, 1, 4 are
/// homed on node 0, keys 2, 3, 6 on node 1 and keys 5, 7 on node 2.
fn cluster_schedule_seeds() -> Vec<(String, Vec<u8>)> {
    use cops::*;
    let mut ping_pong = alloc::vec![THREE, ROOMY];
    for round in 0..4u8 {
        let n = 1 + round % 2;
        ping_pong.extend(ops(&[
            &[LOCALIZE, at(n, 2, false), 0, 5],
            &[PUSH, at(0, 2, true), 0, 5, 0x09, 0x12],
            &[PUSH, at(3 - n, 1, round % 2 == 0), 5, 0x3f],
            &[DELIVER, round, DELIVER, round + 1, BURST, round, 3],
            &[PULL, at(0, 2, false), 5, 0],
        ]));
    }
    let mut four_nodes = alloc::vec![FOUR, ROOMY];
    for k in 0..8u8 {
        four_nodes.extend(ops(&[
            &[LOCALIZE, at(k % 4, 1, false), k],
            &[PUSH, at((k + 1) % 4, 2, k % 2 == 0), k, (k + 3) % 8, k, 1],
            &[DELIVER, k],
            &[PULL, at((k + 2) % 4, 3, true), k, 7 - k, 3],
        ]));
    }
    four_nodes.extend_from_slice(&[BURST, 0, 15, BURST, 1, 15]);
    let mut busy = alloc::vec![THREE, ROOMY];
    for k in 0..6u8 {
        busy.extend_from_slice(&[PULL, at(2, 1, false), k]);
    }
    let seeds: Vec<(&str, Vec<u8>)> = alloc::vec![
        // Node 1 localizes key 0 while node 2 pulls and pushes it: the requests chase the
        // key through the home and the forwarding pointer.
        (
            "localize-raced-by-pull-and-push",
            ops(&[
                &[THREE, ROOMY],
                &[LOCALIZE, at(1, 1, false), 0],
                &[PULL, at(2, 1, false), 0],
                &[PUSH, at(2, 1, false), 0, 0x09],
                &[DELIVER, 0, DELIVER, 0, DELIVER, 1, DELIVER, 0, DELIVER, 2, DELIVER, 1],
            ]),
        ),
        // Two nodes localize the same keys in turn and push to them from everywhere.
        ("ping-pong", ping_pong),
        // Four nodes, every key localized somewhere, pulls and pushes in between, a burst.
        ("four-nodes", four_nodes),
        // Requests time out while their frames wait; the heal delivers the late answers.
        (
            "timeouts",
            ops(&[
                &[THREE, ROOMY],
                &[PUSH, at(1, 1, false), 0, 0x01],
                &[PULL, at(1, 2, false), 0, 5],
                &[LOCALIZE, at(1, 1, false), 7],
                &[TIME, 1, 0xf0],
                &[TIME, 1, 0x80],
                &[DELIVER, 0],
            ]),
        ),
        // The request bound: a node issues more than it may have pending.
        ("busy", busy),
        // A tight store: localizes are refused when the keys would not fit.
        (
            "tight-store",
            ops(&[
                &[THREE, TIGHT],
                &[LOCALIZE, at(1, 3, false), 0, 1, 4],
                &[DELIVER, 0, DELIVER, 0],
                &[LOCALIZE, at(1, 3, false), 5, 7, 0],
                &[DELIVER, 0],
            ]),
        ),
        // Adaptive: nodes 1 and 2 both intend keys 0 and 5, so each key gets a replica on the
        // node that does not own it; both push through the store; the clocks pass the
        // windows and the replicas go with their final deltas.
        (
            "adaptive-shared-intent",
            ops(&[
                &[ADAPTIVE, ROOMY],
                &[INTENT, at(1, 2, false), 0, 5, 0x10],
                &[INTENT, at(2, 2, false), 0, 5, 0x10],
                &[TIME, 1, 0x08, TIME, 2, 0x08],
                &[BURST, 0, 15, BURST, 1, 15, BURST, 2, 15],
                &[TIME, 0, 0x08, TIME, 1, 0x08, TIME, 2, 0x08],
                &[BURST, 0, 15, BURST, 1, 15, BURST, 2, 15],
                &[PUSH, at(1, 2, true), 0, 5, 0x09, 0x12],
                &[PUSH, at(2, 2, true), 0, 5, 0x01, 0x01],
                &[PULL, at(1, 2, true), 0, 5],
                &[CLOCK, advance(1), CLOCK, advance(1), CLOCK, advance(1)],
                &[CLOCK, wait_sync(2), CLOCK, end(2)],
                &[TIME, 1, 0x08, TIME, 2, 0x08],
            ]),
        ),
        // Adaptive: only node 2 intends key 0 (homed on node 0): the key moves there.
        (
            "adaptive-relocation",
            ops(&[
                &[ADAPTIVE, ROOMY],
                &[INTENT, at(2, 1, false), 0, 0x08],
                &[TIME, 2, 0x08, BURST, 0, 15, BURST, 1, 15],
                &[TIME, 0, 0x08, BURST, 0, 15, BURST, 1, 15],
                &[PUSH, at(2, 1, true), 0, 0x3f],
                &[PULL, at(0, 1, false), 0],
            ]),
        ),
        // Full replication: pushes on every node, rounds in between, then pulls.
        (
            "full-replication",
            ops(&[
                &[FULL, ROOMY],
                &[TIME, 0, 0x04, TIME, 1, 0x04, TIME, 2, 0x04],
                &[BURST, 0, 15, BURST, 1, 15, BURST, 2, 15],
                &[PUSH, at(0, 2, true), 2, 5, 0x09, 0x09],
                &[PUSH, at(1, 2, true), 0, 5, 0x01, 0x02],
                &[TIME, 1, 0x04, BURST, 0, 15, BURST, 1, 15],
                &[PULL, at(2, 3, true), 0, 2, 5],
            ]),
        ),
        // Multi-technique on four nodes: key 0 is hot (replicated), key 3 moves by intent.
        (
            "multi-technique",
            ops(&[
                &[MULTI, ROOMY],
                &[INTENT, at(1, 2, false), 0, 3, 0x08],
                &[INTENT, at(2, 1, false), 0, 0x08],
                &[TIME, 1, 0x04, TIME, 2, 0x04, TIME, 0, 0x04],
                &[BURST, 0, 15, BURST, 1, 15, BURST, 2, 15, BURST, 3, 15],
                &[PUSH, at(1, 2, true), 0, 3, 0x09, 0x09],
                &[PUSH, at(3, 1, false), 0, 0x01],
            ]),
        ),
        // Clock gates, each worker waiting at its gate every other clock (see `lockstep`).
        ("gates-bsp-adaptive", lockstep(gated_header(1, false, crate::Gate::Bsp))),
        ("gates-ssp1-full-replication", lockstep(gated_header(4, false, crate::Gate::Ssp { staleness: 1 }))),
        ("gates-ssp2-relocation", lockstep(gated_header(0, false, crate::Gate::Ssp { staleness: 2 }))),
        (
            "gates-bounded-delay-static",
            lockstep(gated_header(7, false, crate::Gate::BoundedDelay { delay: 1 }))
        ),
        // Static partitioning: sets, adds and pulls at the home; localize does nothing.
        (
            "static",
            ops(&[
                &[TWO_STATIC, ROOMY],
                &[SET, at(0, 2, false), 2, 4, 0x11, 0x22],
                &[PUSH, at(1, 2, true), 0, 1, 0x09, 0x09],
                &[LOCALIZE, at(1, 1, false), 0],
                &[PULL, at(1, 3, false), 0, 1, 2],
                &[DELIVER, 0, DELIVER, 1],
            ]),
        ),
    ];
    seeds.into_iter().map(|(n, v)| (alloc::format!("{n}.bin"), v)).collect()
}

#[test]
fn node_ops_seeds_are_committed() {
    check_or_bless("node_ops", &node_ops_seeds());
}

#[test]
fn cluster_schedule_seeds_are_committed() {
    check_or_bless("cluster_schedule", &cluster_schedule_seeds());
}

#[test]
fn node_ops_corpus() {
    let files = corpus("node_ops");
    assert!(files.len() >= node_ops_seeds().len(), "the node_ops corpus is missing seeds");
    for (name, bytes) in &files {
        run_named(node_ops, name, bytes);
    }
}

#[test]
fn cluster_schedule_corpus() {
    let files = corpus("cluster_schedule");
    assert!(files.len() >= cluster_schedule_seeds().len(), "the cluster_schedule corpus is missing seeds");
    for (name, bytes) in &files {
        run_named(cluster_schedule, name, bytes);
    }
}

#[test]
fn node_ops_pseudo_random() {
    let mut rng = Rng(0x6e6f_6465);
    for i in 0..3000 {
        let data = rng.bytes(if i % 10 == 0 { 2000 } else { 300 });
        run_named(node_ops, &alloc::format!("pseudo-random input {i}"), &data);
    }
}

#[test]
fn cluster_schedule_pseudo_random() {
    let mut rng = Rng(0x636c_7573);
    for i in 0..3000 {
        let data = rng.bytes(if i % 10 == 0 { 1500 } else { 200 });
        run_named(cluster_schedule, &alloc::format!("pseudo-random input {i}"), &data);
    }
}

mod gates;
use gates::{gated_header, lockstep};
