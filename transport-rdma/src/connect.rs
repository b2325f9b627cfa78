//! Connecting queue pairs: each pair of nodes exchanges its [`QpInfo`] over one short TCP
//! connection to the address the node advertised through the start-up's peer table
//! (`rdma://host:port`), authenticated with the cluster token.
//!
//! For the pair (i, j) with i < j, node i connects to j. Four messages, each of a fixed
//! length, each read with a deadline:
//!
//! 1. i → j `Hello`: magic, version, i, j, digest, nonce_i, i's `Terms`, i's `QpInfo`;
//! 2. j → i `Reply`: magic, version, j, i, digest, nonce_j, j's `Terms`, j's `QpInfo`, and
//!    j's proof `prove(nonce_i ^ h(terms_j, info_j), j, i, digest)`;
//! 3. i → j `Proof`: `prove(nonce_j ^ h(terms_i, info_i), i, j, digest)`;
//! 4. j → i `Ready`: one byte, sent once j's queue pair is ready to receive, so that i never
//!    sends into a queue pair that would drop its packets.
//!
//! The proofs cover the queue-pair information and the terms, so a stranger can neither join
//! nor change where a peer's frames go or what it agreed to. The terms are the options the
//! two ends must agree on for the nodes above the transport: the longest frame (equal on
//! both ends, as the ZeroMQ session's digest requires), and a heartbeat interval below the
//! other end's peer timeout (each end's timeout may differ; an end whose heartbeats come
//! less often than its peer gives up on it would be reported failed while alive). A connection that fails any check is closed and counted; the
//! node keeps waiting for the real peer until the deadline.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use parma_core::session::{Token, PROOF_LEN};
use parma_core::NodeId;

use crate::verbs::QpInfo;

const MAGIC: u32 = u32::from_le_bytes(*b"PRDM");
/// The handshake's and the wire's version: 4 since a hello carries its sender's terms (3: a
/// ring frame has a head and WRITEs may be packed; 2: the ring; 1: SEND/RECV only). Nodes of
/// different versions refuse each other.
const VERSION: u8 = 4;
/// magic 4, version 1, from 2, to 2, digest 8, nonce 8, terms 20, info 54.
const HELLO_LEN: usize = 4 + 1 + 2 + 2 + 8 + 8 + TERMS_LEN + INFO_LEN;
/// frame_len_max 4, heartbeat interval 8, peer timeout 8 (microseconds).
const TERMS_LEN: usize = 4 + 8 + 8;
const INFO_LEN: usize = 4 + 4 + 2 + 16 + 8 + 4 + 8 + 4;
const READY: u8 = 0x5a;

/// Who this node is in the handshake.
pub(crate) struct Me<'a> {
    pub id: NodeId,
    pub digest: u64,
    pub terms: Terms,
    pub token: &'a (dyn Token + Send + Sync),
}

/// The options a peer must be compatible with, as a hello carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Terms {
    /// The longest frame either end accepts: the same on both.
    pub frame_len_max: u32,
    /// How often this end writes its heartbeat, in microseconds.
    pub heartbeat_us: u64,
    /// How long this end waits for a silent peer, in microseconds.
    pub peer_timeout_us: u64,
}

impl Terms {
    /// The terms of `o` (validated: `frame_len_max` fits 32 bits).
    pub(crate) fn of(o: &crate::RdmaOptions) -> Terms {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Terms {
            frame_len_max: u32::try_from(o.frame_len_max).unwrap_or(u32::MAX),
            heartbeat_us: us(o.heartbeat_interval),
            peer_timeout_us: us(o.peer_timeout),
        }
    }

    fn encode(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.frame_len_max.to_le_bytes());
        b.extend_from_slice(&self.heartbeat_us.to_le_bytes());
        b.extend_from_slice(&self.peer_timeout_us.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Terms {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        Terms {
            frame_len_max: u32::from_le_bytes(b[0..4].try_into().unwrap_or([0; 4])),
            heartbeat_us: u64_at(4),
            peer_timeout_us: u64_at(12),
        }
    }

    /// Whether a peer with terms `theirs` may pair with this end; why not, if not.
    fn admit(&self, theirs: &Terms) -> Result<(), String> {
        if theirs.frame_len_max != self.frame_len_max {
            return Err(format!(
                "its frame_len_max is {} bytes, this node's {}: they must be equal",
                theirs.frame_len_max, self.frame_len_max
            ));
        }
        let ms = |us: u64| us as f64 / 1000.0;
        if theirs.heartbeat_us >= self.peer_timeout_us {
            return Err(format!(
                "its heartbeat interval ({} ms) is not below this node's peer timeout ({} ms): \
                 this node would report it failed while alive",
                ms(theirs.heartbeat_us),
                ms(self.peer_timeout_us)
            ));
        }
        if self.heartbeat_us >= theirs.peer_timeout_us {
            return Err(format!(
                "its peer timeout ({} ms) is not above this node's heartbeat interval ({} ms): \
                 it would report this node failed while alive",
                ms(theirs.peer_timeout_us),
                ms(self.heartbeat_us)
            ));
        }
        Ok(())
    }
}

/// `rdma://host:port` → the socket address.
pub(crate) fn parse_endpoint(e: &str) -> Result<SocketAddr, String> {
    let rest = e.strip_prefix("rdma://").ok_or_else(|| format!("{e:?} does not start with rdma://"))?;
    rest.to_socket_addrs()
        .map_err(|err| format!("{e:?}: {err}"))?
        .next()
        .ok_or_else(|| format!("{e:?} names no address"))
}

fn encode_info(b: &mut Vec<u8>, q: &QpInfo) {
    b.extend_from_slice(&q.qpn.to_le_bytes());
    b.extend_from_slice(&q.psn.to_le_bytes());
    b.extend_from_slice(&q.lid.to_le_bytes());
    b.extend_from_slice(&q.gid);
    b.extend_from_slice(&q.mailbox_addr.to_le_bytes());
    b.extend_from_slice(&q.mailbox_rkey.to_le_bytes());
    b.extend_from_slice(&q.ring_addr.to_le_bytes());
    b.extend_from_slice(&q.ring_rkey.to_le_bytes());
}

fn decode_info(b: &[u8]) -> QpInfo {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[10..26]);
    QpInfo {
        qpn: u32_at(0),
        psn: u32_at(4),
        lid: u16::from_le_bytes([b[8], b[9]]),
        gid,
        mailbox_addr: u64::from_le_bytes(b[26..34].try_into().unwrap_or([0; 8])),
        mailbox_rkey: u32_at(34),
        ring_addr: u64::from_le_bytes(b[38..46].try_into().unwrap_or([0; 8])),
        ring_rkey: u32_at(46),
    }
}

/// A 64-bit FNV-1a hash of the terms and the information, mixed into the nonce a proof covers.
fn offer_hash(t: &Terms, q: &QpInfo) -> u64 {
    let mut b = Vec::with_capacity(TERMS_LEN + INFO_LEN);
    t.encode(&mut b);
    encode_info(&mut b, q);
    parma_core::fnv1a(&b)
}

fn hello(from: NodeId, to: NodeId, digest: u64, nonce: u64, terms: &Terms, info: &QpInfo) -> Vec<u8> {
    let mut b = Vec::with_capacity(HELLO_LEN + PROOF_LEN);
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.push(VERSION);
    b.extend_from_slice(&from.0.to_le_bytes());
    b.extend_from_slice(&to.0.to_le_bytes());
    b.extend_from_slice(&digest.to_le_bytes());
    b.extend_from_slice(&nonce.to_le_bytes());
    terms.encode(&mut b);
    encode_info(&mut b, info);
    b
}

/// A checked hello or reply: (from, nonce, its terms, info); whether the terms are admitted
/// is the caller's to check ([`Terms::admit`]). `b` is at least `HELLO_LEN` bytes long (the
/// callers read exactly that many).
fn check_hello(b: &[u8], to: NodeId, digest: u64) -> Result<(NodeId, u64, Terms, QpInfo), String> {
    if u32::from_le_bytes([b[0], b[1], b[2], b[3]]) != MAGIC || b[4] != VERSION {
        return Err("not a parma RDMA handshake (magic or version)".into());
    }
    let from = NodeId(u16::from_le_bytes([b[5], b[6]]));
    let claimed_to = NodeId(u16::from_le_bytes([b[7], b[8]]));
    if claimed_to != to {
        return Err(format!("addressed to node {} instead of node {}", claimed_to.0, to.0));
    }
    let d = u64::from_le_bytes(b[9..17].try_into().unwrap_or([0; 8]));
    if d != digest {
        return Err(format!("configuration digest {d:#x}, this node's is {digest:#x}"));
    }
    let nonce = u64::from_le_bytes(b[17..25].try_into().unwrap_or([0; 8]));
    Ok((
        from,
        nonce,
        Terms::decode(&b[25..25 + TERMS_LEN]),
        decode_info(&b[25 + TERMS_LEN..25 + TERMS_LEN + INFO_LEN]),
    ))
}

fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "handshake timed out"));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed during the handshake")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn write_by(s: &mut TcpStream, b: &[u8], deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    s.set_write_timeout(Some(left))?;
    s.write_all(b)
}

/// Node `me` (the lower id) connects to `peer` at `addr`. Once the peer's proof passed,
/// `connect` moves this node's queue pair to RTR and RTS (before this node's proof goes out,
/// so that it can receive as soon as the peer can send); returns once the peer is ready too.
pub(crate) fn dial(
    me: &Me<'_>,
    peer: NodeId,
    addr: SocketAddr,
    mine: &QpInfo,
    connect: &mut dyn FnMut(&QpInfo) -> Result<(), String>,
    deadline: Instant,
) -> Result<QpInfo, String> {
    let mut last = String::from("no attempt");
    // The peer listened before the table went out, so a refusal is a dead or wrong peer;
    // still, retry briefly for a listener whose backlog was full.
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(2))) {
            Ok(mut s) => match dial_on(&mut s, me, peer, mine, connect, deadline) {
                Ok(info) => return Ok(info),
                Err(e) => return Err(format!("node {} at {addr}: {e}", peer.0)),
            },
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("node {} at {addr}: cannot connect: {last}", peer.0))
}

fn dial_on(
    s: &mut TcpStream,
    me: &Me<'_>,
    peer: NodeId,
    mine: &QpInfo,
    connect: &mut dyn FnMut(&QpInfo) -> Result<(), String>,
    deadline: Instant,
) -> Result<QpInfo, String> {
    let e = |x: io::Error| x.to_string();
    s.set_nodelay(true).map_err(e)?;
    let nonce: u64 = rand::random();
    write_by(s, &hello(me.id, peer, me.digest, nonce, &me.terms, mine), deadline).map_err(e)?;
    let mut reply = [0u8; HELLO_LEN + PROOF_LEN];
    read_exact_by(s, &mut reply, deadline).map_err(e)?;
    let (from, their_nonce, their_terms, theirs) = check_hello(&reply, me.id, me.digest)?;
    if from != peer {
        return Err(format!("answered as node {}", from.0));
    }
    let expect = me.token.prove(nonce ^ offer_hash(&their_terms, &theirs), peer, me.id, me.digest);
    if reply[HELLO_LEN..] != expect[..] {
        return Err("its proof of the cluster token is wrong".into());
    }
    me.terms.admit(&their_terms)?;
    connect(&theirs)?;
    let proof = me.token.prove(their_nonce ^ offer_hash(&me.terms, mine), me.id, peer, me.digest);
    write_by(s, &proof, deadline).map_err(e)?;
    let mut ready = [0u8; 1];
    read_exact_by(s, &mut ready, deadline).map_err(e)?;
    if ready[0] != READY {
        return Err("bad ready byte".into());
    }
    Ok(theirs)
}

/// What a node accepting connections needs for each peer of a lower id.
pub(crate) trait Acceptor {
    /// This node's information for `peer`, if `peer` is one this node waits for.
    fn info_for(&self, peer: NodeId) -> Option<QpInfo>;
    /// Connects this node's queue pair for `peer` to `theirs` (RTR and RTS).
    fn connect(&mut self, peer: NodeId, theirs: &QpInfo) -> Result<(), String>;
}

/// Accepts on `listener` until every peer `acceptor` waits for (`waiting` of them) has
/// connected, or the deadline. Connections that fail the handshake are closed and counted in
/// `refused`; the deadline's error names the last refusal. Returns the peers that connected,
/// in order.
pub(crate) fn accept_all(
    listener: &TcpListener,
    me: &Me<'_>,
    acceptor: &mut dyn Acceptor,
    waiting: usize,
    deadline: Instant,
    refused: &mut u64,
) -> Result<Vec<NodeId>, String> {
    let mut done: Vec<NodeId> = Vec::new();
    let mut last_refusal = None;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    while done.len() < waiting {
        if Instant::now() >= deadline {
            let why = last_refusal.map(|r| format!("; the last connection refused: {r}")).unwrap_or_default();
            return Err(format!("{} of {waiting} lower-numbered peers connected in time{why}", done.len()));
        }
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(format!("accept: {e}")),
        };
        // One connection at a time, each with at most a second of its own: a stranger that
        // stalls cannot hold up the peers for long.
        let by = deadline.min(Instant::now() + Duration::from_secs(1));
        match accept_one(&mut s, me, acceptor, by, &done) {
            Ok(peer) => done.push(peer),
            Err(why) => {
                *refused += 1;
                last_refusal = Some(why);
            }
        }
    }
    Ok(done)
}

fn accept_one(
    s: &mut TcpStream,
    me: &Me<'_>,
    acceptor: &mut dyn Acceptor,
    deadline: Instant,
    done: &[NodeId],
) -> Result<NodeId, String> {
    let e = |x: io::Error| x.to_string();
    s.set_nonblocking(false).map_err(e)?;
    s.set_nodelay(true).map_err(e)?;
    let mut h = [0u8; HELLO_LEN];
    read_exact_by(s, &mut h, deadline).map_err(e)?;
    let (peer, their_nonce, their_terms, theirs) = check_hello(&h, me.id, me.digest)?;
    if done.contains(&peer) {
        return Err(format!("node {} connected twice", peer.0));
    }
    let mine = acceptor.info_for(peer).ok_or_else(|| format!("node {} is not expected here", peer.0))?;
    let nonce: u64 = rand::random();
    let mut reply = hello(me.id, peer, me.digest, nonce, &me.terms, &mine);
    reply.extend_from_slice(&me.token.prove(
        their_nonce ^ offer_hash(&me.terms, &mine),
        me.id,
        peer,
        me.digest,
    ));
    write_by(s, &reply, deadline).map_err(e)?;
    // Refused only now, after the reply, so that the dialer learns this node's terms and
    // says why too.
    me.terms.admit(&their_terms).map_err(|why| format!("node {}: {why}", peer.0))?;
    let mut proof = [0u8; PROOF_LEN];
    read_exact_by(s, &mut proof, deadline).map_err(e)?;
    if proof != me.token.prove(nonce ^ offer_hash(&their_terms, &theirs), peer, me.id, me.digest) {
        return Err(format!("node {}'s proof of the cluster token is wrong", peer.0));
    }
    acceptor.connect(peer, &theirs)?;
    write_by(s, &[READY], deadline).map_err(e)?;
    Ok(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_survives_encoding() {
        let q = QpInfo {
            qpn: 0x12345,
            psn: 0xabcdef,
            lid: 7,
            gid: [9; 16],
            mailbox_addr: 1 << 40,
            mailbox_rkey: 42,
            ring_addr: 3 << 33,
            ring_rkey: 77,
        };
        let mut b = Vec::new();
        encode_info(&mut b, &q);
        assert_eq!(b.len(), INFO_LEN);
        assert_eq!(decode_info(&b), q);
        let t = Terms { frame_len_max: 1 << 20, heartbeat_us: 100_000, peer_timeout_us: 1_000_000 };
        let h = hello(NodeId(1), NodeId(2), 0xd1, 5, &t, &q);
        assert_eq!(h.len(), HELLO_LEN);
        assert_eq!(check_hello(&h, NodeId(2), 0xd1), Ok((NodeId(1), 5, t, q)));
        assert!(check_hello(&h, NodeId(3), 0xd1).is_err());
        assert!(check_hello(&h, NodeId(2), 0xd2).is_err());
        let mut bad = h.clone();
        bad[0] ^= 1;
        assert!(check_hello(&bad, NodeId(2), 0xd1).is_err());
    }

    /// Equal longest frames, and each end's heartbeats more often than the other gives up:
    /// the peer timeouts themselves may differ.
    #[test]
    fn terms_admit_a_compatible_peer_and_say_why_not_otherwise() {
        let me = Terms { frame_len_max: 1 << 20, heartbeat_us: 100_000, peer_timeout_us: 1_000_000 };
        assert_eq!(me.admit(&me), Ok(()));
        let patient = Terms { peer_timeout_us: 30_000_000, ..me };
        assert_eq!(me.admit(&patient), Ok(()));
        assert_eq!(patient.admit(&me), Ok(()));
        let longer = Terms { frame_len_max: 16 << 20, ..me };
        let why = me.admit(&longer).unwrap_err();
        assert!(why.contains("frame_len_max is 16777216 bytes, this node's 1048576"), "{why}");
        let slow = Terms { heartbeat_us: 2_000_000, peer_timeout_us: 30_000_000, ..me };
        let why = me.admit(&slow).unwrap_err();
        assert!(
            why.contains("heartbeat interval (2000 ms) is not below this node's peer timeout (1000 ms)"),
            "{why}"
        );
        let why = slow.admit(&me).unwrap_err();
        assert!(
            why.contains("peer timeout (1000 ms) is not above this node's heartbeat interval (2000 ms)"),
            "{why}"
        );
        let o = crate::RdmaOptions::loopback();
        let of = Terms::of(&o);
        assert_eq!(of.frame_len_max as usize, o.frame_len_max);
        assert_eq!(of.heartbeat_us, o.heartbeat_interval.as_micros() as u64);
        assert_eq!(of.admit(&of), Ok(()));
    }

    #[test]
    fn endpoints_parse() {
        assert_eq!(parse_endpoint("rdma://127.0.0.1:4000").unwrap(), "127.0.0.1:4000".parse().unwrap());
        assert!(parse_endpoint("tcp://127.0.0.1:4000").is_err());
        assert!(parse_endpoint("rdma://nowhere").is_err());
    }
}
