//! Clients that are not nodes: raw TCP, a hand-written ZMTP handshake, and a `zeromq`
//! DEALER speaking session packets.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use parma_core::session::{Greeting, Packet};
use parma_core::NodeId;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// A ZMTP 3.0 greeting (NULL mechanism, client) and a READY command of a DEALER.
pub fn zmtp_handshake() -> Vec<u8> {
    let mut g = [0u8; 64];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[12..16].copy_from_slice(b"NULL");
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&6u32.to_be_bytes());
    body.extend_from_slice(b"DEALER");
    let mut out = g.to_vec();
    out.extend_from_slice(&[0x04, body.len() as u8]);
    out.extend_from_slice(&body);
    out
}

/// The header of a message frame (last of its message) claiming `len` bytes: the long form,
/// flag 0x02 and 8 bytes of length, big-endian.
pub fn long_frame_header(len: u64) -> [u8; 9] {
    let mut h = [0u8; 9];
    h[0] = 0x02;
    h[1..].copy_from_slice(&len.to_be_bytes());
    h
}

/// Connects to `addr` and completes the ZMTP handshake by hand: sends ours, reads the
/// node's greeting and READY.
pub fn zmtp_connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(&zmtp_handshake())?;
    let mut head = [0u8; 66];
    s.read_exact(&mut head)?;
    if head[0] != 0xff || head[64] != 0x04 {
        return Err(std::io::Error::new(ErrorKind::InvalidData, "not a ZMTP greeting and READY"));
    }
    let mut ready = vec![0u8; usize::from(head[65])];
    s.read_exact(&mut ready)?;
    Ok(s)
}

/// Whether the other end closes `s` within `limit` (reading and dropping what it sends).
pub fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// A Hello as node `from` would send it to node `to`.
pub fn hello(from: u16, to: u16, digest: u64, next: u64) -> Vec<u8> {
    Packet::Hello(Greeting {
        from: NodeId(from),
        to: NodeId(to),
        digest,
        incarnation: 0x0bad_0bad,
        nonce: 7,
        next,
        window: 1 + 1024,
    })
    .encode()
}

/// What a stranger's DEALER got back.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Nothing within the time allowed.
    Nothing,
    /// A session packet of this kind (`Welcome`, ...).
    Packet(&'static str),
    /// Bytes that are no session packet.
    Other,
}

/// Connects a `zeromq` DEALER to `endpoint`, sends `first`, waits up to 1 s for an answer;
/// if the answer is a Welcome, sends `then` (a Proof, say) and waits 200 ms more.
pub fn dealer_says(endpoint: &str, first: Vec<u8>, then: Option<Vec<u8>>) -> Answer {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(async {
        let mut s = DealerSocket::new();
        tokio::time::timeout(Duration::from_secs(2), s.connect(endpoint))
            .await
            .expect("the stranger connects in time")
            .expect("the stranger connects");
        s.send(ZmqMessage::from(first)).await.expect("the stranger sends");
        let answer = match tokio::time::timeout(Duration::from_secs(1), s.recv()).await {
            Ok(Ok(m)) => match m.get(0).map(|b| Packet::decode(b, 1 << 20)) {
                Some(Ok(p)) => Answer::Packet(kind(&p)),
                _ => Answer::Other,
            },
            _ => Answer::Nothing,
        };
        if let (Answer::Packet("Welcome"), Some(then)) = (&answer, then) {
            s.send(ZmqMessage::from(then)).await.expect("the stranger sends");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        answer
    })
}

fn kind(p: &Packet) -> &'static str {
    match p {
        Packet::Hello(_) => "Hello",
        Packet::Welcome(..) => "Welcome",
        Packet::Proof(_) => "Proof",
        Packet::Data { .. } => "Data",
        Packet::Ack { .. } => "Ack",
        Packet::Bye { .. } => "Bye",
    }
}
