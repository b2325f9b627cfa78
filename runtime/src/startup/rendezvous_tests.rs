//! The rendezvous against misconfigured nodes and strangers, on 127.0.0.1 (ephemeral ports).
//! Every test ends by itself: the rendezvous and the nodes have timeouts, and the nodes at
//! fault end it at once.

use std::io::{Read, Write};
use std::thread::JoinHandle;

use super::*;
use crate::startup::join::join_at;

const TIMEOUT: Duration = Duration::from_secs(20);
const DIGEST: u64 = 0x0123_4567_89ab_cdef;

fn token() -> ClusterToken {
    ClusterToken::from_secret(*b"rendezvous test token").unwrap()
}

fn local() -> RendezvousAddr {
    RendezvousAddr { host: "127.0.0.1".into(), port: 0 }
}

/// A rendezvous for `world` nodes on a free port, run on a thread; returns its address.
fn start(
    world: u16,
    opts: RendezvousOptions,
) -> (RendezvousAddr, JoinHandle<Result<ServeReport, StartupError>>) {
    let r = Rendezvous::bind(&local(), world, DIGEST, &token(), opts).unwrap();
    let port = r.local_addr().unwrap().port();
    (RendezvousAddr { host: "127.0.0.1".into(), port }, thread::spawn(move || r.run(TIMEOUT)))
}

fn endpoint(rank: Option<u16>) -> String {
    format!("tcp://127.0.0.1:{}", 40000 + rank.unwrap_or(999))
}

/// A node joining on a thread.
fn node(
    at: &RendezvousAddr,
    rank: Option<u16>,
    world: u16,
    digest: u64,
) -> JoinHandle<Result<PeerTable, StartupError>> {
    let at = at.clone();
    thread::spawn(move || join_at(&at, rank.map(NodeId), world, &endpoint(rank), digest, &token(), TIMEOUT))
}

/// Lets the nodes started so far register (generous: the machine may be busy).
fn settle() {
    thread::sleep(Duration::from_millis(300));
}

/// Registers by hand, as a node would, and keeps the connection.
fn register_raw(at: &RendezvousAddr, rank: u16, world: u16) -> TcpStream {
    let mut s = TcpStream::connect((at.host.as_str(), at.port)).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let hello = Hello { nonce: 1, rank: Some(NodeId(rank)), world, digest: DIGEST, endpoint: "raw".into() };
    wire::send(&mut s, &Msg::Hello(hello.clone()), until).unwrap();
    let Ok(Msg::Challenge { nonce, .. }) = wire::recv(&mut s, SHORT_FRAME_MAX, until) else {
        panic!("no challenge")
    };
    let proof = token().prove_rendezvous(b'C', &transcript(&hello, nonce));
    wire::send(&mut s, &Msg::Proof { proof }, until).unwrap();
    assert!(matches!(wire::recv(&mut s, SHORT_FRAME_MAX, until), Ok(Msg::Registered)));
    s
}

/// Whether the rendezvous closes `s` (after reading what it wants) within two seconds.
fn closed_soon(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::TimedOut,
        }
    }
}

fn expect_err(h: JoinHandle<Result<PeerTable, StartupError>>) -> StartupError {
    match h.join().unwrap() {
        Ok(t) => panic!("joined: {t}"),
        Err(e) => e,
    }
}

#[test]
fn a_digest_mismatch_ends_the_rendezvous_for_everyone_and_names_both_digests() {
    let (at, server) = start(3, RendezvousOptions::default());
    let good = node(&at, Some(0), 3, DIGEST);
    settle();
    let bad = node(&at, Some(1), 3, 0xbad);
    for e in [expect_err(bad), expect_err(good), server.join().unwrap().unwrap_err()] {
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                StartupError::DigestMismatch { rank: Some(NodeId(1)), node: 0xbad, rendezvous: DIGEST }
            ),
            "{msg}"
        );
        assert!(msg.contains("rank 1 has 0x0000000000000bad, the rendezvous 0x0123456789abcdef"), "{msg}");
    }
}

#[test]
fn world_size_mismatch_rank_outside_and_mixed_ranks_are_refused() {
    let cases: [(Option<u16>, u16, &str); 3] = [
        (Some(1), 4, "world size mismatch: rank 1 counts 4 nodes, the rendezvous 3"),
        (Some(7), 3, "rank 7 is outside the world of 3 nodes (ranks 0 to 2)"),
        (None, 3, "some nodes gave their rank and others asked to be assigned one"),
    ];
    for (rank, world, expect) in cases {
        let (at, server) = start(3, RendezvousOptions::default());
        let good = node(&at, Some(0), 3, DIGEST);
        settle();
        let bad = node(&at, rank, world, DIGEST);
        for e in [expect_err(bad), expect_err(good), server.join().unwrap().unwrap_err()] {
            assert!(e.to_string().starts_with(expect), "{e}");
        }
    }
}

#[test]
fn a_duplicate_rank_names_both_endpoints() {
    let (at, server) = start(3, RendezvousOptions::default());
    let first = node(&at, Some(1), 3, DIGEST);
    settle();
    let at2 = at.clone();
    let second = thread::spawn(move || {
        join_at(&at2, Some(NodeId(1)), 3, "tcp://10.9.9.9:1", DIGEST, &token(), TIMEOUT)
    });
    for e in [expect_err(second), expect_err(first), server.join().unwrap().unwrap_err()] {
        assert_eq!(
            e.to_string(),
            "rank 1 registered twice: first from tcp://127.0.0.1:40001, then from tcp://10.9.9.9:1"
        );
    }
}

#[test]
fn a_rank_whose_connection_closed_may_register_again() {
    let (at, server) = start(2, RendezvousOptions::default());
    drop(register_raw(&at, 1, 2));
    let nodes = [node(&at, Some(1), 2, DIGEST), node(&at, Some(0), 2, DIGEST)];
    for (r, n) in nodes.into_iter().enumerate() {
        assert_eq!(n.join().unwrap().unwrap().me(), Some(NodeId(1 - r as u16)));
    }
    let report = server.join().unwrap().unwrap();
    assert_eq!(report.table.endpoint(NodeId(1)), Some(endpoint(Some(1)).as_str()));
    assert!(report.undelivered.is_empty());
}

#[test]
fn strangers_are_refused_and_counted_while_the_nodes_register() {
    let opts =
        RendezvousOptions { handshake_timeout: Duration::from_millis(500), ..RendezvousOptions::default() };
    let (at, server) = start(3, opts);
    let addr = (at.host.as_str(), at.port);
    let first = node(&at, Some(0), 3, DIGEST);
    settle();
    // Garbage: its first four bytes read as a length far beyond a hello's.
    let mut http = TcpStream::connect(addr).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // A claimed 4 GiB frame: refused without reading (or allocating) it.
    let mut huge = TcpStream::connect(addr).unwrap();
    huge.write_all(&[0xff; 4]).unwrap();
    // Connects and leaves.
    drop(TcpStream::connect(addr).unwrap());
    // A slow-loris: a byte now and then, never a whole hello.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(&[40]).unwrap();
    // A well-formed node without the token.
    let at2 = at.clone();
    let other = ClusterToken::from_secret(*b"another token").unwrap();
    let impostor =
        thread::spawn(move || join_at(&at2, Some(NodeId(2)), 3, "tcp://x:1", DIGEST, &other, TIMEOUT));
    assert!(closed_soon(&mut http) && closed_soon(&mut huge));
    assert!(matches!(expect_err(impostor), StartupError::WrongToken { .. }));
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(150));
        let _ = slow.write_all(&[0]);
    }
    thread::sleep(Duration::from_millis(300));
    let rest = [node(&at, Some(1), 3, DIGEST), node(&at, Some(2), 3, DIGEST)];
    for (i, h) in [first].into_iter().chain(rest).enumerate() {
        let table = h.join().unwrap().unwrap();
        assert_eq!((table.me(), table.world(), table.digest()), (Some(NodeId(i as u16)), 3, DIGEST));
    }
    let report = server.join().unwrap().unwrap();
    let want = Refusals { malformed: 3, timed_out: 1, unauthenticated: 1, over_capacity: 0 };
    assert_eq!(report.refusals, want, "{}", report.refusals);
    assert_eq!(report.refusals.to_string(), "3 malformed, 1 timed out, 1 without the token");
}

#[test]
fn handshakes_beyond_the_bound_are_turned_away_and_nodes_retry() {
    let opts = RendezvousOptions {
        handshakes_max: 2,
        handshake_timeout: Duration::from_millis(400),
        ..RendezvousOptions::default()
    };
    let (at, server) = start(2, opts);
    let addr = (at.host.as_str(), at.port);
    let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    settle();
    let mut third = TcpStream::connect(addr).unwrap();
    assert!(closed_soon(&mut third), "the third handshake is closed at once");
    let nodes = [node(&at, Some(0), 2, DIGEST), node(&at, Some(1), 2, DIGEST)];
    for n in nodes {
        n.join().unwrap().unwrap();
    }
    let report = server.join().unwrap().unwrap();
    assert!(report.refusals.over_capacity >= 1, "{}", report.refusals);
    assert_eq!(report.refusals.timed_out, 2, "{}", report.refusals);
    drop(idle);
}

#[test]
fn another_protocol_version_is_told_ours() {
    let (at, server) = start(1, RendezvousOptions::default());
    let mut s = TcpStream::connect((at.host.as_str(), at.port)).unwrap();
    let hello = Hello { nonce: 1, rank: Some(NodeId(0)), world: 1, digest: DIGEST, endpoint: "e".into() };
    let mut frame = Msg::Hello(hello).encode();
    frame[8] = 9; // the version's low byte, after the length and the magic
    s.write_all(&frame).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    match wire::recv(&mut s, SHORT_FRAME_MAX, until) {
        Ok(Msg::Refused(StartupError::Version { theirs, .. })) => assert_eq!(theirs, wire::VERSION),
        other => panic!("{other:?}"),
    }
    node(&at, Some(0), 1, DIGEST).join().unwrap().unwrap();
    assert_eq!(server.join().unwrap().unwrap().refusals.malformed, 1);
}

#[test]
fn an_endpoint_that_cannot_be_sent_is_refused_before_connecting() {
    let at = RendezvousAddr { host: "127.0.0.1".into(), port: 9 };
    for bad in ["", "a\nb", &"x".repeat(256)] {
        let e = join_at(&at, Some(NodeId(0)), 1, bad, DIGEST, &token(), TIMEOUT).unwrap_err();
        assert!(matches!(e, StartupError::BadEndpoint { .. }), "{e}");
    }
}
