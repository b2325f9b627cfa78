//! The rendezvous: one listener where every node of a world registers once, at start-up, and
//! from which each gets the peer table. Run by rank 0 (or ps-lite's scheduler) on a thread of
//! its own; nothing depends on it afterwards.
//!
//! Each connection gets a handshake thread (at most [`RendezvousOptions::handshakes_max`] at
//! once; further connections are closed at once and counted) that reads the node's hello,
//! proves the token against the node's nonce, and checks the node's proof against its own
//! nonce, all within [`RendezvousOptions::handshake_timeout`]. Connections that fail are
//! counted in [`Refusals`] and disturb nobody. The main thread checks what an authenticated
//! node says (digest, world, rank): a node that cannot belong to the world ends the
//! rendezvous for every node with the same error, since the world cannot start.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use parma_core::NodeId;

use super::join::transcript;
use super::wire::{self, Hello, Msg, ReadError, HELLO_FRAME_MAX, SHORT_FRAME_MAX};
use super::{ClusterToken, PeerTable, RendezvousAddr, StartupError};

/// How often the main thread looks at the listener and the deadline.
const TICK: Duration = Duration::from_millis(5);
/// Most connections accepted per tick.
const ACCEPTS_PER_TICK: usize = 64;

/// Bounds of a rendezvous. `RendezvousOptions::default()` suits every world.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RendezvousOptions {
    /// Longest a connection may take from accept to its proof of the token.
    pub handshake_timeout: Duration,
    /// Most handshakes under way at once (registered nodes do not count).
    pub handshakes_max: usize,
    /// Longest a write to a registered node may take (its acknowledgement, the table).
    pub reply_timeout: Duration,
}

impl Default for RendezvousOptions {
    fn default() -> RendezvousOptions {
        RendezvousOptions {
            handshake_timeout: Duration::from_secs(5),
            handshakes_max: 64,
            reply_timeout: Duration::from_secs(5),
        }
    }
}

/// Connections the rendezvous turned away without registering them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Sent something else than a hello (garbage, a frame too long, another version, an
    /// endpoint too long), or closed before saying anything.
    pub malformed: u32,
    /// Did not finish the handshake in time.
    pub timed_out: u32,
    /// Did not prove the cluster token: a wrong proof, or left before proving.
    pub unauthenticated: u32,
    /// Arrived while `handshakes_max` handshakes were under way.
    pub over_capacity: u32,
}

impl fmt::Display for Refusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = [
            (self.malformed, "malformed"),
            (self.timed_out, "timed out"),
            (self.unauthenticated, "without the token"),
            (self.over_capacity, "over capacity"),
        ];
        let parts: Vec<String> =
            counts.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
        if parts.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&parts.join(", "))
    }
}

/// What a finished rendezvous did.
#[derive(Clone, Debug)]
pub struct ServeReport {
    /// The world's table (its `me` is `None`: the rendezvous is not a node).
    pub table: PeerTable,
    /// Connections turned away.
    pub refusals: Refusals,
    /// Nodes to which the table could not be written (they will fail their `join`).
    pub undelivered: Vec<NodeId>,
}

/// A bound rendezvous, not yet serving.
#[derive(Debug)]
pub struct Rendezvous {
    listener: TcpListener,
    world: u16,
    digest: u64,
    token: ClusterToken,
    opts: RendezvousOptions,
}

/// [`Rendezvous::bind`] then [`Rendezvous::run`] with the default options.
pub fn serve(
    addr: &RendezvousAddr,
    world: u16,
    digest: u64,
    token: &ClusterToken,
    timeout: Duration,
) -> Result<ServeReport, StartupError> {
    Rendezvous::bind(addr, world, digest, token, RendezvousOptions::default())?.run(timeout)
}

impl Rendezvous {
    /// Listens on `addr` for a world of `world` nodes sharing `digest`. `addr`'s host is
    /// resolved and the first of its addresses that can be bound is; if none is an address of
    /// this machine (a name that resolves elsewhere, as behind a Kubernetes service), the
    /// wildcard address of its family is bound instead. Port 0 picks a free port (tests).
    pub fn bind(
        addr: &RendezvousAddr,
        world: u16,
        digest: u64,
        token: &ClusterToken,
        opts: RendezvousOptions,
    ) -> Result<Rendezvous, StartupError> {
        if world == 0 || world > parma_core::config::NODES_MAX {
            let why = format!("the world size must be from 1 to {}", parma_core::config::NODES_MAX);
            return Err(StartupError::BadVar { var: "world", value: world.to_string(), why });
        }
        let listen_err = |error| StartupError::Listen { addr: addr.to_string(), error };
        let addrs: Vec<SocketAddr> =
            (addr.host.as_str(), addr.port).to_socket_addrs().map_err(listen_err)?.collect();
        let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "the host resolves to no address");
        for a in &addrs {
            match TcpListener::bind(a) {
                Ok(listener) => {
                    return Ok(Rendezvous { listener, world, digest, token: token.clone(), opts })
                }
                Err(e) => last = e,
            }
        }
        if let (Some(a), io::ErrorKind::AddrNotAvailable) = (addrs.first(), last.kind()) {
            let any: SocketAddr = match a {
                SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, addr.port).into(),
                SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, addr.port).into(),
            };
            let listener = TcpListener::bind(any).map_err(listen_err)?;
            return Ok(Rendezvous { listener, world, digest, token: token.clone(), opts });
        }
        Err(listen_err(last))
    }

    /// The address listened on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until every node of the world registered and was sent the table, a node that
    /// cannot belong to the world registered, or `timeout` passed. Returns once every
    /// handshake thread has ended (they are cut short).
    pub fn run(self, timeout: Duration) -> Result<ServeReport, StartupError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let local = self.local_addr().map_or_else(|_| "the rendezvous".into(), |a| a.to_string());
        self.listener.set_nonblocking(true).map_err(|error| StartupError::Listen { addr: local, error })?;
        let (tx, rx) = mpsc::channel::<(u64, Result<Registration, Refused>)>();
        let mut registry = Registry::new(self.world, self.digest, self.opts.reply_timeout);
        let mut refusals = Refusals::default();
        // Clones of the streams of handshakes under way, to cut them short at the end.
        let mut pending: HashMap<u64, TcpStream> = HashMap::new();
        let mut next_id = 0u64;
        thread::scope(|scope| {
            let result = loop {
                for _ in 0..ACCEPTS_PER_TICK {
                    let stream = match self.listener.accept() {
                        Ok((stream, _)) => stream,
                        // WouldBlock: none waiting. Others (out of descriptors): next tick.
                        Err(_) => break,
                    };
                    if pending.len() >= self.opts.handshakes_max {
                        refusals.over_capacity += 1;
                        continue;
                    }
                    let Ok(clone) = stream.try_clone() else { continue };
                    let (id, tx, token) = (next_id, tx.clone(), &self.token);
                    next_id += 1;
                    let until = (Instant::now() + self.opts.handshake_timeout).min(deadline);
                    let spawned = thread::Builder::new()
                        .name("parma-rendezvous-handshake".into())
                        .spawn_scoped(scope, move || drop(tx.send((id, handshake(stream, token, until)))));
                    match spawned {
                        Ok(_) => drop(pending.insert(id, clone)),
                        Err(_) => refusals.over_capacity += 1,
                    }
                }
                let mut fatal = None;
                for (id, outcome) in rx.recv_timeout(TICK).into_iter().chain(rx.try_iter()) {
                    pending.remove(&id);
                    match outcome {
                        Err(Refused::Malformed) => refusals.malformed += 1,
                        Err(Refused::TimedOut) => refusals.timed_out += 1,
                        Err(Refused::Unauthenticated) => refusals.unauthenticated += 1,
                        Ok(reg) => {
                            if let Err(e) = registry.admit(reg) {
                                fatal = Some(e);
                                break;
                            }
                        }
                    }
                }
                if let Some(e) = fatal {
                    break Err(e);
                }
                if registry.complete() {
                    let (table, undelivered) = registry.send_tables();
                    break Ok(ServeReport { table, refusals, undelivered });
                }
                if Instant::now() >= deadline {
                    break Err(registry.abort_missing(started.elapsed(), refusals));
                }
            };
            for stream in pending.values() {
                let _ = stream.shutdown(Shutdown::Both);
            }
            result
        })
    }
}

/// An authenticated node, not yet checked against the world.
struct Registration {
    hello: Hello,
    stream: TcpStream,
}

/// Why a handshake failed.
enum Refused {
    Malformed,
    TimedOut,
    Unauthenticated,
}

/// One connection's handshake, on its own thread: the node's hello, our proof, its proof.
fn handshake(
    mut stream: TcpStream,
    token: &ClusterToken,
    deadline: Instant,
) -> Result<Registration, Refused> {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_nonblocking(false);
    let refused = |e: ReadError, closed: Refused| match e {
        ReadError::TimedOut => Refused::TimedOut,
        ReadError::Closed => closed,
        ReadError::Malformed(_) | ReadError::Version(_) => Refused::Malformed,
    };
    let hello = match wire::recv(&mut stream, HELLO_FRAME_MAX, deadline) {
        Ok(Msg::Hello(hello)) if wire::check_endpoint(&hello.endpoint).is_ok() => hello,
        Ok(_) => return Err(Refused::Malformed),
        Err(ReadError::Version(theirs)) => {
            let e = StartupError::Version { addr: String::new(), theirs, ours: wire::VERSION };
            let _ = wire::send_frame(&mut stream, &wire::refusal(&e), deadline);
            return Err(Refused::Malformed);
        }
        Err(e) => return Err(refused(e, Refused::Malformed)),
    };
    let nonce = rand::random::<u64>();
    let transcript = transcript(&hello, nonce);
    let challenge = Msg::Challenge { nonce, proof: token.prove_rendezvous(b'S', &transcript) };
    if wire::send(&mut stream, &challenge, deadline).is_err() {
        return Err(if Instant::now() >= deadline { Refused::TimedOut } else { Refused::Unauthenticated });
    }
    match wire::recv(&mut stream, SHORT_FRAME_MAX, deadline) {
        Ok(Msg::Proof { proof }) if token.verify_rendezvous(b'C', &transcript, &proof) => {
            Ok(Registration { hello, stream })
        }
        Ok(Msg::Proof { .. }) => Err(Refused::Unauthenticated),
        Ok(_) => Err(Refused::Malformed),
        Err(e) => Err(refused(e, Refused::Unauthenticated)),
    }
}

/// The nodes registered so far.
struct Registry {
    world: u16,
    digest: u64,
    reply_timeout: Duration,
    /// Nodes that gave their rank, by rank.
    ranked: Vec<Option<Registration>>,
    /// Nodes awaiting a rank, in the order they registered.
    unranked: Vec<Registration>,
}

impl Registry {
    fn new(world: u16, digest: u64, reply_timeout: Duration) -> Registry {
        Registry {
            world,
            digest,
            reply_timeout,
            ranked: (0..world).map(|_| None).collect(),
            unranked: Vec::new(),
        }
    }

    fn count(&self) -> usize {
        self.ranked.iter().flatten().count() + self.unranked.len()
    }

    /// Checks an authenticated node against the world and registers it. A node that cannot
    /// belong to it ends the rendezvous: the error goes to it and to every registered node.
    fn admit(&mut self, mut reg: Registration) -> Result<(), StartupError> {
        let h = &reg.hello;
        let refusal = if h.digest != self.digest {
            Some(StartupError::DigestMismatch { rank: h.rank, node: h.digest, rendezvous: self.digest })
        } else if h.world != self.world {
            Some(StartupError::WorldMismatch { rank: h.rank, node: h.world, rendezvous: self.world })
        } else if let Some(rank) = h.rank.filter(|r| r.0 >= self.world) {
            Some(StartupError::RankOutsideWorld { rank: rank.0, world: self.world })
        } else if (h.rank.is_some() && !self.unranked.is_empty())
            || (h.rank.is_none() && self.ranked.iter().any(Option::is_some))
        {
            Some(StartupError::MixedRanks)
        } else {
            h.rank.and_then(|rank| self.take_dead(rank, &h.endpoint))
        };
        if let Some(e) = refusal {
            self.abort(&e, Some(&mut reg.stream));
            return Err(e);
        }
        let until = Instant::now() + self.reply_timeout;
        if wire::send(&mut reg.stream, &Msg::Registered, until).is_err() {
            return Ok(()); // It left: it is not registered.
        }
        match reg.hello.rank {
            Some(rank) => self.ranked[rank.index()] = Some(reg),
            None => self.unranked.push(reg),
        }
        Ok(())
    }

    /// Frees `rank`'s slot if its node's connection is closed (it gave up and is coming
    /// back); a live node holding it makes the newcomer a duplicate.
    fn take_dead(&mut self, rank: NodeId, endpoint: &str) -> Option<StartupError> {
        let old = self.ranked[rank.index()].as_ref()?;
        if alive(&old.stream) {
            let first = old.hello.endpoint.clone();
            return Some(StartupError::DuplicateRank { rank, first, second: endpoint.to_string() });
        }
        self.ranked[rank.index()] = None;
        None
    }

    /// Whether every node registered; nodes whose connection closed meanwhile are dropped
    /// (they will come back, or be missing).
    fn complete(&mut self) -> bool {
        if self.count() < usize::from(self.world) {
            return false;
        }
        for slot in &mut self.ranked {
            if slot.as_ref().is_some_and(|r| !alive(&r.stream)) {
                *slot = None;
            }
        }
        self.unranked.retain(|r| alive(&r.stream));
        self.count() == usize::from(self.world)
    }

    /// Gives ranks to the nodes awaiting one (in the order they registered) and sends every
    /// node the table; returns it and the nodes it could not be written to.
    fn send_tables(&mut self) -> (PeerTable, Vec<NodeId>) {
        let mut nodes: Vec<Registration> = self.ranked.iter_mut().filter_map(Option::take).collect();
        nodes.append(&mut self.unranked);
        let endpoints: Vec<String> = nodes.iter().map(|r| r.hello.endpoint.clone()).collect();
        let mut undelivered = Vec::new();
        for (i, reg) in nodes.iter_mut().enumerate() {
            let rank = NodeId(i as u16);
            let msg = Msg::Table { rank, digest: self.digest, endpoints: endpoints.clone() };
            if wire::send(&mut reg.stream, &msg, Instant::now() + self.reply_timeout).is_err() {
                undelivered.push(rank);
            }
        }
        (PeerTable::from_parts(None, self.digest, endpoints), undelivered)
    }

    /// The error of a rendezvous that timed out, told to every registered node.
    fn abort_missing(&mut self, waited: Duration, refusals: Refusals) -> StartupError {
        let missing = if self.unranked.is_empty() {
            (0..self.world).map(NodeId).filter(|r| self.ranked[r.index()].is_none()).collect()
        } else {
            Vec::new()
        };
        let registered = self.count() as u16;
        let e = StartupError::Missing { world: self.world, missing, registered, waited, refusals };
        self.abort(&e, None);
        e
    }

    /// Tells `e` to every registered node, and to `also`.
    fn abort(&mut self, e: &StartupError, also: Option<&mut TcpStream>) {
        let frame = wire::refusal(e);
        let until = Instant::now() + self.reply_timeout;
        let registered =
            self.ranked.iter_mut().flatten().chain(self.unranked.iter_mut()).map(|r| &mut r.stream);
        for stream in registered.chain(also) {
            let _ = wire::send_frame(stream, &frame, until);
        }
    }
}

/// Whether the peer has not closed `stream` (a registered node sends nothing more, so any
/// byte or an empty read means it is gone or broken).
fn alive(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let alive = matches!(stream.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    alive && stream.set_nonblocking(false).is_ok()
}

#[cfg(test)]
#[path = "rendezvous_tests.rs"]
mod tests;
