//! The rendezvous's messages and their framing: a u32 length (little-endian), then the body:
//! [`MAGIC`], the version (u16), the kind (u8) and the kind's fields. Integers are
//! little-endian; a string is a u16 length and UTF-8 bytes. Every read is bounded in size
//! (the reader says how long a frame it takes) and in time (a deadline), and every decode is
//! checked: nothing a peer sends makes it panic or allocate more than the bound.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use parma_core::config::NODES_MAX;
use parma_core::session::PROOF_LEN;
use parma_core::NodeId;

use super::rendezvous::Refusals;
use super::StartupError;

/// The first bytes of every message.
pub(crate) const MAGIC: [u8; 4] = *b"PRDV";
/// The protocol's version.
pub(crate) const VERSION: u16 = 1;
/// The longest advertised endpoint, in bytes.
pub const ENDPOINT_LEN_MAX: usize = 255;
/// Longest frame of a node's: a hello.
pub(crate) const HELLO_FRAME_MAX: usize = 64 + ENDPOINT_LEN_MAX;
/// Longest frame of the rendezvous's answers during the handshake.
pub(crate) const SHORT_FRAME_MAX: usize = 64 + 4 * ENDPOINT_LEN_MAX;
/// Longest frame a node reads once registered: a peer table of `NODES_MAX` longest endpoints,
/// or a refusal listing every rank.
pub(crate) const TABLE_FRAME_MAX: usize = 64 + NODES_MAX as usize * (2 + ENDPOINT_LEN_MAX);
/// "Assign me a rank" in a hello.
const RANK_ASSIGN: u16 = u16::MAX;

const HELLO: u8 = 1;
const CHALLENGE: u8 = 2;
const PROOF: u8 = 3;
const REGISTERED: u8 = 4;
const TABLE: u8 = 5;
const REFUSED: u8 = 6;

/// A node's registration, its first message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The node's challenge to the rendezvous.
    pub nonce: u64,
    /// `None`: assign one.
    pub rank: Option<NodeId>,
    pub world: u16,
    pub digest: u64,
    pub endpoint: String,
}

/// Every message.
#[derive(Debug)]
pub(crate) enum Msg {
    Hello(Hello),
    /// The rendezvous's proof over the hello and its own nonce, and that nonce.
    Challenge {
        nonce: u64,
        proof: [u8; PROOF_LEN],
    },
    /// The node's proof over the same.
    Proof {
        proof: [u8; PROOF_LEN],
    },
    /// The node is registered; the table follows once every node is.
    Registered,
    /// The peer table and the receiver's rank.
    Table {
        rank: NodeId,
        digest: u64,
        endpoints: Vec<String>,
    },
    /// The rendezvous refuses this node, or gives up: a refusal or abort reason.
    Refused(StartupError),
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed the connection (or reset it) before a whole frame.
    Closed,
    /// The deadline passed.
    TimedOut,
    /// The frame is longer than the reader takes, or its body is not a message.
    Malformed(&'static str),
    /// The peer speaks another version (a well-formed header otherwise).
    Version(u16),
}

impl Msg {
    /// The whole frame: length, then body.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Hello(h) => frame(HELLO, |b| {
                put_u64(b, h.nonce);
                put_u16(b, h.rank.map_or(RANK_ASSIGN, |r| r.0));
                put_u16(b, h.world);
                put_u64(b, h.digest);
                put_str(b, &h.endpoint);
            }),
            Msg::Challenge { nonce, proof } => frame(CHALLENGE, |b| {
                put_u64(b, *nonce);
                b.extend_from_slice(proof);
            }),
            Msg::Proof { proof } => frame(PROOF, |b| b.extend_from_slice(proof)),
            Msg::Registered => frame(REGISTERED, |_| {}),
            Msg::Table { rank, digest, endpoints } => frame(TABLE, |b| {
                put_u16(b, rank.0);
                put_u64(b, *digest);
                put_u16(b, endpoints.len() as u16);
                endpoints.iter().for_each(|e| put_str(b, e));
            }),
            Msg::Refused(reason) => refusal(reason),
        }
    }

    /// A message from a frame's body.
    pub(crate) fn decode(body: &[u8]) -> Result<Msg, ReadError> {
        let mut r = Reader(body);
        if r.bytes(4).ok() != Some(&MAGIC[..]) {
            return Err(ReadError::Malformed("not a rendezvous message"));
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(ReadError::Version(version));
        }
        let msg = match r.u8()? {
            HELLO => Msg::Hello(Hello {
                nonce: r.u64()?,
                rank: Some(r.u16()?).filter(|&r| r != RANK_ASSIGN).map(NodeId),
                world: r.u16()?,
                digest: r.u64()?,
                endpoint: r.string()?,
            }),
            CHALLENGE => Msg::Challenge { nonce: r.u64()?, proof: r.proof()? },
            PROOF => Msg::Proof { proof: r.proof()? },
            REGISTERED => Msg::Registered,
            TABLE => {
                let (rank, digest, n) = (NodeId(r.u16()?), r.u64()?, r.u16()?);
                let endpoints = (0..n).map(|_| r.string()).collect::<Result<Vec<_>, _>>()?;
                Msg::Table { rank, digest, endpoints }
            }
            REFUSED => Msg::Refused(get_reason(&mut r)?),
            _ => return Err(ReadError::Malformed("unknown message kind")),
        };
        if !r.0.is_empty() {
            return Err(ReadError::Malformed("bytes after the message"));
        }
        Ok(msg)
    }
}

/// The frame of a refusal (a [`Msg::Refused`] without owning the error).
pub(crate) fn refusal(reason: &StartupError) -> Vec<u8> {
    frame(REFUSED, |b| put_reason(b, reason))
}

/// A frame: the length, the header, then what `fields` writes.
fn frame(kind: u8, fields: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0];
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.push(kind);
    fields(&mut b);
    let len = (b.len() - 4) as u32;
    b[..4].copy_from_slice(&len.to_le_bytes());
    b
}

/// Whether `endpoint` can be advertised: 1 to [`ENDPOINT_LEN_MAX`] bytes, no control
/// characters (it is printed in errors).
pub(crate) fn check_endpoint(endpoint: &str) -> Result<(), &'static str> {
    if endpoint.is_empty() || endpoint.len() > ENDPOINT_LEN_MAX {
        return Err("must be 1 to 255 bytes long");
    }
    if endpoint.chars().any(char::is_control) {
        return Err("must not hold control characters");
    }
    Ok(())
}

/// Writes `msg` whole before `deadline`.
pub(crate) fn send(stream: &mut TcpStream, msg: &Msg, deadline: Instant) -> io::Result<()> {
    send_frame(stream, &msg.encode(), deadline)
}

/// Writes an encoded frame whole before `deadline`.
pub(crate) fn send_frame(stream: &mut TcpStream, frame: &[u8], deadline: Instant) -> io::Result<()> {
    let mut done = 0;
    while done < frame.len() {
        stream.set_write_timeout(Some(left(deadline)?))?;
        match stream.write(&frame[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one message of at most `len_max` bytes before `deadline`; the body is allocated
/// only once its length is known to be within `len_max`.
pub(crate) fn recv(stream: &mut TcpStream, len_max: usize, deadline: Instant) -> Result<Msg, ReadError> {
    let mut len = [0u8; 4];
    read_exact(stream, &mut len, deadline)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > len_max {
        return Err(ReadError::Malformed("a frame longer than allowed"));
    }
    let mut body = vec![0u8; len];
    read_exact(stream, &mut body, deadline)?;
    Msg::decode(&body)
}

fn read_exact(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), ReadError> {
    let mut done = 0;
    while done < buf.len() {
        let wait = left(deadline).map_err(|_| ReadError::TimedOut)?;
        stream.set_read_timeout(Some(wait)).map_err(|_| ReadError::Closed)?;
        match stream.read(&mut buf[done..]) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(ReadError::TimedOut)
            }
            Err(_) => return Err(ReadError::Closed),
        }
    }
    Ok(())
}

/// The time left until `deadline`; an error once it passed (a zero timeout would mean none).
fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    Ok(d)
}

const R_DIGEST: u8 = 1;
const R_WORLD: u8 = 2;
const R_OUTSIDE: u8 = 3;
const R_DUPLICATE: u8 = 4;
const R_MIXED: u8 = 5;
const R_MISSING: u8 = 6;
const R_VERSION: u8 = 7;

/// The errors a rendezvous tells a node; any other travels as a version refusal (none does).
fn put_reason(b: &mut Vec<u8>, e: &StartupError) {
    let rank = |r: &Option<NodeId>| r.map_or(RANK_ASSIGN, |r| r.0);
    match e {
        StartupError::DigestMismatch { rank: r, node, rendezvous } => {
            b.push(R_DIGEST);
            put_u16(b, rank(r));
            put_u64(b, *node);
            put_u64(b, *rendezvous);
        }
        StartupError::WorldMismatch { rank: r, node, rendezvous } => {
            b.push(R_WORLD);
            put_u16(b, rank(r));
            put_u16(b, *node);
            put_u16(b, *rendezvous);
        }
        StartupError::RankOutsideWorld { rank, world } => {
            b.push(R_OUTSIDE);
            put_u16(b, *rank);
            put_u16(b, *world);
        }
        StartupError::DuplicateRank { rank, first, second } => {
            b.push(R_DUPLICATE);
            put_u16(b, rank.0);
            put_str(b, first);
            put_str(b, second);
        }
        StartupError::MixedRanks => b.push(R_MIXED),
        StartupError::Missing { world, missing, registered, waited, refusals } => {
            b.push(R_MISSING);
            put_u16(b, *world);
            put_u16(b, *registered);
            put_u64(b, waited.as_millis() as u64);
            let r = refusals;
            [r.malformed, r.timed_out, r.unauthenticated, r.over_capacity]
                .iter()
                .for_each(|&n| put_u32(b, n));
            put_u16(b, missing.len() as u16);
            missing.iter().for_each(|r| put_u16(b, r.0));
        }
        // A refused version, the only other refusal: the rendezvous tells its own.
        _ => {
            b.push(R_VERSION);
            put_u16(b, VERSION);
        }
    }
}

fn get_reason(r: &mut Reader<'_>) -> Result<StartupError, ReadError> {
    let rank = |r: u16| Some(r).filter(|&r| r != RANK_ASSIGN).map(NodeId);
    Ok(match r.u8()? {
        R_DIGEST => {
            StartupError::DigestMismatch { rank: rank(r.u16()?), node: r.u64()?, rendezvous: r.u64()? }
        }
        R_WORLD => StartupError::WorldMismatch { rank: rank(r.u16()?), node: r.u16()?, rendezvous: r.u16()? },
        R_OUTSIDE => StartupError::RankOutsideWorld { rank: r.u16()?, world: r.u16()? },
        R_DUPLICATE => {
            StartupError::DuplicateRank { rank: NodeId(r.u16()?), first: r.string()?, second: r.string()? }
        }
        R_MIXED => StartupError::MixedRanks,
        R_MISSING => {
            let (world, registered, waited) = (r.u16()?, r.u16()?, Duration::from_millis(r.u64()?));
            let refusals = Refusals {
                malformed: r.u32()?,
                timed_out: r.u32()?,
                unauthenticated: r.u32()?,
                over_capacity: r.u32()?,
            };
            let n = r.u16()?;
            let missing = (0..n).map(|_| r.u16().map(NodeId)).collect::<Result<Vec<_>, _>>()?;
            StartupError::Missing { world, missing, registered, waited, refusals }
        }
        R_VERSION => StartupError::Version { addr: String::new(), theirs: r.u16()?, ours: VERSION },
        _ => return Err(ReadError::Malformed("unknown refusal")),
    })
}

fn put_u16(b: &mut Vec<u8>, x: u16) {
    b.extend_from_slice(&x.to_le_bytes());
}

fn put_u32(b: &mut Vec<u8>, x: u32) {
    b.extend_from_slice(&x.to_le_bytes());
}

fn put_u64(b: &mut Vec<u8>, x: u64) {
    b.extend_from_slice(&x.to_le_bytes());
}

/// A string of at most [`ENDPOINT_LEN_MAX`] bytes (longer ones are cut at a char boundary:
/// the callers check endpoints before).
fn put_str(b: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(ENDPOINT_LEN_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    put_u16(b, end as u16);
    b.extend_from_slice(&s.as_bytes()[..end]);
}

/// Checked reads from a body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        if self.0.len() < n {
            return Err(ReadError::Malformed("a truncated message"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ReadError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, ReadError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, ReadError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, ReadError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ReadError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn proof(&mut self) -> Result<[u8; PROOF_LEN], ReadError> {
        self.array()
    }

    fn string(&mut self) -> Result<String, ReadError> {
        let n = usize::from(self.u16()?);
        if n > ENDPOINT_LEN_MAX {
            return Err(ReadError::Malformed("a string longer than allowed"));
        }
        let s =
            std::str::from_utf8(self.bytes(n)?).map_err(|_| ReadError::Malformed("a string not in UTF-8"))?;
        Ok(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: &Msg) -> Msg {
        let f = m.encode();
        assert_eq!(u32::from_le_bytes(f[..4].try_into().unwrap()) as usize, f.len() - 4);
        Msg::decode(&f[4..]).unwrap()
    }

    #[test]
    fn messages_round_trip() {
        let h = Hello {
            nonce: 7,
            rank: Some(NodeId(3)),
            world: 9,
            digest: 0xdead,
            endpoint: "tcp://[::1]:1".into(),
        };
        assert!(matches!(round_trip(&Msg::Hello(h.clone())), Msg::Hello(x) if x == h));
        let h = Hello { rank: None, ..h };
        assert!(matches!(round_trip(&Msg::Hello(h.clone())), Msg::Hello(x) if x == h));
        assert!(
            matches!(round_trip(&Msg::Challenge { nonce: 5, proof: [9; 32] }), Msg::Challenge { nonce: 5, proof } if proof == [9; 32])
        );
        assert!(matches!(round_trip(&Msg::Registered), Msg::Registered));
        let t = Msg::Table { rank: NodeId(1), digest: 3, endpoints: vec!["a".into(), "b".into()] };
        assert!(
            matches!(round_trip(&t), Msg::Table { rank: NodeId(1), digest: 3, endpoints } if endpoints == ["a", "b"])
        );
        let missing = StartupError::Missing {
            world: 8,
            missing: vec![NodeId(3), NodeId(5)],
            registered: 6,
            waited: Duration::from_millis(1500),
            refusals: Refusals { malformed: 1, timed_out: 2, unauthenticated: 3, over_capacity: 4 },
        };
        let dup = StartupError::DuplicateRank { rank: NodeId(2), first: "x".into(), second: "y".into() };
        let digest = StartupError::DigestMismatch { rank: None, node: 1, rendezvous: 2 };
        for e in [
            missing,
            dup,
            digest,
            StartupError::MixedRanks,
            StartupError::RankOutsideWorld { rank: 9, world: 4 },
        ] {
            let want = e.to_string();
            match round_trip(&Msg::Refused(e)) {
                Msg::Refused(back) => assert_eq!(back.to_string(), want),
                m => panic!("{m:?}"),
            }
        }
    }

    #[test]
    fn every_prefix_and_every_corruption_is_an_error_not_a_panic() {
        let t = Msg::Table { rank: NodeId(1), digest: 3, endpoints: vec!["ab".into(), "cd".into()] };
        let f = t.encode();
        let body = &f[4..];
        for n in 0..body.len() {
            assert!(Msg::decode(&body[..n]).is_err(), "prefix {n}");
        }
        for i in 0..body.len() {
            for x in [0u8, 1, 0x7f, 0xff] {
                let mut b = body.to_vec();
                b[i] = x;
                let _ = Msg::decode(&b);
            }
        }
        let mut long = body.to_vec();
        long.push(0);
        assert!(matches!(Msg::decode(&long), Err(ReadError::Malformed("bytes after the message"))));
        let mut v2 = body.to_vec();
        v2[4] = 2;
        assert!(matches!(Msg::decode(&v2), Err(ReadError::Version(2))));
    }

    #[test]
    fn endpoints_are_bounded_and_printable() {
        assert!(check_endpoint("tcp://10.0.0.5:40123").is_ok());
        assert!(check_endpoint("").is_err());
        assert!(check_endpoint(&"x".repeat(256)).is_err());
        assert!(check_endpoint(&"x".repeat(255)).is_ok());
        assert!(check_endpoint("a\nb").is_err());
        assert!(
            TABLE_FRAME_MAX
                >= Msg::Table { rank: NodeId(0), digest: 0, endpoints: vec!["x".repeat(255); 4096] }
                    .encode()
                    .len()
                    - 4
        );
    }
}
