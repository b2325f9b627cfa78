//! The session layer driven over a simulated medium whose links are cut at random moments,
//! with receivers that take frames late: every frame arrives once and in order, memory stays
//! within the bounds, strangers are refused, silence fails a peer once and a clean close does
//! not.

extern crate std;

use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::ids::{fold_digest, NodeId};
use crate::sampling::SampleRng;
use crate::time::{Duration, Instant};
use crate::transport::SendError;

/// A toy keyed hash: enough to tell tokens apart in tests (a transport uses HMAC).
#[derive(Clone, Copy)]
struct TestToken(u64);

impl Token for TestToken {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; PROOF_LEN] {
        let mut h = fold_digest(self.0, nonce);
        h = fold_digest(h, u64::from(prover.0) << 16 | u64::from(verifier.0));
        h = fold_digest(h, digest);
        let mut out = [0u8; PROOF_LEN];
        for (i, chunk) in out.chunks_mut(8).enumerate() {
            h = fold_digest(h, i as u64);
            chunk.copy_from_slice(&h.to_le_bytes());
        }
        out
    }
}

const DIGEST: u64 = 0xabcd;

/// What the handshakes of sessions with [`opts`] carry: [`DIGEST`] with the options.
fn wire_digest() -> u64 {
    crate::digest::session_digest(DIGEST, &opts())
}

fn opts() -> SessionOptions {
    SessionOptions {
        frame_len_max: 256,
        window_bytes_max: 4096,
        window_frames_max: 24,
        recv_frames_max: 16,
        recv_bytes_max: 1 << 20,
        heartbeat_interval: Duration::from_millis(50),
        peer_timeout: Duration::from_millis(1_000),
        retransmit_timeout: Duration::from_millis(100),
        handshake_timeout: Duration::from_millis(100),
        ack_delay: Duration::from_millis(2),
        reconnect_min: Duration::from_millis(5),
        reconnect_max: Duration::from_millis(80),
    }
}

fn session(me: u16, peer: u16, token: u64, incarnation: u64) -> Session<TestToken> {
    session_with(opts(), me, peer, token, incarnation)
}

fn session_with(o: SessionOptions, me: u16, peer: u16, token: u64, incarnation: u64) -> Session<TestToken> {
    let id = Identity { me: NodeId(me), digest: DIGEST, incarnation };
    Session::new(o, id, NodeId(peer), TestToken(token), Instant(0)).unwrap()
}

/// Two sessions over one simulated medium: at most one link at a time, FIFO in each direction.
struct Pair {
    s: [Session<TestToken>; 2],
    /// Packets in flight on the current link, by receiver.
    wire: [VecDeque<Vec<u8>>; 2],
    /// Whether the current link has carried its first packet to the accepting end.
    opened: bool,
    /// Whether the accepting end took the current link's Hello and waits for its proof.
    candidate: bool,
    /// Whether the current link is the accepting end's session link (it took the link's
    /// proof): what that end sends before goes on a link that is gone.
    proved: bool,
    link: bool,
    now: Instant,
    rng: SampleRng,
    events: [Vec<SessionEvent>; 2],
    refusals: Vec<Refusal>,
    /// Per mille of packets the medium loses, and of packets it delivers twice.
    loss_per_mille: u64,
    dup_per_mille: u64,
    /// The ends take packets in two parts and keep the frames themselves
    /// ([`Session::handle_parts`], [`Session::frames_taken`]) instead of `handle_packet`.
    parts: bool,
    kept: [VecDeque<Vec<u8>>; 2],
}

impl Pair {
    fn new(s: [Session<TestToken>; 2], seed: u64) -> Pair {
        Pair {
            s,
            wire: [VecDeque::new(), VecDeque::new()],
            opened: false,
            candidate: false,
            proved: false,
            link: false,
            now: Instant(0),
            rng: SampleRng::new(seed, 0, 1),
            events: [Vec::new(), Vec::new()],
            refusals: Vec::new(),
            loss_per_mille: 0,
            dup_per_mille: 0,
            parts: false,
            kept: [VecDeque::new(), VecDeque::new()],
        }
    }

    /// The driver's contract for end `i`: drain packets and events.
    fn drain(&mut self, i: usize) {
        while let Some(p) = self.s[i].poll_transmit() {
            if self.link && (i == 0 || self.proved) {
                self.wire[1 - i].push_back(p);
            }
        }
        while let Some(e) = self.s[i].poll_event() {
            self.events[i].push(e);
            match e {
                SessionEvent::Connect if !self.link => {
                    self.link = true;
                    self.opened = false;
                    self.proved = false;
                    let nonce = self.rng.below(u64::MAX);
                    self.s[i].link_up(self.now, nonce);
                }
                SessionEvent::Down => self.cut(),
                SessionEvent::CandidateDown if i == 1 && self.candidate => self.cut(),
                _ => {}
            }
        }
    }

    /// The medium loses the link and everything on it.
    fn cut(&mut self) {
        if !self.link {
            return;
        }
        self.link = false;
        self.candidate = false;
        self.proved = false;
        self.wire = [VecDeque::new(), VecDeque::new()];
        for i in 0..2 {
            self.s[i].link_down(self.now);
        }
    }

    /// Delivers up to `n` packets to end `i`.
    fn deliver(&mut self, i: usize, n: usize) {
        for _ in 0..n {
            let Some(p) = self.wire[i].pop_front() else { return };
            if self.rng.below(1000) < self.loss_per_mille {
                continue;
            }
            if self.rng.below(1000) < self.dup_per_mille {
                self.wire[i].push_front(p.clone());
            }
            let r = if i == 1 && !self.opened {
                self.opened = true;
                let nonce = self.rng.below(u64::MAX);
                hello_of(&p).and_then(|g| self.s[1].accept(self.now, &g, nonce)).map(|welcome| {
                    self.candidate = true;
                    if self.link {
                        self.wire[0].push_back(welcome.to_vec());
                    }
                })
            } else if i == 1 && self.candidate {
                self.candidate = false;
                let (head, body) = p.split_at(head_len(&p));
                let r = self.s[1].handle_candidate(self.now, head, body);
                self.proved = r.is_ok();
                r
            } else if self.parts {
                let (head, body) = p.split_at(head_len(&p));
                match self.s[i].handle_parts(self.now, head, body) {
                    Ok(true) => {
                        self.kept[i].push_back(body.to_vec());
                        Ok(())
                    }
                    r => r.map(|_| ()),
                }
            } else {
                self.s[i].handle_packet(self.now, &p)
            };
            if let Err(e) = r {
                self.refusals.push(e);
                self.cut();
            }
            self.drain(i);
        }
    }

    /// Advances time by `dt` and runs due timers.
    fn tick(&mut self, dt: u64) {
        self.now = Instant(self.now.0 + dt);
        for i in 0..2 {
            if self.s[i].poll_timeout().is_some_and(|t| t <= self.now) {
                self.s[i].handle_timeout(self.now);
            }
            self.drain(i);
        }
    }

    /// The next frame end `i` received, taken.
    fn recv(&mut self, i: usize) -> Option<Vec<u8>> {
        if !self.parts {
            return self.s[i].poll_recv();
        }
        let f = self.kept[i].pop_front()?;
        self.s[i].frames_taken(1);
        Some(f)
    }

    fn check_bounds(&self) {
        for s in &self.s {
            assert!(s.unacked_bytes() <= opts().window_bytes_max, "retransmission buffer over its bound");
            assert!(s.unacked_frames() <= opts().window_frames_max);
            assert!(s.received_frames() as u64 <= opts().recv_frames_max, "receiver over its window");
            assert!(
                s.received_bytes() <= opts().recv_bytes_max.max(opts().frame_len_max),
                "receiver over its bytes"
            );
        }
    }
}

/// Frame number `n` from end `from`: its number, then a length that varies with it.
fn frame(from: usize, n: u64) -> Vec<u8> {
    let mut f = n.to_le_bytes().to_vec();
    f.push(from as u8);
    f.extend((0..(n * 37 % 200) as u8).map(|i| i ^ n as u8));
    f
}

#[test]
fn frames_arrive_once_and_in_order_whatever_the_links_do() {
    for seed in 0..24u64 {
        let mut p = Pair::new([session(0, 1, 7, 100), session(1, 0, 7, 200)], seed);
        // Links cut; in half the seeds the medium also loses or doubles packets within a link.
        if seed % 2 == 1 {
            (p.loss_per_mille, p.dup_per_mille) = (seed % 7, 5 + seed % 11);
        }
        p.parts = seed % 3 == 0;
        let mut sent = [0u64; 2];
        let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        let cut_per_mille = 2 + seed % 20;
        let steps = 6_000;
        for step in 0..steps + 20_000 {
            let faults = step < steps;
            for i in 0..2 {
                // Send while there is room (a few frames per step), in the fault phase only.
                for _ in 0..p.rng.below(4) {
                    if !faults {
                        break;
                    }
                    match p.s[i].send(&frame(i, sent[i])) {
                        Ok(()) => sent[i] += 1,
                        Err(SendError::WouldBlock) => break,
                        Err(e) => panic!("seed {seed}: send failed: {e:?}"),
                    }
                }
                p.drain(i);
                // Receivers take frames late, sometimes not at all for a while.
                if p.rng.below(3) > 0 || !faults {
                    while let Some(f) = p.recv(i) {
                        got[i].push(f);
                    }
                    p.drain(i);
                }
                let n = p.rng.below(6) as usize;
                p.deliver(i, n);
            }
            if faults && p.rng.below(1000) < cut_per_mille {
                p.cut();
            }
            let dt = 1 + p.rng.below(3_000);
            p.tick(dt);
            p.check_bounds();
            let done = (0..2).all(|i| got[1 - i].len() as u64 == sent[i] && p.s[i].unacked_frames() == 0);
            if !faults && done {
                break;
            }
            if step == steps {
                (p.loss_per_mille, p.dup_per_mille) = (0, 0);
            }
        }
        for i in 0..2 {
            let want: Vec<Vec<u8>> = (0..sent[i]).map(|n| frame(i, n)).collect();
            assert!(
                got[1 - i] == want,
                "seed {seed}: frames from {i}: got {} of {}",
                got[1 - i].len(),
                sent[i]
            );
            assert!(p.s[i].failure().is_none(), "seed {seed}: {:?}", p.s[i].failure());
        }
        let st = [*p.s[0].stats(), *p.s[1].stats()];
        assert!(sent[0] > 1_000 && sent[1] > 1_000, "seed {seed}: too little traffic: {sent:?}");
        assert!(st[0].links_up > 3, "seed {seed}: links were not cut often: {:?}", st[0]);
        if seed % 2 == 1 {
            let dups = st[0].duplicates_dropped + st[1].duplicates_dropped;
            let gaps = st[0].out_of_order_dropped + st[1].out_of_order_dropped;
            assert!(dups > 0 && (gaps > 0 || seed % 7 == 0), "seed {seed}: {st:?}");
        }
    }
}

#[test]
fn retransmission_and_duplicates_are_counted() {
    // Cut the link right after frames went out: they are sent again on the next link, and the
    // receiver drops what it had already.
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 3);
    for _ in 0..50 {
        p.tick(1_000);
        p.deliver(0, 10);
        p.deliver(1, 10);
    }
    assert!(p.s[0].is_up() && p.s[1].is_up());
    for n in 0..10 {
        p.s[0].send(&frame(0, n)).unwrap();
    }
    p.drain(0);
    p.deliver(1, 20); // B has them, its acknowledgement is still on the wire
    p.cut();
    for _ in 0..200 {
        p.tick(1_000);
        p.deliver(0, 10);
        p.deliver(1, 10);
    }
    let got: Vec<Vec<u8>> = core::iter::from_fn(|| p.s[1].poll_recv()).collect();
    assert_eq!(got, (0..10).map(|n| frame(0, n)).collect::<Vec<_>>());
    assert_eq!(p.s[0].unacked_frames(), 0);
    assert_eq!(p.s[0].stats().links_up, 2);
}

/// Runs the pair until both ends are up or `steps` pass.
fn settle(p: &mut Pair, steps: usize) {
    for _ in 0..steps {
        p.tick(1_000);
        p.deliver(0, 10);
        p.deliver(1, 10);
    }
}

#[test]
fn strangers_are_refused_and_change_nothing() {
    // Another token, another configuration, a node claiming another id.
    let cases: [(Session<TestToken>, Session<TestToken>, &str); 3] = [
        (session(0, 1, 7, 1), session(1, 0, 8, 2), "token"),
        (
            session(0, 1, 7, 1),
            Session::new(
                opts(),
                Identity { me: NodeId(1), digest: DIGEST + 1, incarnation: 2 },
                NodeId(0),
                TestToken(7),
                Instant(0),
            )
            .unwrap(),
            "digest",
        ),
        (session(0, 1, 7, 1), session(2, 0, 7, 2), "peer"),
    ];
    for (a, b, name) in cases {
        let mut p = Pair::new([a, b], 5);
        settle(&mut p, 300);
        assert!(!p.s[0].is_up() && !p.s[1].is_up(), "{name}: a link came up");
        assert!(!p.refusals.is_empty(), "{name}: nothing refused");
        let expect = |r: &Refusal| match name {
            "token" => *r == Refusal::Token,
            "digest" => matches!(r, Refusal::Digest { .. }),
            _ => matches!(r, Refusal::WrongPeer { .. }),
        };
        assert!(p.refusals.iter().all(expect), "{name}: {:?}", p.refusals);
        assert!(p.s[1].send(b"x").is_ok(), "{name}: the session still takes frames");
    }
    // Bytes that are no session packet, a Hello on an up link, data before the handshake.
    let mut b = session(1, 0, 7, 2);
    let before = *b.stats();
    for junk in [&b""[..], b"GET / HTTP/1.1\r\n\r\n", &[0u8; 64][..]] {
        assert!(matches!(b.handle_packet(Instant(1), junk), Err(Refusal::Malformed(_))));
        assert!(hello_of(junk).is_err());
    }
    let data = Packet::Data { seq: 1, ack: 1, window: 9, payload: vec![1, 2] }.encode();
    assert_eq!(b.handle_packet(Instant(1), &data), Err(Refusal::Unexpected { kind: "Data" }));
    assert_eq!(hello_of(&data), Err(Refusal::NotHello));
    assert_eq!(b.received_frames(), 0);
    assert_eq!(b.stats().refused, before.refused + 4);
    assert_eq!(b.failure(), None);
}

#[test]
fn a_claimed_length_over_the_limit_is_refused_before_it_is_copied() {
    let mut b = session(1, 0, 7, 2);
    let mut big = Packet::Data { seq: 1, ack: 1, window: 9, payload: Vec::new() }.encode();
    big.resize(opts().frame_len_max + DATA_OVERHEAD + 1, 0);
    assert!(matches!(
        b.handle_packet(Instant(1), &big),
        Err(Refusal::Malformed(PacketError::TooLong { .. }))
    ));
}

#[test]
fn a_silent_peer_fails_once_and_an_idle_one_does_not() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 9);
    settle(&mut p, 50);
    assert!(p.s[0].is_up());
    // Idle for ten peer timeouts: heartbeats keep it alive.
    settle(&mut p, 10_000);
    assert!(p.s[0].failure().is_none() && p.s[1].failure().is_none());
    assert!(p.s[0].stats().heartbeats_sent > 100);
    // Then node 1 goes silent (its packets are lost): node 0 gives up within the timeout.
    let t0 = p.now;
    let mut failed_at = None;
    for _ in 0..3_000 {
        p.tick(1_000);
        p.wire[0].clear();
        p.deliver(1, 10);
        if failed_at.is_none() && p.s[0].failure().is_some() {
            failed_at = Some(p.now);
        }
    }
    assert_eq!(p.s[0].failure(), Some(FailCause::Silent));
    let waited = failed_at.unwrap() - t0;
    assert!(waited.0 <= opts().peer_timeout.0 + 2_000, "failed after {waited:?}");
    let fails = p.events[0].iter().filter(|e| matches!(e, SessionEvent::PeerFailed(_))).count();
    assert_eq!(fails, 1, "PeerFailed is reported once");
    assert_eq!(p.s[0].send(b"x"), Err(SendError::PeerFailed));
    assert_eq!(p.s[0].poll_timeout(), None);
}

#[test]
fn a_slow_receiver_blocks_the_sender_and_taking_frames_wakes_it() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 11);
    settle(&mut p, 50);
    let mut sent = 0;
    while p.s[0].send(&frame(0, sent)).is_ok() {
        sent += 1;
    }
    assert_eq!(p.s[0].send(b"y"), Err(SendError::WouldBlock));
    assert!(sent as usize <= opts().window_frames_max);
    settle(&mut p, 200);
    // The receiver took nothing: it holds at most its window, the sender keeps the rest.
    assert_eq!(p.s[1].received_frames() as u64, opts().recv_frames_max.min(sent));
    assert!(!p.events[0].contains(&SessionEvent::Writable) || p.s[0].unacked_frames() < sent as usize);
    while p.s[1].poll_recv().is_some() {}
    p.drain(1);
    settle(&mut p, 200);
    while p.s[1].poll_recv().is_some() {}
    p.drain(1);
    settle(&mut p, 200);
    assert!(p.events[0].contains(&SessionEvent::Writable), "{:?}", p.events[0]);
    assert_eq!(p.s[0].unacked_frames(), 0);
    assert!(p.s[0].send(b"z").is_ok());
}

#[test]
fn a_slow_receiver_holds_at_most_its_bytes_and_gets_every_frame_once_it_takes_them() {
    for parts in [false, true] {
        let o = SessionOptions { recv_bytes_max: 600, ..opts() };
        let mut p = Pair::new([session_with(o, 0, 1, 7, 1), session_with(o, 1, 0, 7, 2)], 17);
        p.parts = parts;
        settle(&mut p, 50);
        // Frames of 200 bytes: the window in frames (16) would let 3,200 bytes wait.
        let big = |n: u64| {
            let mut f = frame(0, n);
            f.resize(200, n as u8);
            f
        };
        let mut sent = 0;
        while p.s[0].send(&big(sent)).is_ok() {
            sent += 1;
        }
        settle(&mut p, 300);
        assert_eq!(p.s[1].received_frames(), 3, "parts {parts}: 600 bytes hold three frames");
        assert_eq!(p.s[1].received_bytes(), 600);
        assert!(p.s[1].stats().out_of_order_dropped > 0, "the rest was refused at the bound");
        // Taking them lets the rest through, each once and in order.
        let mut got = Vec::new();
        for _ in 0..200 {
            while let Some(f) = p.recv(1) {
                got.push(f);
            }
            if got.len() as u64 == sent {
                break;
            }
            settle(&mut p, 50);
        }
        let want: Vec<Vec<u8>> = (0..sent).map(big).collect();
        assert!(got == want, "parts {parts}: got {} of {sent} frames", got.len());
        assert_eq!(p.s[0].failure(), None);
        assert_eq!(p.s[1].received_bytes(), 0);
    }
}

#[test]
fn a_restarted_peer_has_failed() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 13);
    settle(&mut p, 50);
    // Node 1 restarts: a new incarnation with nothing of the old session.
    p.cut();
    p.s[1] = session(1, 0, 7, 3);
    settle(&mut p, 200);
    assert_eq!(p.s[0].failure(), Some(FailCause::Restarted));
    assert!(p.refusals.contains(&Refusal::Restarted));
}

#[test]
fn a_hello_changes_nothing_until_its_sender_proves_the_token() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 19);
    settle(&mut p, 50);
    for n in 0..3 {
        p.s[0].send(&frame(0, n)).unwrap();
    }
    settle(&mut p, 50);
    // A stranger claims to be node 0, restarted: another incarnation, nothing received.
    let forged = Greeting {
        from: NodeId(0),
        to: NodeId(1),
        digest: wire_digest(),
        incarnation: 99,
        nonce: 5,
        next: 0,
        window: 17,
    };
    // The link is up and node 0 was heard from lately: the link stays.
    assert_eq!(p.s[1].accept(p.now, &forged, 11).map(|_| ()), Err(Refusal::LinkAlive));
    assert!(p.s[1].is_up());
    // With the link gone the stranger gets a Welcome, but it cannot prove the token, and
    // what its Hello claimed counts for nothing: no failure, and node 0 resumes.
    p.cut();
    for n in 3..6 {
        p.s[0].send(&frame(0, n)).unwrap();
    }
    assert!(p.s[1].accept(p.now, &forged, 12).is_ok());
    p.drain(1);
    let bad = Packet::Proof([0; PROOF_LEN]).encode();
    assert_eq!(p.s[1].handle_candidate(p.now, &bad, &[]), Err(Refusal::Token));
    assert_eq!(p.s[1].failure(), None);
    settle(&mut p, 200);
    assert!(p.s[0].is_up() && p.s[1].is_up());
    let got: Vec<Vec<u8>> = core::iter::from_fn(|| p.s[1].poll_recv()).collect();
    assert_eq!(got, (0..6).map(|n| frame(0, n)).collect::<Vec<_>>());
    assert_eq!(p.s[0].failure(), None);
    assert!(p.refusals.is_empty(), "{:?}", p.refusals);
}

#[test]
fn a_clean_close_is_not_a_failure() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 17);
    settle(&mut p, 50);
    for n in 0..5 {
        p.s[1].send(&frame(1, n)).unwrap();
    }
    p.s[1].close(p.now);
    assert_eq!(p.s[1].send(b"late"), Err(SendError::Closed));
    settle(&mut p, 100);
    let got: Vec<Vec<u8>> = core::iter::from_fn(|| p.s[0].poll_recv()).collect();
    assert_eq!(got.len(), 5, "frames sent before the close arrive");
    assert!(p.s[0].is_closed() && p.s[1].is_closed());
    assert!(p.events[0].contains(&SessionEvent::Closed));
    settle(&mut p, 3_000);
    assert_eq!(p.s[0].failure(), None, "a closed peer is not a failed one");
    assert_eq!(p.s[0].peer_lost(), None, "a Bye that names nobody");
}

#[test]
fn a_bye_names_the_first_peer_its_sender_lost() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 19);
    settle(&mut p, 50);
    p.s[1].tell_lost(NodeId(5));
    p.s[1].tell_lost(NodeId(3));
    p.s[1].tell_lost(NodeId(0));
    p.s[1].close(p.now);
    settle(&mut p, 100);
    assert!(p.s[0].is_closed() && p.s[1].is_closed());
    assert_eq!(p.s[0].peer_lost(), Some(NodeId(5)), "the first loss, not a later one");
    assert_eq!(p.s[1].peer_lost(), None, "the end that closed heard no Bye");
    assert_eq!(p.s[0].failure(), None, "the Bye's sender itself did not fail");
}

#[test]
fn packets_round_trip_and_any_bytes_decode_or_fail() {
    let g =
        Greeting { from: NodeId(3), to: NodeId(4), digest: 5, incarnation: 6, nonce: 7, next: 8, window: 9 };
    let all = [
        Packet::Hello(g),
        Packet::Welcome(g, [7; PROOF_LEN]),
        Packet::Proof([1; PROOF_LEN]),
        Packet::Data { seq: 1, ack: 2, window: 3, payload: vec![4; 10] },
        Packet::Ack { ack: 5, window: 6 },
        Packet::Bye { lost: None },
        Packet::Bye { lost: Some(NodeId(0)) },
        Packet::Bye { lost: Some(NodeId(u16::MAX)) },
    ];
    for p in &all {
        let b = p.encode();
        assert_eq!(b.len(), p.encoded_len());
        assert_eq!(Packet::decode(&b, 1 << 10).as_ref(), Ok(p));
        // Every truncation, and one byte more, fails without a panic (a data packet's payload
        // may be cut short: it is then another valid data packet).
        for n in 0..b.len() {
            let r = Packet::decode(&b[..n], 1 << 10);
            assert!(r.is_err() || (matches!(p, Packet::Data { .. }) && n >= DATA_OVERHEAD));
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(Packet::decode(&longer, 1 << 10).is_err() || matches!(p, Packet::Data { .. }));
    }
    // A Bye naming a node beyond any id.
    let mut b = Packet::Bye { lost: None }.encode();
    b[8..].copy_from_slice(&(u32::from(u16::MAX) + 2).to_le_bytes());
    assert_eq!(Packet::decode(&b, 1 << 10), Err(PacketError::Field));
    let mut rng = SampleRng::new(1, 2, 3);
    for _ in 0..20_000 {
        let len = rng.below(80) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        if len >= 8 && rng.below(2) == 0 {
            b[..4].copy_from_slice(&MAGIC);
            b[4] = VERSION;
            b[5] = rng.below(8) as u8;
        }
        let _ = Packet::decode(&b, 64);
        let _ = hello_of(&b);
    }
}

#[test]
fn options_that_do_not_fit_are_refused_with_a_reason() {
    let bad = [
        SessionOptions { frame_len_max: 0, ..opts() },
        SessionOptions { window_bytes_max: 0, ..opts() },
        SessionOptions { heartbeat_interval: Duration::from_secs(2), ..opts() },
        SessionOptions { reconnect_min: Duration::from_secs(9), ..opts() },
    ];
    for o in bad {
        let id = Identity { me: NodeId(0), digest: 0, incarnation: 0 };
        let r = Session::new(o, id, NodeId(1), TestToken(1), Instant(0));
        let Err(e) = r else { panic!("accepted {o:?}") };
        assert!(std::format!("{e}").starts_with("session options: "), "{e}");
    }
    assert!(SessionOptions::default().validate().is_ok());
}

#[test]
fn a_packet_in_two_parts_is_the_same_packet_and_its_frame_is_shared() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 5);
    settle(&mut p, 50);
    assert!(p.s[0].is_up() && p.s[1].is_up());
    p.s[0].send(&[9; 40]).unwrap();
    let o = p.s[0].poll_transmit_parts().expect("the data packet");
    assert_eq!(o.head().len(), DATA_OVERHEAD);
    assert_eq!(o.body().map(Frame::as_slice), Some(&[9u8; 40][..]));
    let whole = o.to_vec();
    assert_eq!(head_len(&whole), DATA_OVERHEAD);
    match Packet::decode(&whole, 1 << 10) {
        Ok(Packet::Data { seq: 1, payload, .. }) => assert_eq!(payload, vec![9; 40]),
        other => panic!("{other:?}"),
    }
    // The receiver keeps nothing itself, counts the frame as not taken until told.
    let (head, body) = whole.split_at(DATA_OVERHEAD);
    assert_eq!(p.s[1].handle_parts(p.now, head, body), Ok(true));
    assert_eq!(p.s[1].received_frames(), 1);
    assert_eq!(p.s[1].poll_recv(), None);
    assert_eq!(p.s[1].handle_parts(p.now, head, body), Ok(false), "a duplicate");
    p.s[1].frames_taken(5);
    assert_eq!(p.s[1].received_frames(), 0, "taking is capped at what was delivered");
    // A head of another kind with a body, or a data head of the wrong length, is refused.
    let ack = Packet::Ack { ack: 1, window: 9 }.encode();
    assert!(p.s[1].handle_parts(p.now, &ack, &[1]).is_err());
    assert!(p.s[1].handle_parts(p.now, &whole[..DATA_OVERHEAD + 1], &whole[DATA_OVERHEAD + 1..]).is_err());
}

#[test]
fn acknowledged_buffers_are_reused_within_the_window() {
    let mut p = Pair::new([session(0, 1, 7, 1), session(1, 0, 7, 2)], 6);
    settle(&mut p, 50);
    let mut seen = Vec::new();
    for round in 0..20u64 {
        for n in 0..8 {
            p.s[0].send(&frame(0, round * 8 + n)).unwrap();
        }
        for _ in 0..8 {
            let o = p.s[0].poll_transmit_parts().expect("data");
            seen.push(o.body().map_or(0, |f| f.as_slice().as_ptr() as usize));
            let w = o.to_vec();
            drop(o);
            p.wire[1].push_back(w);
        }
        p.deliver(1, 100);
        while p.s[1].poll_recv().is_some() {}
        p.tick(10_000);
        p.deliver(0, 100);
        assert_eq!(p.s[0].unacked_frames(), 0, "round {round}");
        p.check_bounds();
    }
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() <= 24, "{} distinct buffers for 160 frames", seen.len());
}

#[test]
fn a_frame_larger_than_the_window_goes_alone() {
    let o = SessionOptions { window_bytes_max: 200, ..opts() };
    let mut p = Pair::new([session_with(o, 0, 1, 7, 1), session_with(o, 1, 0, 7, 2)], 17);
    settle(&mut p, 50);
    let big = vec![7u8; 256];
    p.s[0].send(&big).unwrap();
    // Nothing else may join it, however small, until the peer acknowledges it.
    assert_eq!(p.s[0].send(b"x"), Err(SendError::WouldBlock));
    assert_eq!(p.s[0].send(&big), Err(SendError::WouldBlock));
    settle(&mut p, 20);
    assert_eq!(p.s[1].poll_recv(), Some(big.clone()));
    assert_eq!(p.s[0].unacked_frames(), 0);
    p.s[0].send(b"x").unwrap();
    p.s[0].send(b"y").unwrap();
    settle(&mut p, 20);
    assert_eq!(p.s[1].poll_recv().as_deref(), Some(&b"x"[..]));
    assert_eq!(p.s[1].poll_recv().as_deref(), Some(&b"y"[..]));
}

#[test]
fn a_receiver_owing_an_eighth_of_the_window_acknowledges_at_once() {
    // Frames of 100 bytes: the eighth of the window (512 bytes) is owed on the fifth packet,
    // long before the frame count calls for an acknowledgement (512 frames with this grant)
    // or the delayed acknowledgement's timer runs (no time passes).
    let o = SessionOptions { recv_frames_max: 4096, window_frames_max: 4096, ..opts() };
    let mut p = Pair::new([session_with(o, 0, 1, 7, 1), session_with(o, 1, 0, 7, 2)], 19);
    settle(&mut p, 50);
    let mut acked_after = None;
    for n in 1..=8u64 {
        p.s[0].send(&[n as u8; 100]).unwrap();
        p.drain(0);
        p.deliver(1, 1);
        p.deliver(0, 10);
        if p.s[0].unacked_frames() == 0 {
            acked_after = Some(n);
            break;
        }
    }
    let per_packet = 100 + DATA_OVERHEAD;
    let expected = (opts().window_bytes_max / 8).div_ceil(per_packet) as u64;
    assert_eq!(acked_after, Some(expected), "{} bytes a packet", per_packet);
}

mod strangers;
