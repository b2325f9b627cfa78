//! `docs/session.md` as a client in another language would read it: a session handshake, a
//! rendezvous registration and a configuration digest assembled from the byte layouts and the
//! worked examples written there (the hex blocks are parsed from the doc), not by parma's
//! encoders, and a real parma node and a real rendezvous that accept them. Then the doc's
//! examples against the encoders, so that the doc cannot drift from the code.
//!
//! The ZeroMQ side is hand-written too: the ZMTP 3.0 greeting, READY and message frames, over
//! a plain `TcpStream` on 127.0.0.1. Every loop is bounded by a count and a deadline.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use parma_core::session::{Greeting, Packet};
use parma_core::wire::Message;
use parma_core::{
    cluster_digest, Config, Key, Layout, MembershipEpoch, NodeId, Placement, RequestId, Technique,
};
use parma_runtime::startup::{ClusterToken, Rendezvous, RendezvousAddr, RendezvousOptions, StartupError};
use parma_transport_zmq::{Bound, ZmqOptions};
use sha2::Sha256;

/// The doc's example cluster token.
const TOKEN: &[u8] = b"an example cluster token";

// ----- what the doc says, read from the doc -----

/// The worked examples of `docs/session.md`: each `<!-- example: NAME -->` and the bytes of
/// the text block below it (the middle column of `offset | bytes | meaning` lines).
fn examples() -> HashMap<String, Vec<u8>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/session.md");
    let text = std::fs::read_to_string(path).expect("docs/session.md");
    let mut out = HashMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("<!-- example: ").and_then(|r| r.strip_suffix(" -->")) else {
            continue;
        };
        assert_eq!(lines.next(), Some("```text"), "example {name}: a text block follows");
        let mut bytes = Vec::new();
        for l in lines.by_ref().take(1000) {
            if l == "```" {
                break;
            }
            let hex = l.split('|').nth(1).unwrap_or_else(|| panic!("example {name}: {l:?}"));
            for b in hex.split_whitespace() {
                bytes.push(u8::from_str_radix(b, 16).unwrap_or_else(|_| panic!("example {name}: {b:?}")));
            }
        }
        assert!(out.insert(name.to_string(), bytes).is_none(), "example {name} twice");
    }
    out
}

fn example(name: &str) -> Vec<u8> {
    examples().remove(name).unwrap_or_else(|| panic!("docs/session.md has no example {name:?}"))
}

/// The doc's example configuration: two nodes, keys 0..1000 of 4 floats, static
/// partitioning, hashed placement, the rest `Config::new`'s.
fn doc_config() -> Config {
    let mut cfg = Config::new(2, 1, Layout::uniform(1000, 4).expect("a layout"));
    cfg.technique = Technique::StaticPartitioning;
    cfg.placement = Placement::Hashed;
    cfg
}

// ----- the doc's algorithms, written out here -----

/// FNV-1a, 64 bits, as the doc states it.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn hmac(parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(TOKEN).expect("any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// The session proof of the doc: HMAC-SHA-256 under the token of the label, the nonce, the
/// prover, the verifier and the digest.
fn session_proof(nonce: u64, prover: u16, verifier: u16, digest: u64) -> [u8; 32] {
    hmac(&[
        b"parma session v1\0\0\0\0",
        &nonce.to_le_bytes(),
        &prover.to_le_bytes(),
        &verifier.to_le_bytes(),
        &digest.to_le_bytes(),
    ])
}

/// The rendezvous proof of the doc: HMAC-SHA-256 of the label, the side and the transcript.
fn rendezvous_proof(side: u8, transcript: &[u8]) -> [u8; 32] {
    hmac(&[b"parma rendezvous v1\0", &[side], transcript])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The digest of the doc's example, from its encoding example and the tail example.
fn doc_digest() -> u64 {
    let mut input = example("config-encoding");
    input.extend(example("digest-input-tail"));
    fnv1a(&input)
}

/// The session digest of the doc's example: FNV-1a of the configuration digest and the four
/// agreed options of the session-digest-input example.
fn doc_session_digest() -> u64 {
    let input = example("session-digest-input");
    assert_eq!(u64_at(&input, 0), doc_digest(), "the session digest's input starts with the digest");
    fnv1a(&input)
}

// ----- ZMTP 3.0 by hand -----

/// Our greeting (NULL mechanism, as client) and READY command of a DEALER.
fn zmtp_greeting_and_ready() -> Vec<u8> {
    let mut g = vec![0u8; 64];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3; // version 3.0
    g[12..16].copy_from_slice(b"NULL");
    let mut ready = vec![5];
    ready.extend_from_slice(b"READY");
    ready.push(11);
    ready.extend_from_slice(b"Socket-Type");
    ready.extend_from_slice(&6u32.to_be_bytes());
    ready.extend_from_slice(b"DEALER");
    g.extend_from_slice(&[0x04, ready.len() as u8]);
    g.extend_from_slice(&ready);
    g
}

/// A ZMTP connection to a node's port, past the handshake.
struct Zmtp(TcpStream);

impl Zmtp {
    fn connect(addr: SocketAddr) -> Zmtp {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        s.write_all(&zmtp_greeting_and_ready()).expect("greeting");
        let mut greeting = [0u8; 64];
        s.read_exact(&mut greeting).expect("the node's greeting");
        assert_eq!((greeting[0], greeting[9], greeting[10]), (0xff, 0x7f, 3), "a ZMTP 3 greeting");
        let mut z = Zmtp(s);
        let (flags, ready) = z.frame().expect("the node's READY");
        assert!(flags & 0x04 != 0 && ready.starts_with(b"\x05READY"), "{ready:?}");
        z
    }

    /// One ZMTP frame: its flags and its body. `None` once the connection closed.
    fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut flags = [0u8; 1];
        self.0.read_exact(&mut flags).ok()?;
        let len = if flags[0] & 0x02 != 0 {
            let mut l = [0u8; 8];
            self.0.read_exact(&mut l).ok()?;
            u64::from_be_bytes(l)
        } else {
            let mut l = [0u8; 1];
            self.0.read_exact(&mut l).ok()?;
            u64::from(l[0])
        };
        assert!(len <= 1 << 20, "a frame of {len} bytes from the node");
        let mut body = vec![0u8; len as usize];
        self.0.read_exact(&mut body).ok()?;
        Some((flags[0], body))
    }

    /// One message: its parts. `None` once the connection closed.
    fn message(&mut self) -> Option<Vec<Vec<u8>>> {
        let mut parts = Vec::new();
        for _ in 0..1000 {
            let (flags, part) = self.frame()?;
            if flags & 0x04 != 0 {
                continue; // a command (PING and the like): not a message
            }
            parts.push(part);
            // Bit 0: more frames of this message follow.
            if flags & 0x01 == 0 {
                return Some(parts);
            }
        }
        panic!("a message of over 1000 parts");
    }

    /// Sends a message of one part.
    fn send(&mut self, part: &[u8]) {
        let mut f = if part.len() < 256 {
            vec![0x00, part.len() as u8]
        } else {
            let mut h = vec![0x02];
            h.extend_from_slice(&(part.len() as u64).to_be_bytes());
            h
        };
        f.extend_from_slice(part);
        self.0.write_all(&f).expect("send");
    }

    /// The session packets of the next message, per the doc's message shapes: one packet in
    /// one part, a data packet's head and frame in two, or a batch behind an empty part.
    fn packets(&mut self) -> Option<Vec<Vec<u8>>> {
        let parts = self.message()?;
        Some(match parts.len() {
            1 => parts,
            2 if !parts[0].is_empty() => vec![parts.concat()],
            _ => {
                assert!(parts[0].is_empty() && parts.len() >= 3, "a batch: {parts:?}");
                parts[1..].to_vec()
            }
        })
    }

    /// Whether the node closes the connection within `limit`.
    fn closed_within(&mut self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut buf = [0u8; 4096];
        while Instant::now() < end {
            let _ = self.0.set_read_timeout(Some(Duration::from_millis(50)));
            match self.0.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

/// The session header of the doc: magic, version, kind, two reserved bytes.
fn session_header(kind: u8) -> Vec<u8> {
    [&b"PRMS"[..], &[3, kind, 0, 0]].concat()
}

#[test]
fn a_node_accepts_a_handshake_and_a_pull_built_from_the_doc() {
    let digest = doc_session_digest();
    let token = ClusterToken::from_secret(TOKEN).expect("a token");
    // The real node is node 1; this test is node 0, the end that connects.
    let bound = Bound::bind(ZmqOptions::loopback()).expect("bind");
    let endpoint = bound.endpoint().to_string();
    let addr: SocketAddr = endpoint.strip_prefix("tcp://").expect("tcp").parse().expect("an address");
    let peers = vec!["tcp://127.0.0.1:9".to_string(), endpoint];
    let transport = bound
        .start(NodeId(1), peers, cluster_digest(&doc_config(), 0, None), std::sync::Arc::new(token))
        .unwrap();
    let (runtime, workers) =
        transport.start_node(doc_config(), parma_runtime::Options::default()).expect("node");

    // A Hello with another digest is refused: the node closes the connection.
    let mut wrong = example("session-hello");
    wrong[12] ^= 1;
    let mut z = Zmtp::connect(addr);
    z.send(&wrong);
    assert!(z.closed_within(Duration::from_secs(5)), "a Hello of another digest is refused");

    // The doc's Hello, as it stands there.
    let hello = example("session-hello");
    assert_eq!(u64_at(&hello, 12), digest, "the example Hello carries the example session digest");
    let hello_nonce = u64_at(&hello, 28);
    let mut z = Zmtp::connect(addr);
    z.send(&hello);
    let welcome = z.packets().expect("a Welcome").remove(0);
    assert_eq!(welcome.len(), 84, "{welcome:?}");
    assert_eq!(&welcome[..8], &session_header(2)[..], "a Welcome");
    assert_eq!((u16_at(&welcome, 8), u16_at(&welcome, 10), u64_at(&welcome, 12)), (1, 0, digest));
    assert_eq!((u64_at(&welcome, 36), u64_at(&welcome, 44)), (1, 4097), "next and window");
    assert_eq!(welcome[52..84], session_proof(hello_nonce, 1, 0, digest), "the node proves the token");
    let proof = [session_header(3), session_proof(u64_at(&welcome, 28), 0, 1, digest).to_vec()].concat();
    z.send(&proof);

    // The doc's data packet: a Pull of key 2 (homed at node 1), request 7.
    let data = example("session-data");
    assert_eq!(
        u32::from_le_bytes(data[40..44].try_into().unwrap()),
        parma_core::digest::fold32(doc_digest())
    );
    z.send(&data);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reply = None;
    'read: for _ in 0..100 {
        assert!(Instant::now() < deadline, "no PullReply within 10 s");
        for p in z.packets().expect("the node keeps the link") {
            assert_eq!(&p[..4], b"PRMS");
            if p[5] == 4 && p.len() > 32 && p[32 + 5] == 2 {
                reply = Some(p);
                break 'read;
            }
        }
    }
    let p = reply.expect("a PullReply");
    assert_eq!((u64_at(&p, 8), u64_at(&p, 16)), (1, 2), "the node's frame 1, our frame 1 acknowledged");
    let f = &p[32..];
    assert_eq!(&f[..4], b"PRMA");
    assert_eq!(u16_at(f, 12), 1, "from node 1");
    assert_eq!(u64_at(f, 20), 7, "request 7");
    assert_eq!((u32::from_le_bytes(f[28..32].try_into().unwrap()), u64_at(f, 32)), (1, 2), "key 2");
    assert_eq!(u32::from_le_bytes(f[40..44].try_into().unwrap()), 4, "4 floats");
    assert_eq!(&f[44..], &[0u8; 16], "zeros: the key's initial value");

    // Goodbye, as the doc's example.
    z.send(&example("session-bye"));
    drop(workers);
    runtime.shutdown().expect("a clean stop");
}

#[test]
fn a_rendezvous_accepts_a_registration_built_from_the_doc() {
    let digest = doc_digest();
    let token = ClusterToken::from_secret(TOKEN).expect("a token");
    let at = RendezvousAddr { host: "127.0.0.1".into(), port: 0 };
    let rendezvous = Rendezvous::bind(&at, 1, digest, &token, RendezvousOptions::default()).expect("bind");
    let addr = rendezvous.local_addr().expect("an address");
    let server = std::thread::spawn(move || rendezvous.run(Duration::from_secs(20)));

    // A registration with another digest first: after the proofs, the refusal of the doc.
    let mut other = example("rendezvous-hello");
    let refused = example("rendezvous-refused");
    other[23..31].copy_from_slice(&refused[14..22]); // the digest, from the refusal example
    let refusal = register(addr, &other, 3);
    assert_eq!(refusal.last(), Some(&refused), "the doc's refusal");
    let e = server.join().expect("the rendezvous thread").expect_err("a digest mismatch ends it");
    assert!(matches!(e, StartupError::DigestMismatch { .. }), "{e}");

    // The doc's registration as it stands there.
    let rendezvous = Rendezvous::bind(&at, 1, digest, &token, RendezvousOptions::default()).expect("bind");
    let addr = rendezvous.local_addr().expect("an address");
    let server = std::thread::spawn(move || rendezvous.run(Duration::from_secs(20)));
    let answers = register(addr, &example("rendezvous-hello"), 4);
    assert_eq!(answers[2], example("rendezvous-registered"));
    assert_eq!(answers[3], example("rendezvous-table"));
    let report = server.join().expect("the rendezvous thread").expect("complete");
    assert_eq!(report.table.world(), 1);
    assert_eq!(report.table.endpoint(NodeId(0)), Some("tcp://127.0.0.1:40000"));
}

/// Registers with `hello` (a whole frame) at the rendezvous at `addr`, checking its challenge
/// by hand and answering it; returns the first `n` frames of the exchange from the
/// challenge on (our proof included, as second), or fewer if the rendezvous closed.
fn register(addr: SocketAddr, hello: &[u8], n: usize) -> Vec<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(hello).expect("hello");
    let challenge = read_frame(&mut s).expect("a challenge");
    assert_eq!(challenge.len(), 4 + 47);
    assert_eq!(&challenge[..11], &[47, 0, 0, 0, b'P', b'R', b'D', b'V', 1, 0, 2], "a Challenge");
    let nonce = u64_at(&challenge, 11);
    let transcript = [hello, &nonce.to_le_bytes()].concat();
    assert_eq!(challenge[19..51], rendezvous_proof(b'S', &transcript), "the rendezvous proves the token");
    let proof =
        [&[39, 0, 0, 0, b'P', b'R', b'D', b'V', 1, 0, 3][..], &rendezvous_proof(b'C', &transcript)].concat();
    s.write_all(&proof).expect("proof");
    let mut out = vec![challenge, proof];
    while out.len() < n {
        match read_frame(&mut s) {
            Some(f) => out.push(f),
            None => break,
        }
    }
    out
}

/// One length-prefixed rendezvous frame, whole (its length included).
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = u32::from_le_bytes(len) as usize;
    assert!(n <= 64 << 10, "a frame of {n} bytes");
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).ok()?;
    Some([len.to_vec(), body].concat())
}

// ----- the doc against the encoders -----

#[test]
fn the_docs_examples_are_what_the_encoders_produce() {
    let cfg = doc_config();
    assert_eq!(example("config-encoding"), cfg.canonical_encoding(), "config-encoding");
    let digest = cluster_digest(&cfg, 0, None);
    assert_eq!(doc_digest(), digest, "the digest");
    let session = ZmqOptions::loopback().session;
    assert_eq!(
        example("session-digest-input"),
        [&digest.to_le_bytes()[..], &session.agreed_encoding()[..]].concat(),
        "session-digest-input"
    );
    let session_digest = parma_core::digest::session_digest(digest, &session);
    assert_eq!(doc_session_digest(), session_digest, "the session digest");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/session.md")).unwrap();
    for (what, value) in [
        ("digest", format!("{digest:#018x}")),
        ("session digest", format!("{session_digest:#018x}")),
        ("wire cluster", format!("{:#010x}", cfg.wire_cluster().0)),
        (
            "digest with a job and a peer timeout",
            format!(
                "{:#018x}",
                cluster_digest(&cfg, parma_core::fnv1a(b"an example job"), Some(Duration::from_secs(5)))
            ),
        ),
    ] {
        assert!(text.contains(&format!("`{value}`")), "the doc states the {what} {value}");
    }

    let digest = session_digest;
    let token = ClusterToken::from_secret(TOKEN).unwrap();
    let hello = example("session-hello");
    let g = |from: u16, to: u16, incarnation: u64, nonce: u64| Greeting {
        from: NodeId(from),
        to: NodeId(to),
        digest,
        incarnation,
        nonce,
        next: 1,
        window: 4097,
    };
    let (n_hello, n_welcome) = (u64_at(&hello, 28), u64_at(&example("session-welcome"), 28));
    assert_eq!(hello, Packet::Hello(g(0, 1, 0xabc, n_hello)).encode(), "session-hello");
    use parma_core::session::Token;
    let welcome_proof = token.prove(n_hello, NodeId(1), NodeId(0), digest);
    assert_eq!(welcome_proof, hmac(&[&example("welcome-proof-input")]), "welcome-proof-input");
    assert_eq!(
        example("session-welcome"),
        Packet::Welcome(g(1, 0, 0xdef, n_welcome), welcome_proof).encode(),
        "session-welcome"
    );
    let proof = token.prove(n_welcome, NodeId(0), NodeId(1), digest);
    assert_eq!(proof, hmac(&[&example("proof-proof-input")]), "proof-proof-input");
    assert_eq!(example("session-proof"), Packet::Proof(proof).encode(), "session-proof");
    let pull = Message::Pull { req: RequestId(7), origin: NodeId(0), hops: 0, keys: vec![Key(2)] };
    let payload = pull.to_frame(cfg.wire_cluster(), NodeId(0), MembershipEpoch::START);
    assert_eq!(
        example("session-data"),
        Packet::Data { seq: 1, ack: 1, window: 4097, payload }.encode(),
        "session-data"
    );
    assert_eq!(example("session-ack"), Packet::Ack { ack: 2, window: 4098 }.encode(), "session-ack");
    assert_eq!(example("session-bye"), Packet::Bye { lost: None }.encode(), "session-bye");
    assert_eq!(
        example("session-bye-lost"),
        Packet::Bye { lost: Some(NodeId(2)) }.encode(),
        "session-bye-lost"
    );
    // Key 2 is homed at node 1 under the hashed placement, as the doc says.
    assert_eq!(parma_core::placement::hashed_home(Key(2), 2), NodeId(1));
}
