//! The `session_ops` target: two [`Session`]s over a medium the fuzz bytes control. Each byte
//! pair is an operation: send a frame (either end, any length up to the limit), deliver, lose
//! or double the next packet of a direction, cut the link, let time pass, take received
//! frames, close an end, or hand an end bytes that are no packet of its link (malformed, or a
//! Hello where data is expected). After every operation: the frames each end took are exactly
//! the first frames the other end sent, in order; the retransmission buffer and the receive
//! queue are within their bounds. At the end the medium heals and, unless an end failed or
//! closed, every frame sent arrives.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::ids::{fold_digest, NodeId};
use crate::session::{
    head_len, hello_of, Identity, Packet, Session, SessionEvent, SessionOptions, Token, DATA_OVERHEAD,
    PROOF_LEN,
};
use crate::time::{Duration, Instant};

#[derive(Clone, Copy)]
struct FuzzToken;

impl Token for FuzzToken {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; PROOF_LEN] {
        let h = fold_digest(
            fold_digest(fold_digest(0x70, nonce), u64::from(prover.0) << 16 | u64::from(verifier.0)),
            digest,
        );
        let mut out = [0u8; PROOF_LEN];
        out[..8].copy_from_slice(&h.to_le_bytes());
        out
    }
}

fn options() -> SessionOptions {
    SessionOptions {
        frame_len_max: 64,
        window_bytes_max: 1024,
        window_frames_max: 12,
        recv_frames_max: 6,
        recv_bytes_max: 200,
        heartbeat_interval: Duration::from_millis(50),
        peer_timeout: Duration::from_secs(3_600),
        retransmit_timeout: Duration::from_millis(100),
        handshake_timeout: Duration::from_millis(100),
        ack_delay: Duration::from_millis(2),
        reconnect_min: Duration::from_millis(5),
        reconnect_max: Duration::from_millis(40),
    }
}

struct Medium {
    s: [Session<FuzzToken>; 2],
    wire: [VecDeque<Vec<u8>>; 2],
    link: bool,
    opened: bool,
    /// The accepting end took the link's Hello and waits for its proof.
    candidate: bool,
    now: Instant,
    nonce: u64,
    sent: [Vec<Vec<u8>>; 2],
    taken: [usize; 2],
}

impl Medium {
    fn drain(&mut self, i: usize) {
        while let Some(p) = self.s[i].poll_transmit() {
            if self.link {
                self.wire[1 - i].push_back(p);
            }
        }
        while let Some(e) = self.s[i].poll_event() {
            match e {
                SessionEvent::Connect if !self.link => {
                    self.link = true;
                    self.opened = false;
                    self.nonce += 1;
                    self.s[i].link_up(self.now, self.nonce);
                }
                SessionEvent::Down => self.cut(),
                SessionEvent::CandidateDown if i == 1 && self.candidate => self.cut(),
                _ => {}
            }
        }
    }

    fn cut(&mut self) {
        if self.link {
            self.link = false;
            self.candidate = false;
            self.wire = [VecDeque::new(), VecDeque::new()];
            for i in 0..2 {
                self.s[i].link_down(self.now);
            }
        }
    }

    /// Hands `p` to end `i` as the next packet of the link.
    fn hand(&mut self, i: usize, p: &[u8]) {
        let r = if i == 1 && !self.opened {
            self.opened = true;
            self.nonce += 1;
            let nonce = self.nonce;
            hello_of(p).and_then(|g| self.s[1].accept(self.now, &g, nonce)).map(|welcome| {
                self.candidate = true;
                if self.link {
                    self.wire[0].push_back(welcome.to_vec());
                }
            })
        } else if i == 1 && self.candidate {
            self.candidate = false;
            let (head, body) = p.split_at(head_len(p));
            self.s[1].handle_candidate(self.now, head, body)
        } else {
            self.s[i].handle_packet(self.now, p)
        };
        if r.is_err() {
            self.cut();
        }
        self.drain(i);
    }

    fn deliver(&mut self, i: usize) {
        if let Some(p) = self.wire[i].pop_front() {
            self.hand(i, &p);
        }
    }

    fn tick(&mut self, us: u64) {
        self.now = self.now + Duration(us);
        for i in 0..2 {
            if self.s[i].poll_timeout().is_some_and(|t| t <= self.now) {
                self.s[i].handle_timeout(self.now);
            }
            self.drain(i);
        }
    }

    fn take(&mut self, i: usize) {
        while let Some(f) = self.s[i].poll_recv() {
            let from = 1 - i;
            let n = self.taken[i];
            assert!(n < self.sent[from].len(), "end {i} took a frame {from} never sent");
            assert!(f == self.sent[from][n], "end {i} took frame {n} of {from} wrong or out of order");
            self.taken[i] += 1;
        }
        self.drain(i);
    }

    fn check(&self) {
        let o = options();
        for s in &self.s {
            let bytes_max = o.window_bytes_max.max(o.frame_len_max + DATA_OVERHEAD);
            assert!(s.unacked_bytes() <= bytes_max && s.unacked_frames() <= o.window_frames_max);
            assert!(s.received_frames() as u64 <= o.recv_frames_max);
            assert!(s.received_bytes() <= o.recv_bytes_max.max(o.frame_len_max));
        }
    }

    fn gone(&self) -> bool {
        self.s.iter().any(|s| s.failure().is_some() || s.is_closed())
    }
}

/// Runs the session pair on `data`; see the module docs. Returns how many frames the two ends
/// took (for tests of the target's reach).
pub fn session_ops(data: &[u8]) -> usize {
    let id = |me: u16, inc: u64| Identity { me: NodeId(me), digest: 9, incarnation: inc };
    let make = |me: u16, peer: u16| {
        Session::new(options(), id(me, u64::from(me) + 1), NodeId(peer), FuzzToken, Instant(0))
    };
    let (Ok(a), Ok(b)) = (make(0, 1), make(1, 0)) else { panic!("the fuzz options are valid") };
    let mut m = Medium {
        s: [a, b],
        wire: [VecDeque::new(), VecDeque::new()],
        link: false,
        opened: false,
        candidate: false,
        now: Instant(0),
        nonce: 0,
        sent: [Vec::new(), Vec::new()],
        taken: [0, 0],
    };
    for op in data.chunks(2).take(4096) {
        let (code, arg) = (op[0], op.get(1).copied().unwrap_or(0));
        let i = usize::from(code & 1);
        match (code >> 1) % 10 {
            0 => {
                let frame: Vec<u8> = (0..arg % 65).map(|j| j ^ arg ^ m.sent[i].len() as u8).collect();
                if m.s[i].send(&frame).is_ok() {
                    m.sent[i].push(frame);
                }
                m.drain(i);
            }
            1 | 2 => m.deliver(i),
            3 => {
                m.wire[i].pop_front();
            }
            4 => {
                if let Some(p) = m.wire[i].front().cloned() {
                    m.wire[i].push_front(p);
                }
            }
            5 => m.cut(),
            6 => m.tick(u64::from(arg) * 500),
            7 => m.take(i),
            8 => {
                if arg < 8 {
                    m.s[i].close(m.now);
                    m.drain(i);
                }
            }
            _ => {
                // Bytes that are no packet of the link (a forged valid one is not the
                // session's to catch: links are authenticated at their start only).
                let junk: Vec<u8> =
                    op.iter().chain(data.iter().take(usize::from(arg % 48))).copied().collect();
                let forged =
                    matches!(Packet::decode(&junk, usize::MAX), Ok(p) if !matches!(p, Packet::Hello(_)));
                if !forged && m.opened {
                    m.hand(i, &junk);
                }
            }
        }
        m.check();
    }
    // Heal: no more losses or cuts; everything sent must arrive unless an end went away.
    for _ in 0..20_000 {
        for i in 0..2 {
            while !m.wire[i].is_empty() {
                m.deliver(i);
            }
            m.take(i);
        }
        m.check();
        let done = (0..2).all(|i| m.taken[1 - i] == m.sent[i].len() && m.s[i].unacked_frames() == 0);
        if done || m.gone() {
            return m.taken[0] + m.taken[1];
        }
        m.tick(2_000);
    }
    panic!(
        "the healed medium did not deliver: taken {:?} of {:?}",
        m.taken,
        [m.sent[0].len(), m.sent[1].len()]
    );
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn session_ops_corpus() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/session_ops");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(files.len() >= 10, "the session_ops corpus is missing");
        for f in files {
            session_ops(&std::fs::read(&f).unwrap());
        }
    }

    #[test]
    fn session_ops_pseudo_random() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let (mut taken, mut busy) = (0, 0);
        for n in 0..3000 {
            let len = (n * 7) % 600;
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let t = session_ops(&data);
            taken += t;
            busy += usize::from(t >= 5);
        }
        // The generator reaches the interesting part: links come up and frames flow.
        assert!(
            busy > 1_000 && taken > 20_000,
            "{busy} inputs moved 5 frames or more; {taken} frames in all"
        );
    }
}
