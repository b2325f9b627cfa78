//! A node's side of the rendezvous: connect (again and again, with backoff, until the
//! rendezvous is up or the timeout passes), register, and wait for the peer table.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use parma_core::NodeId;

use super::launch::Role;
use super::wire::{self, Hello, Msg, ReadError, SHORT_FRAME_MAX, TABLE_FRAME_MAX};
use super::{ClusterToken, Launch, PeerTable, RendezvousAddr, StartupError};

/// Longest one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the handshake (hello to acknowledgement) may take once connected.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// First wait between attempts; doubles up to `BACKOFF_MAX`.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest wait between attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Once registered, how much longer than its own timeout a node waits for the table: long
/// enough for the rendezvous's own timeout error (which names the missing ranks) to arrive
/// when it started a little after this node.
const TABLE_GRACE: Duration = Duration::from_secs(2);

/// Registers this node (`launch`'s rank, or "assign me one") at `launch`'s rendezvous,
/// advertising `advertised` (an endpoint of the transport, opaque here: 1 to 255 bytes
/// without control characters), and returns the peer table once every node registered.
/// Retries connecting until the rendezvous answers (it may start after this node) or
/// `timeout` passes.
pub fn join(
    launch: &Launch,
    advertised: &str,
    digest: u64,
    token: &ClusterToken,
    timeout: Duration,
) -> Result<PeerTable, StartupError> {
    if launch.role() != Role::Node {
        return Err(StartupError::NotANode { role: launch.role() });
    }
    join_at(launch.rendezvous(), launch.rank(), launch.world(), advertised, digest, token, timeout)
}

/// [`join`] with every field of the hello given (tests give ones a launch would refuse).
pub(crate) fn join_at(
    addr: &RendezvousAddr,
    rank: Option<NodeId>,
    world: u16,
    advertised: &str,
    digest: u64,
    token: &ClusterToken,
    timeout: Duration,
) -> Result<PeerTable, StartupError> {
    wire::check_endpoint(advertised)
        .map_err(|why| StartupError::BadEndpoint { endpoint: advertised.to_string(), why })?;
    let started = Instant::now();
    let deadline = started + timeout;
    let mut backoff = BACKOFF_MIN;
    loop {
        let hello = Hello { nonce: rand::random(), rank, world, digest, endpoint: advertised.to_string() };
        let last = match attempt(addr, &hello, token, started, deadline) {
            Ok(table) => return Ok(table),
            Err(Attempt::Fatal(e)) => return Err(e),
            Err(Attempt::Retry(why)) => why,
        };
        // Tries again while time is left, the last time right before the deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            thread::sleep(backoff.min(left));
        }
        if Instant::now() >= deadline {
            return Err(StartupError::Unreachable {
                addr: addr.to_string(),
                waited: started.elapsed(),
                last,
            });
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// What the rendezvous's proof (side `S`) and the node's (side `C`) cover: the hello as sent
/// (with the node's nonce) and the rendezvous's nonce.
pub(crate) fn transcript(hello: &Hello, nonce: u64) -> Vec<u8> {
    let mut t = Msg::Hello(hello.clone()).encode();
    t.extend_from_slice(&nonce.to_le_bytes());
    t
}

enum Attempt {
    /// Worth another try: the rendezvous is not up yet, busy, or the link broke.
    Retry(String),
    /// The answer will not change.
    Fatal(StartupError),
}

fn attempt(
    addr: &RendezvousAddr,
    hello: &Hello,
    token: &ClusterToken,
    started: Instant,
    deadline: Instant,
) -> Result<PeerTable, Attempt> {
    let name = addr.to_string();
    let protocol = |what| Attempt::Fatal(StartupError::Protocol { addr: name.clone(), what });
    let mut stream = connect(addr, deadline)?;
    let step = (Instant::now() + HANDSHAKE_TIMEOUT).min(deadline);
    wire::send(&mut stream, &Msg::Hello(hello.clone()), step)
        .map_err(|e| Attempt::Retry(format!("sending the hello: {e}")))?;
    let (nonce, proof) = match wire::recv(&mut stream, SHORT_FRAME_MAX, step) {
        Ok(Msg::Challenge { nonce, proof }) => (nonce, proof),
        Ok(Msg::Refused(e)) => return Err(Attempt::Fatal(with_addr(e, &name))),
        Ok(_) => return Err(protocol("another message than the challenge")),
        Err(e) => return Err(read_error(e, &name, "the challenge")),
    };
    let transcript = transcript(hello, nonce);
    if !token.verify_rendezvous(b'S', &transcript, &proof) {
        return Err(Attempt::Fatal(StartupError::WrongToken { addr: name }));
    }
    let mine = Msg::Proof { proof: token.prove_rendezvous(b'C', &transcript) };
    wire::send(&mut stream, &mine, step).map_err(|e| Attempt::Retry(format!("sending the proof: {e}")))?;
    match wire::recv(&mut stream, SHORT_FRAME_MAX, step) {
        Ok(Msg::Registered) => {}
        Ok(Msg::Refused(e)) => return Err(Attempt::Fatal(with_addr(e, &name))),
        Ok(_) => return Err(protocol("another message than the acknowledgement")),
        Err(ReadError::Closed) => return Err(Attempt::Fatal(StartupError::Closed { addr: name })),
        Err(e) => return Err(read_error(e, &name, "the acknowledgement")),
    }
    // Registered: the table comes once every node is, or the rendezvous's error.
    match wire::recv(&mut stream, TABLE_FRAME_MAX, deadline + TABLE_GRACE) {
        Ok(Msg::Table { rank, digest, endpoints }) => {
            let fits = digest == hello.digest
                && endpoints.len() == usize::from(hello.world)
                && hello.rank.is_none_or(|r| r == rank)
                && endpoints.get(rank.index()) == Some(&hello.endpoint);
            if !fits {
                return Err(protocol("a peer table that does not match this node's registration"));
            }
            Ok(PeerTable::from_parts(Some(rank), digest, endpoints))
        }
        Ok(Msg::Refused(e)) => Err(Attempt::Fatal(with_addr(e, &name))),
        Ok(_) => Err(protocol("another message than the peer table")),
        Err(ReadError::TimedOut) => {
            Err(Attempt::Fatal(StartupError::NoTable { addr: name, waited: started.elapsed() }))
        }
        Err(ReadError::Closed) => Err(Attempt::Fatal(StartupError::Closed { addr: name })),
        Err(e) => Err(read_error(e, &name, "the peer table")),
    }
}

/// Connects to the first of `addr`'s addresses that answers.
fn connect(addr: &RendezvousAddr, deadline: Instant) -> Result<TcpStream, Attempt> {
    let addrs: Vec<SocketAddr> = (addr.host.as_str(), addr.port)
        .to_socket_addrs()
        .map_err(|e| Attempt::Retry(format!("cannot resolve {}: {e}", addr.host)))?
        .collect();
    let mut last = format!("{} resolves to no address", addr.host);
    for a in addrs {
        let wait = deadline.saturating_duration_since(Instant::now()).min(CONNECT_TIMEOUT);
        if wait.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&a, wait) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = format!("connecting to {a}: {e}"),
        }
    }
    Err(Attempt::Retry(last))
}

/// A read error before registration: a closed or silent rendezvous is worth another try.
fn read_error(e: ReadError, addr: &str, what: &str) -> Attempt {
    match e {
        ReadError::Closed => {
            Attempt::Retry(format!("the rendezvous closed the connection before {what} (busy?)"))
        }
        ReadError::TimedOut => Attempt::Retry(format!("no answer with {what} in time")),
        ReadError::Malformed(what) => Attempt::Fatal(StartupError::Protocol { addr: addr.to_string(), what }),
        ReadError::Version(theirs) => {
            Attempt::Fatal(StartupError::Version { addr: addr.to_string(), theirs, ours: wire::VERSION })
        }
    }
}

/// A refusal received from the rendezvous at `addr`, with its address filled in.
fn with_addr(e: StartupError, addr: &str) -> StartupError {
    match e {
        StartupError::Version { theirs, ours, .. } => {
            StartupError::Version { addr: addr.to_string(), theirs, ours }
        }
        e => e,
    }
}
