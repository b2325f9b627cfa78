//! A stranger who knows the configuration digest (which is no secret) but not the token,
//! while the real peer is paused: its handshake gets as far as a Welcome and no further, and
//! changes nothing of the established session. And the legitimate cases beside a silent link:
//! the peer itself connecting again (its old connection died unnoticed here) replaces the
//! link; the peer restarted (a new incarnation, the right token) has failed.

use super::*;

/// Node 1 hears nothing for 150 ms: three heartbeat intervals, so a Hello gets a Welcome,
/// but far from `retransmit_timeout` (frames waiting on the link do not go out again by
/// themselves) and from `peer_timeout`.
const PAUSE_MS: u64 = 150;

fn pause_opts() -> SessionOptions {
    SessionOptions { retransmit_timeout: Duration::from_millis(500), ..opts() }
}

/// An established pair that exchanged frames 0..4 both ways, every one acknowledged.
fn established(seed: u64) -> (Pair, [Vec<Vec<u8>>; 2]) {
    let o = pause_opts();
    let mut p = Pair::new([session_with(o, 0, 1, 7, 1), session_with(o, 1, 0, 7, 2)], seed);
    settle(&mut p, 50);
    assert!(p.s[0].is_up() && p.s[1].is_up());
    for n in 0..4 {
        p.s[0].send(&frame(0, n)).unwrap();
        p.s[1].send(&frame(1, n)).unwrap();
    }
    settle(&mut p, 50);
    let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    for (i, g) in got.iter_mut().enumerate() {
        g.extend(core::iter::from_fn(|| p.s[i].poll_recv()));
        p.drain(i);
    }
    settle(&mut p, 20);
    assert_eq!(p.s[0].unacked_frames() + p.s[1].unacked_frames(), 0);
    (p, got)
}

/// Time passes for node 1 alone: node 0 runs no timers and reads nothing (stopped), and
/// what node 1 sends waits on the link.
fn only_node_1_runs(p: &mut Pair, ms: u64) {
    for _ in 0..ms {
        p.now = Instant(p.now.0 + 1_000);
        if p.s[1].poll_timeout().is_some_and(|t| t <= p.now) {
            p.s[1].handle_timeout(p.now);
        }
        p.drain(1);
    }
}

/// A Hello as a stranger who knows the digest sends it, claiming to be node 0.
fn forged(incarnation: u64, next: u64) -> Greeting {
    Greeting {
        from: NodeId(0),
        to: NodeId(1),
        digest: wire_digest(),
        incarnation,
        nonce: 5,
        next,
        window: 17,
    }
}

/// Takes what each node has received into `got` and checks that both now hold the peer's
/// eight frames, each once and in order.
fn take_all_eight(p: &mut Pair, got: &mut [Vec<Vec<u8>>; 2]) {
    for (i, g) in got.iter_mut().enumerate() {
        g.extend(core::iter::from_fn(|| p.s[i].poll_recv()));
        let want: Vec<Vec<u8>> = (0..8).map(|n| frame(1 - i, n)).collect();
        assert!(*g == want, "node {i} got {} frames of 8", g.len());
    }
}

#[test]
fn a_stranger_with_the_digest_but_not_the_token_leaves_an_established_session_alone() {
    let (mut p, mut got) = established(23);
    // Node 0 is stopped (SIGSTOP). Node 1 sends four more frames: they wait on the link,
    // unacknowledged.
    for n in 4..8 {
        p.s[1].send(&frame(1, n)).unwrap();
    }
    p.drain(1);
    only_node_1_runs(&mut p, PAUSE_MS);
    let events_before = p.events[1].len();
    let stats_before = *p.s[1].stats();
    let unacked_before = p.s[1].unacked_frames();
    assert_eq!(unacked_before, 4);

    // The strangers: the right digest, a Hello claiming node 0 (as it is, and restarted with
    // nothing received), then a wrong proof. Each gets its Welcome (node 0 is silent), no
    // more.
    for (k, hello) in [forged(1, 5), forged(99, 1)].iter().enumerate() {
        let welcome = p.s[1].accept(p.now, hello, 40 + k as u64).expect("a Welcome: the link is silent");
        assert!(matches!(Packet::decode(&welcome.to_vec(), 0), Ok(Packet::Welcome(..))));
        let bad = Packet::Proof([0x55; PROOF_LEN]).encode();
        assert_eq!(p.s[1].handle_candidate(p.now, &bad, &[]), Err(Refusal::Token));
    }
    // Nothing of the session changed: its link is up, nothing new to send on it, the same
    // frames wait, no event; only the strangers' counter moved.
    assert!(p.s[1].is_up());
    assert_eq!(p.s[1].failure(), None);
    assert!(p.s[1].poll_transmit().is_none(), "the strangers made node 1 send on the link");
    assert_eq!(p.s[1].unacked_frames(), unacked_before);
    assert_eq!(p.events[1].len(), events_before, "{:?}", &p.events[1][events_before..]);
    let st = *p.s[1].stats();
    assert_eq!(st.strangers_refused, stats_before.strangers_refused + 2, "{st:?}");
    assert_eq!(st.refused, stats_before.refused, "{st:?}");
    assert_eq!(
        (st.links_up, st.links_lost, st.frames_retransmitted, st.packets_received),
        (
            stats_before.links_up,
            stats_before.links_lost,
            stats_before.frames_retransmitted,
            stats_before.packets_received
        ),
        "{st:?}"
    );

    // Node 0 runs again, on the same link: frames both ways, all once and in order, no
    // reconnection, nothing sent again, nothing refused.
    for n in 4..8 {
        p.s[0].send(&frame(0, n)).unwrap();
    }
    settle(&mut p, 200);
    take_all_eight(&mut p, &mut got);
    for i in 0..2 {
        let st = p.s[i].stats();
        assert_eq!((st.links_up, st.links_lost), (1, 0), "node {i} reconnected: {st:?}");
        assert_eq!(st.frames_retransmitted, 0, "node {i}: {st:?}");
        assert_eq!(st.duplicates_dropped + st.out_of_order_dropped, 0, "node {i}: {st:?}");
        assert_eq!(p.s[i].unacked_frames(), 0);
        assert_eq!(p.s[i].failure(), None);
    }
    assert!(p.refusals.is_empty(), "{:?}", p.refusals);
    assert_eq!(p.s[1].stats().strangers_refused, 2);
}

#[test]
fn a_stranger_that_says_nothing_after_its_hello_is_given_up_and_the_link_stays() {
    let (mut p, _) = established(29);
    only_node_1_runs(&mut p, PAUSE_MS);
    let links_up = p.s[1].stats().links_up;
    assert!(p.s[1].accept(p.now, &forged(1, 5), 9).is_ok());
    // Data instead of a proof, from a second stranger, is refused too.
    assert!(p.s[1].accept(p.now, &forged(1, 5), 10).is_ok());
    let data = Packet::Data { seq: 5, ack: 5, window: 9, payload: vec![1] }.encode();
    let (head, body) = data.split_at(head_len(&data));
    assert_eq!(p.s[1].handle_candidate(p.now, head, body), Err(Refusal::Unexpected { kind: "Data" }));
    assert!(p.s[1].accept(p.now, &forged(1, 5), 11).is_ok());
    let before = p.events[1].len();
    only_node_1_runs(&mut p, opts().handshake_timeout.0 / 1_000);
    assert_eq!(p.events[1][before..], [SessionEvent::CandidateDown], "the silent one is given up");
    assert!(p.s[1].is_up());
    assert_eq!(p.s[1].stats().links_up, links_up);
    assert_eq!(p.s[1].stats().strangers_refused, 1);
    settle(&mut p, 100);
    assert_eq!(p.s[0].stats().links_up, 1, "node 0 kept its link");
    assert!(p.refusals.is_empty(), "{:?}", p.refusals);
}

#[test]
fn the_peer_connecting_again_beside_a_silent_link_replaces_it() {
    let (mut p, mut got) = established(31);
    // Node 0's connection dies without node 1 noticing (a half-open connection): node 0
    // knows, node 1's link stays up and falls silent.
    p.wire = [VecDeque::new(), VecDeque::new()];
    p.link = false;
    p.s[0].link_down(p.now);
    for n in 4..8 {
        p.s[0].send(&frame(0, n)).unwrap();
        p.s[1].send(&frame(1, n)).unwrap();
    }
    p.drain(0);
    only_node_1_runs(&mut p, PAUSE_MS);
    assert!(p.s[1].is_up());
    // Node 0 connects again: node 1 answers beside its silent link, node 0 proves the
    // token, and the new link takes the old one's place; the session resumes.
    settle(&mut p, 200);
    take_all_eight(&mut p, &mut got);
    for i in 0..2 {
        assert_eq!(p.s[i].stats().links_up, 2, "node {i}: {:?}", p.s[i].stats());
        assert_eq!(p.s[i].failure(), None);
    }
    assert_eq!(p.s[1].stats().links_lost, 1, "the silent link was given up");
    assert_eq!(p.s[1].stats().strangers_refused, 0);
    assert!(p.refusals.is_empty(), "{:?}", p.refusals);
}

#[test]
fn the_peer_restarted_with_the_token_beside_a_silent_link_has_failed() {
    let (mut p, _) = established(37);
    p.wire = [VecDeque::new(), VecDeque::new()];
    p.link = false;
    only_node_1_runs(&mut p, PAUSE_MS);
    // Node 0 restarted: a new incarnation, nothing received, and the right token. (A whole
    // restarted session refuses node 1's Welcome itself, since node 1 expects frames it
    // never sent; here its Hello and proof are written by hand.)
    let restarted = forged(3, 1);
    assert!(p.s[1].accept(p.now, &restarted, 77).is_ok());
    let proof = Packet::Proof(TestToken(7).prove(77, NodeId(0), NodeId(1), wire_digest())).encode();
    assert_eq!(p.s[1].handle_candidate(p.now, &proof, &[]), Err(Refusal::Restarted));
    assert_eq!(p.s[1].failure(), Some(FailCause::Restarted));
    p.drain(1);
    assert!(p.events[1].contains(&SessionEvent::PeerFailed(FailCause::Restarted)));
    assert_eq!(p.s[1].stats().strangers_refused, 0);
}

#[test]
fn ends_whose_options_must_agree_refuse_each_other_and_the_rest_may_differ() {
    let must_agree = [
        SessionOptions { frame_len_max: 512, ..opts() },
        SessionOptions { window_bytes_max: 8192, ..opts() },
        SessionOptions { heartbeat_interval: Duration::from_millis(60), ..opts() },
        SessionOptions { peer_timeout: Duration::from_millis(2_000), ..opts() },
    ];
    for (i, o) in must_agree.into_iter().enumerate() {
        let mut p = Pair::new([session(0, 1, 7, 1), session_with(o, 1, 0, 7, 2)], 3);
        settle(&mut p, 200);
        assert!(!p.s[0].is_up() && !p.s[1].is_up(), "{i}: a link came up");
        assert!(!p.refusals.is_empty(), "{i}: nothing refused");
        assert!(p.refusals.iter().all(|r| matches!(r, Refusal::Digest { .. })), "{i}: {:?}", p.refusals);
        let text = alloc::string::ToString::to_string(&p.refusals[0]);
        assert!(text.contains("frame_len_max") && text.contains("peer_timeout"), "{text}");
    }
    let may_differ = SessionOptions {
        window_frames_max: 30,
        recv_frames_max: 20,
        recv_bytes_max: 1 << 19,
        retransmit_timeout: Duration::from_millis(150),
        handshake_timeout: Duration::from_millis(120),
        ack_delay: Duration::from_millis(3),
        reconnect_min: Duration::from_millis(6),
        reconnect_max: Duration::from_millis(90),
        ..opts()
    };
    let mut p = Pair::new([session(0, 1, 7, 1), session_with(may_differ, 1, 0, 7, 2)], 4);
    settle(&mut p, 50);
    assert!(p.s[0].is_up() && p.s[1].is_up(), "{:?}", p.refusals);
    p.s[0].send(&frame(0, 0)).unwrap();
    settle(&mut p, 20);
    assert_eq!(p.s[1].poll_recv(), Some(frame(0, 0)));
}
