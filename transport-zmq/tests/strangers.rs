//! Issue 16, fault 4 (first half): strangers at a running cluster's port. A TCP client
//! writing garbage, and `zeromq` DEALERs sending session Hellos a node must refuse: a wrong
//! configuration digest, a wrong token, a claim to be a peer that is up, a node id that
//! does not connect to this node. Meanwhile the cluster exchanges numbered frames, all of
//! which arrive once and in order; no peer fails; the refusals are counted.
//!
//! `cargo test --release -p parma-transport-zmq --test strangers -- --nocapture`
#![forbid(unsafe_code)]

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use parma_core::session::{Packet, PROOF_LEN};
use support::stranger::{closed_within, dealer_says, hello, Answer};
use support::{busy_cluster, socket_addr};

/// One test at a time: each has its cluster, and the counters are read per cluster, but the
/// machine is small.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// splitmix64 bytes.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let z = (x ^ (x >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (z >> 56) as u8
        })
        .collect()
}

#[test]
fn garbage_is_refused_and_the_cluster_keeps_working() {
    let _serial = serial();
    let (closed, stats) = busy_cluster(3, |c| {
        let addr = socket_addr(&c.endpoints[1]);
        let mut closed = Vec::new();
        let zmtp = support::stranger::zmtp_handshake();
        let after_zmtp = |tail: &[u8]| -> Vec<u8> { zmtp.iter().chain(tail).copied().collect() };
        let starts: Vec<Vec<u8>> = vec![
            // Not ZMTP at all.
            noise(1, 64 << 10),
            // A ZMTP signature, then garbage.
            [0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f].iter().copied().chain(noise(2, 64 << 10)).collect(),
            // A ZMTP handshake, then a message that is no session packet.
            after_zmtp(&[0x00, 5, b'h', b'e', b'l', b'l', b'o']),
            // A ZMTP handshake, then a message of two frames.
            after_zmtp(&[0x01, 1, b'a', 0x00, 1, b'b']),
            // A ZMTP handshake, then garbage where frames should be.
            after_zmtp(&noise(3, 64 << 10)),
        ];
        for bytes in starts {
            let mut s = TcpStream::connect(addr).expect("a stranger connects");
            // The node may close the connection before all of it is written.
            let _ = s.write_all(&bytes);
            closed.push(closed_within(&mut s, Duration::from_secs(2)));
        }
        closed
    });
    eprintln!("garbage: connections closed {closed:?}; node 1: {:?}", stats[1]);
    assert!(closed.iter().all(|c| *c), "a connection writing garbage stayed open: {closed:?}");
    // Two failed the ZMTP handshake, two sent messages that are no Hello; the garbage after
    // a handshake ends its connection in the ZMTP decoder, counted or not.
    assert!(stats[1].strangers_refused >= 4, "{:?}", stats[1]);
    for s in &stats {
        assert_eq!(s.peers_failed, 0, "{s:?}");
    }
}

#[test]
fn hellos_that_are_not_from_a_peer_are_refused_and_counted() {
    let _serial = serial();
    let digest = support::session_digest(&support::options(3000));
    let (answers, stats) = busy_cluster(3, |c| {
        let to1 = &c.endpoints[1];
        vec![
            // Another configuration.
            ("wrong digest", dealer_says(to1, hello(0, 1, digest ^ 1, 1), None)),
            // Node 2 never connects to node 1: the lower id connects.
            ("not the connecting end", dealer_says(to1, hello(2, 1, digest, 1), None)),
            ("for another node", dealer_says(to1, hello(0, 2, digest, 1), None)),
            ("not a hello", dealer_says(to1, Packet::Ack { ack: 1, window: 9 }.encode(), None)),
            // Claims to be node 0, whose link to node 1 is up and busy: the link stays.
            ("node 0 again", dealer_says(to1, hello(0, 1, digest, 1), None)),
            // ... restarted (a new incarnation) and without the frames it acknowledged.
            ("node 0 restarted", dealer_says(to1, hello(0, 1, digest, 0), None)),
            ("node 0 from the future", dealer_says(to1, hello(0, 1, digest, u64::MAX), None)),
        ]
    });
    eprintln!("answers: {answers:?}");
    eprintln!("node 1: {:?}", stats[1]);
    for (what, a) in &answers {
        assert_eq!(*a, Answer::Nothing, "{what}");
    }
    // Each was refused and its connection closed, and counted once, as a stranger (the
    // sessions refused those that named them: digest, a link that is alive).
    assert!(stats[1].strangers_refused >= answers.len() as u64, "{:?}", stats[1]);
    assert_eq!(stats[1].session_refusals, 0, "{:?}", stats[1]);
}

/// The stranger of the issue: it knows the configuration digest (no secret) but not the token,
/// and comes while node 0 is paused (its link to node 1 stalls, as when its process is
/// stopped), so that node 1 has not heard from node 0 for three heartbeat intervals. It gets
/// as far as a Welcome; its proof of the token is wrong, and neither it nor what its Hello
/// claimed (a restart) changes anything of the established link: no reconnection, nothing
/// sent again, nothing lost; the refusals are counted as strangers'. The stall and the
/// strangers take well under `retransmit_timeout` (2 s here), so that no frame goes out again
/// by itself either.
#[test]
fn a_hello_with_a_wrong_token_changes_nothing() {
    let _serial = serial();
    let bad_proof = Packet::Proof([0x55; PROOF_LEN]).encode();
    let mut opts = support::options(3000);
    opts.session.retransmit_timeout = parma_core::time::Duration::from_millis(2000);
    let digest = support::session_digest(&opts);
    let (answers, stats) = support::busy_cluster_with(3, &opts, |c| {
        let to1 = &c.endpoints[1];
        let link01 = &c.proxies.iter().find(|(pair, _)| *pair == (0, 1)).expect("a proxy").1;
        link01.stall(true);
        std::thread::sleep(Duration::from_millis(300));
        let answers = vec![
            ("wrong token", dealer_says(to1, hello(0, 1, digest, 1), Some(bad_proof.clone()))),
            ("node 0 restarted", dealer_says(to1, hello(0, 1, digest, 0), Some(bad_proof.clone()))),
        ];
        link01.stall(false);
        answers
    });
    eprintln!("answers: {answers:?}");
    eprintln!("node 0: {:?}", stats[0]);
    eprintln!("node 1: {:?}", stats[1]);
    for (what, a) in &answers {
        assert_eq!(*a, Answer::Packet("Welcome"), "{what}");
    }
    assert!(stats[1].strangers_refused >= 2, "{:?}", stats[1]);
    assert_eq!(stats[1].session_refusals, 0, "{:?}", stats[1]);
    for (i, s) in stats.iter().enumerate().take(2) {
        assert_eq!(s.reconnects, 0, "node {i} reconnected: {s:?}");
        assert_eq!(s.frames_retransmitted, 0, "node {i} sent frames again: {s:?}");
    }
}

#[test]
fn connections_beyond_the_bound_are_closed_as_they_are_accepted() {
    let _serial = serial();
    let mut opts = support::options(3000);
    opts.connections_max = 16;
    let (grown, stats) = support::busy_cluster_with(3, &opts, |c| {
        // Node 2 holds its two peers' connections; 100 strangers connect and say nothing.
        let addr = socket_addr(&c.endpoints[2]);
        let before = support::open_fds();
        let held: Vec<TcpStream> =
            (0..100).map(|_| TcpStream::connect(addr).expect("a stranger connects")).collect();
        std::thread::sleep(Duration::from_millis(300));
        let grown = support::open_fds().saturating_sub(before);
        drop(held);
        grown
    });
    eprintln!("100 strangers: {grown} more file descriptors in this process; node 2: {:?}", stats[2]);
    // The strangers' own 100 ends, and at most 16 - 2 of them accepted by the node.
    assert!(grown <= 100 + 14, "{grown} file descriptors for 100 strangers");
    assert!(stats[2].strangers_refused >= 100 - 14, "{:?}", stats[2]);
}
