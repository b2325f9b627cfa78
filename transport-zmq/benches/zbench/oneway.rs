//! One-way throughput: `frames` frames of `size` bytes from a sender to a receiver, counted
//! until the receiver has them all, through three contenders:
//!
//! - **parma**: `ZmqTransport` node 0 → node 1, the sender and the receiver each a task of its
//!   transport's I/O thread, where a node's driver runs (`ZmqTransport::driver_host`). The
//!   sender loops on `try_send` (the frame is written into the transport's buffer: one copy),
//!   and on `WouldBlock` sleeps until the transport's waker fires (or 1 ms); the receiver
//!   drains `poll_recv`, sleeping likewise. Both let the sockets' tasks run every 8 turns of
//!   64 frames.
//! - **threads** (one process only): the same work with the sender and the receiver on
//!   threads of their own, parking instead of sleeping: the transport used from outside its I/O
//!   thread, as a node's driver thread uses it (`NodeRuntime::start`).
//! - **zeromq**: a plain `zeromq` DEALER → ROUTER, each on a tokio current-thread runtime of
//!   its own thread. Each send is a fresh `Bytes` copy of the payload (one copy at the API, as
//!   above); the sender yields to its runtime every 64 sends so that the socket's writer task
//!   runs (without it a current-thread sender queues everything first).
//! - **tcp**: plain tokio TCP, one `TcpStream`, frames prefixed by their length (u32). The
//!   sender copies each frame behind its length into a buffer (the one copy) and writes it
//!   through a 64 KiB `BufWriter` (small frames coalesce, 64 KiB ones go straight through);
//!   the receiver reads through a 256 KiB `BufReader` into a reused buffer.

use std::sync::mpsc;
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parma_core::transport::{SendError, Transport, TransportEvent};
use parma_core::NodeId;
use parma_transport_zmq::ZmqTransport;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use zeromq::{DealerSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::common::{cpu_ns, current_thread_runtime, deadline, Round, RoundWork, Side, Step, ROUND_TIMEOUT};

/// The largest frame any round sends.
pub const SIZE_MAX: usize = 64 << 10;

/// The payload every sender copies its frames from.
fn template() -> Vec<u8> {
    (0..SIZE_MAX).map(|i| (i * 7 + 3) as u8).collect()
}

/// The contenders, in the order of the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imp {
    Parma,
    Threads,
    Zeromq,
    Tcp,
}

impl Imp {
    pub const ALL: [Imp; 4] = [Imp::Parma, Imp::Threads, Imp::Zeromq, Imp::Tcp];

    pub fn name(self) -> &'static str {
        match self {
            Imp::Parma => "parma",
            Imp::Threads => "threads",
            Imp::Zeromq => "zeromq",
            Imp::Tcp => "tcp",
        }
    }

    pub fn from_name(s: &str) -> Option<Imp> {
        Imp::ALL.into_iter().find(|i| i.name() == s)
    }
}

/// A side of a contender: here, or (a receiving one) in the peer process.
pub trait RxEnd {
    fn start(&mut self, round: Round);
    fn wait(&mut self) -> Result<u64, String>;
    /// The process it runs in, if not this one.
    fn pid(&self) -> Option<u32> {
        None
    }
}

impl RxEnd for Side {
    fn start(&mut self, round: Round) {
        Side::start(self, round)
    }
    fn wait(&mut self) -> Result<u64, String> {
        Side::wait(self)
    }
}

/// One contender's sender and receiver, connected.
pub struct Contender {
    pub imp: Imp,
    pub tx: Box<dyn RxEnd>,
    pub rx: Box<dyn RxEnd>,
}

/// What one round took.
#[derive(Clone, Copy, Debug)]
pub struct Lap {
    /// From telling the sender to start until the receiver had every frame.
    pub wall: Duration,
    /// The CPU time of both processes meanwhile (every thread), in ns.
    pub cpu_ns: u64,
}

impl Contender {
    /// One round: the time from telling the sender to start until the receiver has every
    /// frame, and the CPU time spent meanwhile. Checks that every byte sent arrived.
    pub fn race(&mut self, round: Round) -> Result<Lap, String> {
        let peer = self.rx.pid();
        let cpu = || cpu_ns(None) + peer.map_or(0, |p| cpu_ns(Some(p)));
        self.rx.start(round);
        let cpu0 = cpu();
        let t0 = Instant::now();
        self.tx.start(round);
        let received = self.rx.wait().map_err(|e| format!("{} receiver: {e}", self.imp.name()))?;
        let elapsed = t0.elapsed();
        let cpu_ns = cpu().saturating_sub(cpu0);
        let sent = self.tx.wait().map_err(|e| format!("{} sender: {e}", self.imp.name()))?;
        let want = round.frames * round.size as u64;
        if received != want || sent != want {
            return Err(format!(
                "{}: sent {sent} bytes, received {received}, expected {want}",
                self.imp.name()
            ));
        }
        Ok(Lap { wall: elapsed, cpu_ns })
    }
}

// ----- parma -----

/// Where a parma side runs.
#[derive(Clone, Copy)]
pub enum Host {
    /// As a task of its transport's I/O thread.
    Io,
    /// On a thread of its own.
    Thread,
}

fn parma_side<W: RoundWork>(
    mut t: ZmqTransport,
    host: Host,
    name: &str,
    work: fn(ZmqTransport) -> W,
) -> Side {
    match host {
        Host::Io => {
            let io = t.driver_host().expect("the transport's host");
            Side::on_io(io, work(t))
        }
        Host::Thread => Side::on_thread(name, work(t)),
    }
}

/// The receiving side (node 1 of the pair).
pub fn parma_rx(t: ZmqTransport, host: Host) -> Side {
    parma_side(t, host, "bench-parma-rx", ParmaRx::new)
}

struct ParmaRx {
    t: ZmqTransport,
    round: Round,
    frames: u64,
    bytes: u64,
    end: Instant,
}

impl ParmaRx {
    fn new(t: ZmqTransport) -> ParmaRx {
        ParmaRx { t, round: Round { frames: 0, size: 0 }, frames: 0, bytes: 0, end: deadline() }
    }
}

impl RoundWork for ParmaRx {
    fn begin(&mut self, round: Round, waker: &Waker) {
        self.t.register_waker(waker);
        (self.round, self.frames, self.bytes, self.end) = (round, 0, 0, deadline());
    }

    fn step(&mut self) -> Step {
        if self.frames >= self.round.frames {
            return Step::Done(Ok(self.bytes));
        }
        let (frames, bytes) = (&mut self.frames, &mut self.bytes);
        let got = match self.t.poll_recv(1024, &mut |_, f| {
            *frames += 1;
            *bytes += f.len() as u64;
        }) {
            Ok(n) => n,
            Err(e) => return Step::Done(Err(format!("poll_recv: {e:?}"))),
        };
        if let Some(TransportEvent::PeerFailed(p)) = self.t.poll_event() {
            return Step::Done(Err(format!("peer {p} failed")));
        }
        if got > 0 {
            return Step::Again;
        }
        if Instant::now() > self.end {
            return Step::Done(Err(format!(
                "{} of {} frames within {ROUND_TIMEOUT:?}",
                self.frames, self.round.frames
            )));
        }
        Step::Idle
    }
}

/// The sending side (node 0 of the pair, sending to node 1).
pub fn parma_tx(t: ZmqTransport, host: Host) -> Side {
    parma_side(t, host, "bench-parma-tx", ParmaTx::new)
}

struct ParmaTx {
    t: ZmqTransport,
    template: Vec<u8>,
    round: Round,
    sent: u64,
    end: Instant,
}

impl ParmaTx {
    fn new(t: ZmqTransport) -> ParmaTx {
        ParmaTx { t, template: template(), round: Round { frames: 0, size: 0 }, sent: 0, end: deadline() }
    }
}

impl RoundWork for ParmaTx {
    fn begin(&mut self, round: Round, waker: &Waker) {
        self.t.register_waker(waker);
        (self.round, self.sent, self.end) = (round, 0, deadline());
    }

    fn step(&mut self) -> Step {
        let payload = &self.template[..self.round.size];
        for _ in 0..64 {
            if self.sent == self.round.frames {
                return Step::Done(Ok(self.sent * self.round.size as u64));
            }
            match self.t.try_send(NodeId(1), self.round.size, &mut |buf| buf.copy_from_slice(payload)) {
                Ok(()) => self.sent += 1,
                Err(SendError::WouldBlock) => {
                    if Instant::now() > self.end {
                        let (sent, frames) = (self.sent, self.round.frames);
                        return Step::Done(Err(format!(
                            "{sent} of {frames} frames sent within {ROUND_TIMEOUT:?}"
                        )));
                    }
                    return Step::Idle;
                }
                Err(e) => return Step::Done(Err(format!("try_send: {e:?}"))),
            }
        }
        Step::Again
    }
}

// ----- plain zeromq -----

/// A ROUTER listening on a free port of 127.0.0.1; its endpoint.
pub fn zeromq_rx() -> (Side, String) {
    let (ep_tx, ep_rx) = mpsc::channel();
    let side = Side::spawn(
        "bench-zeromq-rx",
        Box::new(move |mut rounds, report| {
            current_thread_runtime().block_on(async move {
                let mut router = RouterSocket::new();
                let ep = router.bind("tcp://127.0.0.1:0").await.expect("a ROUTER on 127.0.0.1");
                let _ = ep_tx.send(ep.to_string());
                while let Some(r) = rounds.recv().await {
                    let end = tokio::time::Instant::from_std(deadline());
                    let got = tokio::time::timeout_at(end, zeromq_recv(&mut router, r)).await;
                    let res = got.unwrap_or_else(|_| Err(format!("not done within {ROUND_TIMEOUT:?}")));
                    if report.send(res).is_err() {
                        break;
                    }
                }
            })
        }),
    );
    let ep = ep_rx.recv_timeout(ROUND_TIMEOUT).expect("the ROUTER's endpoint");
    (side, ep)
}

async fn zeromq_recv(router: &mut RouterSocket, r: Round) -> Result<u64, String> {
    let mut bytes = 0;
    for _ in 0..r.frames {
        let msg = router.recv().await.map_err(|e| format!("recv: {e}"))?;
        // [the sender's identity, the payload]
        bytes += msg.iter().skip(1).map(|f| f.len() as u64).sum::<u64>();
    }
    Ok(bytes)
}

/// A DEALER connected to the ROUTER at `endpoint`.
pub fn zeromq_tx(endpoint: String) -> Side {
    Side::spawn(
        "bench-zeromq-tx",
        Box::new(move |mut rounds, report| {
            current_thread_runtime().block_on(async move {
                let mut dealer = DealerSocket::new();
                dealer.connect(&endpoint).await.expect("a DEALER connected on 127.0.0.1");
                let template = template();
                while let Some(r) = rounds.recv().await {
                    if report.send(zeromq_send(&mut dealer, r, &template).await).is_err() {
                        break;
                    }
                }
            })
        }),
    )
}

async fn zeromq_send(dealer: &mut DealerSocket, r: Round, template: &[u8]) -> Result<u64, String> {
    for i in 0..r.frames {
        let msg = ZmqMessage::from(Bytes::copy_from_slice(&template[..r.size]));
        dealer.send(msg).await.map_err(|e| format!("send: {e}"))?;
        if i % 64 == 63 {
            tokio::task::yield_now().await;
        }
    }
    Ok(r.frames * r.size as u64)
}

// ----- plain tokio TCP -----

/// A TCP listener on a free port of 127.0.0.1 that takes one connection; its address.
pub fn tcp_rx() -> (Side, String) {
    let (addr_tx, addr_rx) = mpsc::channel();
    let side = Side::spawn(
        "bench-tcp-rx",
        Box::new(move |mut rounds, report| {
            current_thread_runtime().block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("a listener on 127.0.0.1");
                let addr = listener.local_addr().expect("its address");
                let _ = addr_tx.send(addr.to_string());
                let accepted = tokio::time::timeout(ROUND_TIMEOUT, listener.accept()).await;
                let Ok(Ok((stream, _))) = accepted else { return };
                let _ = stream.set_nodelay(true);
                let mut reader = BufReader::with_capacity(256 << 10, stream);
                let mut buf = Vec::with_capacity(SIZE_MAX);
                while let Some(r) = rounds.recv().await {
                    let end = tokio::time::Instant::from_std(deadline());
                    let got = tokio::time::timeout_at(end, tcp_recv(&mut reader, &mut buf, r)).await;
                    let res = got.unwrap_or_else(|_| Err(format!("not done within {ROUND_TIMEOUT:?}")));
                    if report.send(res).is_err() {
                        break;
                    }
                }
            })
        }),
    );
    let addr = addr_rx.recv_timeout(ROUND_TIMEOUT).expect("the listener's address");
    (side, addr)
}

async fn tcp_recv(reader: &mut BufReader<TcpStream>, buf: &mut Vec<u8>, r: Round) -> Result<u64, String> {
    let mut bytes = 0;
    for _ in 0..r.frames {
        let mut len = [0u8; 4];
        reader.read_exact(&mut len).await.map_err(|e| format!("read: {e}"))?;
        let len = u32::from_le_bytes(len) as usize;
        if len > SIZE_MAX {
            return Err(format!("a frame of {len} bytes"));
        }
        buf.resize(len, 0);
        reader.read_exact(buf).await.map_err(|e| format!("read: {e}"))?;
        bytes += len as u64;
    }
    Ok(bytes)
}

/// A TCP connection to `addr`.
pub fn tcp_tx(addr: String) -> Side {
    Side::spawn(
        "bench-tcp-tx",
        Box::new(move |mut rounds, report| {
            current_thread_runtime().block_on(async move {
                let stream = TcpStream::connect(&addr).await.expect("a TCP connection on 127.0.0.1");
                let _ = stream.set_nodelay(true);
                let mut writer = BufWriter::with_capacity(64 << 10, stream);
                let template = template();
                let mut frame = Vec::with_capacity(SIZE_MAX + 4);
                while let Some(r) = rounds.recv().await {
                    let res = tcp_send(&mut writer, &mut frame, r, &template).await;
                    if report.send(res).is_err() {
                        break;
                    }
                }
            })
        }),
    )
}

async fn tcp_send(
    writer: &mut BufWriter<TcpStream>,
    frame: &mut Vec<u8>,
    r: Round,
    template: &[u8],
) -> Result<u64, String> {
    for _ in 0..r.frames {
        frame.clear();
        frame.extend_from_slice(&(r.size as u32).to_le_bytes());
        frame.extend_from_slice(&template[..r.size]);
        writer.write_all(frame).await.map_err(|e| format!("write: {e}"))?;
    }
    writer.flush().await.map_err(|e| format!("flush: {e}"))?;
    Ok(r.frames * r.size as u64)
}
