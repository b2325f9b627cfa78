//! The session layer's packets on the medium: a 8-byte header (magic, version, kind), then the
//! kind's fixed fields, little-endian; a data packet's payload (one node frame) follows its
//! fields. The header and the fixed fields are the packet's *head*: a medium may carry a data
//! packet as one buffer or as its head and its payload in two parts (the bytes are the same),
//! so that the payload is never copied to put a head in front of it. Decoding checks every
//! length and value and never panics.

use alloc::vec::Vec;

use crate::ids::NodeId;

/// First bytes of every session packet.
pub const MAGIC: [u8; 4] = *b"PRMS";
/// The session protocol's version; a peer with another one is refused. Version 2: over
/// ZeroMQ, data packets with small frames may travel several to a message. Version 3: a Bye
/// names the first peer its sender lost.
pub const VERSION: u8 = 3;
/// Bytes of the header every packet starts with.
pub const HEADER_LEN: usize = 8;
/// Bytes of a proof of the cluster token.
pub const PROOF_LEN: usize = 32;
/// Bytes of a data packet before its payload: its head.
pub const DATA_OVERHEAD: usize = HEADER_LEN + 24;
/// Bytes of the longest head (a Welcome); every packet but a data packet is all head.
pub const HEAD_MAX: usize = HEADER_LEN + GREETING_LEN + PROOF_LEN;

/// What one end of a link says about itself when the link opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Greeting {
    /// The sender's node id.
    pub from: NodeId,
    /// The node id the sender believes it is talking to.
    pub to: NodeId,
    /// The digest of the sender's shared configuration; both ends must agree.
    pub digest: u64,
    /// The sender's incarnation: chosen at start, so a restarted peer shows a new one.
    pub incarnation: u64,
    /// A fresh random challenge the other end must prove the cluster token against.
    pub nonce: u64,
    /// The sequence number of the next data frame the sender expects from the other end.
    pub next: u64,
    /// The receiver may send data frames with sequence numbers below this.
    pub window: u64,
}

/// One session packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet {
    /// The connecting end opens the link.
    Hello(Greeting),
    /// The accepting end answers, proving the token against the Hello's nonce.
    Welcome(Greeting, [u8; PROOF_LEN]),
    /// The connecting end proves the token against the Welcome's nonce.
    Proof([u8; PROOF_LEN]),
    /// A node frame with its sequence number, and the sender's acknowledgement and window.
    Data { seq: u64, ack: u64, window: u64, payload: Vec<u8> },
    /// Acknowledgement and window alone; also the heartbeat.
    Ack { ack: u64, window: u64 },
    /// The sender closes the session cleanly: it did not fail. `lost` is the first peer the
    /// sender's transport lost before (crashed or silent, or named by another peer's Bye): a
    /// node that stops because a peer failed says which, so that the nodes it leaves behind
    /// can name the failure rather than the one who left.
    Bye { lost: Option<NodeId> },
}

/// Why bytes are not a session packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PacketError {
    /// Shorter than its kind requires, or longer than a fixed-size kind.
    Length,
    /// The first four bytes are not [`MAGIC`].
    Magic,
    /// Another session protocol version.
    Version { version: u8 },
    /// An unknown kind byte.
    Kind { kind: u8 },
    /// A data packet longer than the configured maximum.
    TooLong { len: usize },
    /// A field holds a value no packet of its kind carries (a Bye naming no possible node).
    Field,
}

impl core::fmt::Display for PacketError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PacketError::Length => f.write_str("session packet of the wrong length"),
            PacketError::Magic => f.write_str("not a parma session packet (bad magic)"),
            PacketError::Version { version } => {
                write!(f, "session protocol version {version}, this node speaks {VERSION}")
            }
            PacketError::Kind { kind } => write!(f, "unknown session packet kind {kind}"),
            PacketError::TooLong { len } => write!(f, "session packet of {len} bytes is over the limit"),
            PacketError::Field => f.write_str("session packet with a field out of range"),
        }
    }
}

impl core::error::Error for PacketError {}

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const PROOF: u8 = 3;
const DATA: u8 = 4;
const ACK: u8 = 5;
const BYE: u8 = 6;
const GREETING_LEN: usize = 2 + 2 + 8 * 5;

impl Packet {
    /// Bytes of the encoded packet.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Packet::Hello(_) => GREETING_LEN,
                Packet::Welcome(..) => GREETING_LEN + PROOF_LEN,
                Packet::Proof(_) => PROOF_LEN,
                Packet::Data { payload, .. } => 24 + payload.len(),
                Packet::Ack { .. } => 16,
                Packet::Bye { .. } => 4,
            }
    }

    /// The packet as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut head = [0u8; HEAD_MAX];
        let n = self.encode_head(&mut head);
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(&head[..n]);
        if let Packet::Data { payload, .. } = self {
            b.extend_from_slice(payload);
        }
        debug_assert_eq!(b.len(), self.encoded_len());
        b
    }

    /// Writes the packet's head into `out` (everything but a data packet's payload, which
    /// follows it on the medium); returns its length.
    pub fn encode_head(&self, out: &mut [u8; HEAD_MAX]) -> usize {
        let kind = match self {
            Packet::Hello(_) => HELLO,
            Packet::Welcome(..) => WELCOME,
            Packet::Proof(_) => PROOF,
            Packet::Data { .. } => DATA,
            Packet::Ack { .. } => ACK,
            Packet::Bye { .. } => BYE,
        };
        let mut w = Writer { out, n: 0 };
        w.put(&MAGIC);
        w.put(&[VERSION, kind, 0, 0]);
        match self {
            Packet::Hello(g) => greeting(&mut w, g),
            Packet::Welcome(g, proof) => {
                greeting(&mut w, g);
                w.put(proof);
            }
            Packet::Proof(proof) => w.put(proof),
            Packet::Data { seq, ack, window, .. } => {
                for x in [seq, ack, window] {
                    w.put(&x.to_le_bytes());
                }
            }
            Packet::Ack { ack, window } => {
                w.put(&ack.to_le_bytes());
                w.put(&window.to_le_bytes());
            }
            Packet::Bye { lost } => {
                // 0: nobody; n + 1: node n.
                let code = lost.map_or(0, |n| u32::from(n.0) + 1);
                w.put(&code.to_le_bytes());
            }
        }
        w.n
    }

    /// Whether `bytes` start with a valid header of a Hello, without decoding the rest.
    pub fn is_hello(bytes: &[u8]) -> Result<bool, PacketError> {
        header(bytes).map(|kind| kind == HELLO)
    }

    /// Decodes `bytes`; a data packet may be at most `len_max` bytes long. Reads the header
    /// before anything else, and allocates only the payload of a data packet within the limit.
    pub fn decode(bytes: &[u8], len_max: usize) -> Result<Packet, PacketError> {
        let k = head_len(bytes);
        let mut p = decode_head(&bytes[..k], bytes.len() - k, len_max)?;
        if let Packet::Data { payload, .. } = &mut p {
            *payload = bytes[k..].to_vec();
        }
        Ok(p)
    }
}

/// Where the head of the packet in `bytes` ends: a data packet's payload starts at
/// [`DATA_OVERHEAD`]; any other packet is all head. Looks at the kind byte only (decoding
/// checks the rest).
pub fn head_len(bytes: &[u8]) -> usize {
    if bytes.len() >= DATA_OVERHEAD && bytes[5] == DATA {
        DATA_OVERHEAD
    } else {
        bytes.len()
    }
}

/// Decodes a packet carried in two parts: `head`, then a body of `body_len` bytes (a data
/// packet's payload, which is not looked at; any other kind has none). A data packet's
/// payload comes back empty: the caller has it. A data packet may be at most `len_max`
/// bytes long, head included.
pub(crate) fn decode_head(head: &[u8], body_len: usize, len_max: usize) -> Result<Packet, PacketError> {
    header(head)?;
    let body = &head[HEADER_LEN..];
    let exact = |n: usize| if body.len() == n && body_len == 0 { Ok(()) } else { Err(PacketError::Length) };
    match head[5] {
        HELLO => {
            exact(GREETING_LEN)?;
            Ok(Packet::Hello(read_greeting(body)))
        }
        WELCOME => {
            exact(GREETING_LEN + PROOF_LEN)?;
            Ok(Packet::Welcome(read_greeting(body), proof(&body[GREETING_LEN..])))
        }
        PROOF => {
            exact(PROOF_LEN)?;
            Ok(Packet::Proof(proof(body)))
        }
        DATA => {
            let len = head.len().saturating_add(body_len);
            if len > len_max {
                return Err(PacketError::TooLong { len });
            }
            if body.len() != 24 {
                return Err(PacketError::Length);
            }
            Ok(Packet::Data {
                seq: u64_at(body, 0),
                ack: u64_at(body, 8),
                window: u64_at(body, 16),
                payload: Vec::new(),
            })
        }
        ACK => {
            exact(16)?;
            Ok(Packet::Ack { ack: u64_at(body, 0), window: u64_at(body, 8) })
        }
        BYE => {
            exact(4)?;
            let code = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
            let lost = match code {
                0 => None,
                n => Some(NodeId(u16::try_from(n - 1).map_err(|_| PacketError::Field)?)),
            };
            Ok(Packet::Bye { lost })
        }
        kind => Err(PacketError::Kind { kind }),
    }
}

/// Writes into a fixed buffer that is long enough for every head ([`HEAD_MAX`]).
struct Writer<'a> {
    out: &'a mut [u8; HEAD_MAX],
    n: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        // Every head fits in HEAD_MAX; a longer one would be this module's bug, and is cut.
        let end = (self.n + b.len()).min(HEAD_MAX);
        let take = end - self.n;
        self.out[self.n..end].copy_from_slice(&b[..take]);
        self.n = end;
    }
}

/// Checks the header; returns the kind byte.
fn header(bytes: &[u8]) -> Result<u8, PacketError> {
    if bytes.len() < HEADER_LEN {
        return Err(PacketError::Length);
    }
    if bytes[..4] != MAGIC {
        return Err(PacketError::Magic);
    }
    if bytes[4] != VERSION {
        return Err(PacketError::Version { version: bytes[4] });
    }
    Ok(bytes[5])
}

fn greeting(w: &mut Writer<'_>, g: &Greeting) {
    w.put(&g.from.0.to_le_bytes());
    w.put(&g.to.0.to_le_bytes());
    for x in [g.digest, g.incarnation, g.nonce, g.next, g.window] {
        w.put(&x.to_le_bytes());
    }
}

/// Reads a greeting from `b`, which holds at least `GREETING_LEN` bytes.
fn read_greeting(b: &[u8]) -> Greeting {
    Greeting {
        from: NodeId(u16::from_le_bytes([b[0], b[1]])),
        to: NodeId(u16::from_le_bytes([b[2], b[3]])),
        digest: u64_at(b, 4),
        incarnation: u64_at(b, 12),
        nonce: u64_at(b, 20),
        next: u64_at(b, 28),
        window: u64_at(b, 36),
    }
}

fn proof(b: &[u8]) -> [u8; PROOF_LEN] {
    let mut p = [0u8; PROOF_LEN];
    p.copy_from_slice(&b[..PROOF_LEN]);
    p
}

/// The little-endian `u64` at `at`; the caller checked that `b` holds it.
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}
