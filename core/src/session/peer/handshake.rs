//! The accepting end's handshake, beside the session's link: a Hello from a link the peer
//! opened is answered at once, but nothing of the session (its link, sequence numbers,
//! retransmission buffer, timers, the peer's incarnation) changes until that link proves the
//! token. Only then does it replace the session's link. And the checks both ends make of a
//! greeting, a proof and a resumption.

use super::super::outbound::Outbound;
use super::super::packet::{decode_head, Greeting, Packet, DATA_OVERHEAD, PROOF_LEN};
use super::{packet_name, Candidate, Link, Session};
use crate::session::{FailCause, Refusal, SessionEvent, Token};
use crate::time::{Duration, Instant};

impl<T: Token> Session<T> {
    /// A Hello from the peer opened a new link (decode the first packet of an unknown link
    /// with [`super::super::hello_of`] to find its peer); `nonce` is fresh randomness from the
    /// driver. On `Ok`, put the returned Welcome on that link and hand its next packet to
    /// [`Session::handle_candidate`]; the session's own link, if any, stays as it is. On `Err`
    /// close the new link: nothing changed but the counters.
    ///
    /// Anyone can send a Hello: until its link proves the token, it changes nothing of the
    /// session. What it says about the peer's state (a restart, where to resume) counts once
    /// the token is proved. A Hello while the session's link is up and heard from within two
    /// heartbeat intervals is refused ([`Refusal::LinkAlive`]); after longer silence (the
    /// peer's old connection died unnoticed here, or the peer is paused) it gets its Welcome,
    /// and the session's link carries on beside it until the new link proves the token. One
    /// handshake at a time: a newer Hello takes the place of an earlier one still waiting for
    /// its proof (close that earlier link).
    pub fn accept(&mut self, now: Instant, hello: &Greeting, nonce: u64) -> Result<Outbound, Refusal> {
        self.now = now;
        if let Err(r) = self.check_greeting(hello) {
            return Err(self.refuse_stranger(r));
        }
        if !self.is_open() {
            return Err(self.refuse_stranger(Refusal::Closed));
        }
        let alive = Duration(self.opts.heartbeat_interval.0.saturating_mul(2));
        if self.link == Link::Up && now - self.last_heard < alive {
            return Err(self.refuse_stranger(Refusal::LinkAlive));
        }
        let proof = self.token.prove(hello.nonce, self.id.me, self.peer, self.id.digest);
        let welcome = Outbound::of(&Packet::Welcome(self.greeting(nonce), proof), None);
        self.candidate = Some(Candidate { nonce, since: now, hello: *hello });
        // Counted as sent, but not as the session's link speaking: its heartbeats keep their
        // time.
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += welcome.len() as u64;
        Ok(welcome)
    }

    /// The packet after the Hello on the link [`Session::accept`] took (its head and body, as
    /// for [`Session::handle_parts`]): it must be the Proof. On `Ok` the token is proved and
    /// that link is now the session's link: close the session's previous link, if any, and
    /// drain [`Session::poll_transmit`] onto the new one from now on. On `Err` close the new
    /// link. A handshake refused before its proof passed changes nothing of the session but
    /// [`SessionStats::strangers_refused`](super::super::SessionStats::strangers_refused);
    /// one whose proof passed may still find that the peer restarted (the session fails:
    /// [`Refusal::Restarted`]) or claims frames never sent ([`Refusal::Resume`], the session's
    /// link stays).
    pub fn handle_candidate(&mut self, now: Instant, head: &[u8], body: &[u8]) -> Result<(), Refusal> {
        self.now = now;
        let packet = match decode_head(head, body.len(), self.opts.frame_len_max + DATA_OVERHEAD) {
            Ok(p) => p,
            Err(e) => {
                self.candidate = None;
                return Err(self.refuse_stranger(Refusal::Malformed(e)));
            }
        };
        let Some(c) = self.candidate.take() else {
            // No handshake waits (it timed out, or a newer Hello took its place).
            return Err(self.refuse_stranger(Refusal::Unexpected { kind: packet_name(&packet) }));
        };
        let Packet::Proof(proof) = packet else {
            return Err(self.refuse_stranger(Refusal::Unexpected { kind: packet_name(&packet) }));
        };
        if !self.proof_ok(c.nonce, &proof) {
            return Err(self.refuse_stranger(Refusal::Token));
        }
        if !self.is_open() {
            return Err(self.refuse_stranger(Refusal::Closed));
        }
        // Proved: the peer's greeting counts now, and its link replaces the session's.
        self.stats.packets_received += 1;
        self.resume(&c.hello)?;
        if self.link == Link::Up {
            self.stats.links_lost += 1;
        }
        self.control.clear();
        self.last_heard = now;
        self.link_ready();
        Ok(())
    }

    /// Gives up a handshake on a link the peer opened that did not prove the token within
    /// `handshake_timeout`: the driver closes that link.
    pub(super) fn candidate_timeout(&mut self, now: Instant) {
        if self.candidate.is_some_and(|c| now - c.since >= self.opts.handshake_timeout) {
            self.candidate = None;
            self.stats.handshakes_timed_out += 1;
            self.events.push_back(SessionEvent::CandidateDown);
        }
    }

    pub(super) fn check_greeting(&self, g: &Greeting) -> Result<(), Refusal> {
        if g.from != self.peer || g.to != self.id.me {
            let claimed = if g.from != self.peer { g.from } else { g.to };
            let expected = if g.from != self.peer { self.peer } else { self.id.me };
            return Err(Refusal::WrongPeer { claimed, expected });
        }
        if g.digest != self.id.digest {
            return Err(Refusal::Digest { theirs: g.digest, ours: self.id.digest });
        }
        Ok(())
    }

    pub(super) fn proof_ok(&self, nonce: u64, proof: &[u8; PROOF_LEN]) -> bool {
        let want = self.token.prove(nonce, self.peer, self.id.me, self.id.digest);
        // Constant time: every byte is compared whatever the first difference.
        want.iter().zip(proof).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// The peer's greeting says where it stands: drop what it has, send the rest again. A new
    /// incarnation, or a peer that lost frames it had acknowledged, failed (it restarted).
    /// Checks everything before it changes anything: on [`Refusal::Resume`] nothing changed.
    pub(super) fn resume(&mut self, g: &Greeting) -> Result<(), Refusal> {
        if let Some(inc) = self.peer_incarnation {
            if inc != g.incarnation {
                self.fail(FailCause::Restarted);
                return Err(Refusal::Restarted);
            }
        }
        if g.next < self.acked {
            self.fail(FailCause::Restarted);
            return Err(Refusal::Restarted);
        }
        if g.next > self.next_seq {
            return Err(self.refuse(Refusal::Resume { next: g.next, sent: self.next_seq }));
        }
        self.peer_incarnation = Some(g.incarnation);
        self.release(g.next);
        self.sent_upto = g.next;
        self.peer_window = self.peer_window.max(g.window);
        Ok(())
    }

    /// Counts a refused handshake of a link the peer opened; the driver closes that link.
    fn refuse_stranger(&mut self, r: Refusal) -> Refusal {
        self.stats.strangers_refused += 1;
        r
    }
}
