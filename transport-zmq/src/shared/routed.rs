//! The ROUTER's side of the shared state: connections peers (and strangers) open to this
//! node's port. A connection's first packet must be a Hello for one of this node's sessions;
//! the session answers it on that connection, and the connection becomes the session's link
//! only once it proves the token. Until then it is a *candidate*, beside the session's link,
//! which carries on as if nothing happened. Refusals of connections that never proved the
//! token are strangers refused, logged at the first, second, fourth, ... of each kind.

use std::collections::VecDeque;

use bytes::Bytes;
use parma_core::session::{hello_of, Refusal};
use parma_core::{Instant, NodeId};

use super::{Action, Link, Out, State};

/// The kind of refusals the ZMTP layer makes (not ZMTP, too slow, a frame over the bound).
const ZMTP: &str = "zmtp";

impl State {
    /// A connection to our ROUTER passed the ZMTP handshake: it has `handshake_timeout` to
    /// send its first packet (a Hello), or it is closed.
    pub fn routed_accepted(&mut self, identity: Bytes) {
        let deadline = self.now() + self.first_packet_within;
        if self.silent_ids.insert(identity.clone()) {
            self.silent.push_back((deadline, identity));
        }
    }

    /// Closes the connections to our ROUTER that said nothing in time (counted as
    /// handshakes timed out); when the next one is due.
    pub(super) fn close_silent(&mut self, now: Instant) -> Option<Instant> {
        while let Some((due, _)) = self.silent.front() {
            if *due > now {
                return Some(*due);
            }
            let Some((_, id)) = self.silent.pop_front() else { break };
            if self.silent_ids.remove(&id) && !self.routed.contains_key(&id) {
                self.counters.handshakes_timed_out += 1;
                self.to_close.push(id);
            }
        }
        None
    }

    /// A connection on our ROUTER closed.
    pub fn routed_lost(&mut self, identity: &[u8]) {
        self.silent_ids.remove(identity);
        let Some(&(peer, gen)) = self.routed.get(identity) else { return };
        let p = usize::from(peer.0);
        if matches!(&self.candidates[p], Some((g, _)) if *g == gen) {
            // A handshake beside the session's link ends with its connection; the session
            // gives it up at its handshake timeout.
            self.candidates[p] = None;
            self.routed.remove(identity);
            return;
        }
        self.link_lost(peer, gen, true);
    }

    /// A packet (`head` and `body`, see [`crate::shapes::packets`]) from the connection behind
    /// `identity` on our ROUTER. `Some(Close)`: close that connection now (its packets
    /// after this one are not to be read).
    pub fn routed_packet(&mut self, identity: Bytes, head: &[u8], body: Bytes) -> Option<Action> {
        self.silent_ids.remove(&identity);
        if let Some(&(peer, gen)) = self.routed.get(&identity) {
            let p = usize::from(peer.0);
            if matches!(&self.links[p], Link::Open { gen: g, .. } if *g == gen) {
                self.session_packet(peer, head, body);
                return None;
            }
            if matches!(&self.candidates[p], Some((g, _)) if *g == gen) {
                return self.candidate_packet(peer, identity, head, &body);
            }
            self.routed.remove(&identity);
            self.to_close.push(identity.clone());
        }
        // A connection we do not know: its first packet must be a Hello for a session of ours
        // that accepts (the peer has the lower id).
        let first = if body.is_empty() { hello_of(head) } else { Err(Refusal::NotHello) };
        let hello = match first {
            Ok(g) => g,
            Err(r) => {
                self.counters.strangers_refused += 1;
                self.log_stranger(&r);
                return Some(Action::Close { identity });
            }
        };
        let peer = hello.from;
        let acceptable = hello.to == self.me && peer < self.me && usize::from(peer.0) < self.sessions.len();
        if !acceptable {
            let r = Refusal::WrongPeer { claimed: peer, expected: self.me };
            self.counters.strangers_refused += 1;
            self.log_stranger(&r);
            return Some(Action::Close { identity });
        }
        let now = self.now();
        let nonce = rand::random();
        let Some(s) = self.session(peer) else {
            self.counters.strangers_refused += 1;
            return Some(Action::Close { identity });
        };
        // The session counts its own refusals (`strangers_refused` of its counters).
        let welcome = match s.accept(now, &hello, nonce) {
            Ok(w) => w,
            Err(r) => {
                self.log_stranger(&r);
                return Some(Action::Close { identity });
            }
        };
        // The Welcome goes back on this connection; the session's link, if any, stays. One
        // handshake at a time: the session forgot an earlier one still waiting.
        let p = usize::from(peer.0);
        if let Some((_, earlier)) = self.candidates[p].take() {
            self.routed.remove(&earlier);
            self.to_close.push(earlier);
        }
        let Some(router) = self.router.clone() else { return Some(Action::Close { identity }) };
        let mut out = Out::Router(router, identity.clone());
        if !out.queue(VecDeque::from([self.heads.cut(&[welcome.head()])])) {
            return Some(Action::Close { identity }); // the session gives it up in time
        }
        let gen = self.gen();
        self.candidates[p] = Some((gen, identity.clone()));
        self.routed.insert(identity, (peer, gen));
        None
    }

    /// The packet after the Hello on the candidate connection behind `identity`: its proof.
    fn candidate_packet(
        &mut self,
        peer: NodeId,
        identity: Bytes,
        head: &[u8],
        body: &[u8],
    ) -> Option<Action> {
        let p = usize::from(peer.0);
        let now = self.now();
        let (gen, _) = self.candidates[p].take()?;
        let Some(s) = self.session(peer) else {
            self.counters.strangers_refused += 1;
            return Some(Action::Close { identity });
        };
        match s.handle_candidate(now, head, body) {
            Ok(()) => {
                // Proved: this connection is the session's link now; the one before it goes.
                self.drop_link(peer);
                let Some(router) = self.router.clone() else { return Some(Action::Close { identity }) };
                let out = Out::Router(router, identity.clone());
                self.links[p] = Link::Open { gen, out, identity: Some(identity.clone()), _task: None };
                self.routed.insert(identity, (peer, gen));
                None
            }
            Err(r) => {
                self.routed.remove(&identity);
                if matches!(r, Refusal::Restarted | Refusal::Resume { .. }) {
                    // The token was proved: the peer itself, restarted or confused.
                    tracing::warn!(node = self.me.0, peer = peer.0, "refused a proved handshake: {r}");
                } else {
                    self.log_stranger(&r);
                }
                Some(Action::Close { identity })
            }
        }
    }

    /// A connection to our ROUTER that the ZMTP layer refused and dropped.
    pub fn refused_connection(&mut self) {
        self.counters.strangers_refused += 1;
        let n = self.count_kind(ZMTP);
        if n.is_power_of_two() {
            tracing::warn!(
                node = self.me.0,
                refused = n,
                "refused a connection at the ZMTP layer (not ZMTP, too slow, or a frame over the bound)"
            );
        }
    }

    /// Logs the refusal of a connection that is not a peer's (counted by whoever refused it),
    /// at the first, second, fourth, ... refusal of its kind.
    fn log_stranger(&mut self, why: &Refusal) {
        let kind = why.kind();
        let n = self.count_kind(kind);
        if n.is_power_of_two() {
            tracing::warn!(
                node = self.me.0,
                kind,
                refused = n,
                "refused a connection that is not a peer: {why}"
            );
        }
    }

    /// Counts one more refusal of `kind`; how many there were of it.
    fn count_kind(&mut self, kind: &'static str) -> u64 {
        let n = self.refusals_of.entry(kind).or_insert(0);
        *n += 1;
        *n
    }
}
