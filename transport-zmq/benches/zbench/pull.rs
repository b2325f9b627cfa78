//! The round trip of a one-key remote pull: two `NodeRuntime`s over `ZmqTransport` under static
//! partitioning (nothing moves), one worker each; node 0's worker pulls one key homed on node 1,
//! synchronously, again and again. Against it, a plain `zeromq` ping-pong: a DEALER sends a
//! request of the size of parma's pull request, a ROUTER answers with one of the size of its
//! reply (each a fresh copy, as the node encodes its frames), one at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parma_core::placement::Homes;
use parma_core::Transport;
use parma_core::{Config, Key, Layout, NodeId, Technique};
use parma_runtime::{NodeRuntime, Worker};
use parma_transport_loopback::threaded::{cluster, ThreadedOptions};
use parma_transport_zmq::{local_cluster, ZmqTransport};
use zeromq::{DealerSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::common::{current_thread_runtime, thread_waker, zmq_options, BenchToken, Side, ROUND_TIMEOUT};

/// `f32`s per key.
pub const LEN: u32 = 16;
/// Keys of the model.
const KEYS: u64 = 1000;
/// The largest request or reply the ping-pong sends.
const MSG_MAX: usize = 64 << 10;

/// Both nodes' configuration.
pub fn config() -> Config {
    let mut cfg = Config::new(2, 1, Layout::uniform(KEYS, LEN).expect("a layout"));
    cfg.technique = Technique::StaticPartitioning;
    cfg
}

/// The digest both nodes' transports check in their handshake.
pub fn digest(cfg: &Config) -> u64 {
    parma_core::cluster_digest(cfg, 0, None)
}

/// The first key homed on node 1.
fn remote_key(cfg: &Config) -> Key {
    let homes = Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    (0..KEYS).map(Key).find(|k| homes.home(*k) == NodeId(1)).expect("a key homed on node 1")
}

/// Node 0 and its worker, which pulls.
pub struct Puller {
    node: NodeRuntime,
    worker: Worker,
    key: Key,
    vals: Vec<f32>,
}

impl Puller {
    pub fn start<T: Transport + Send + 'static>(transport: T) -> Puller {
        let cfg = config();
        let key = remote_key(&cfg);
        let (node, mut workers) = NodeRuntime::start(cfg, NodeId(0), transport).expect("node 0 starts");
        let worker = workers.pop().expect("one worker");
        Puller { node, worker, key, vals: vec![0.0; LEN as usize] }
    }

    /// Over ZeroMQ, the driver on the transport's I/O thread (what parma's commands run).
    pub fn start_zmq(mut transport: ZmqTransport) -> Puller {
        let cfg = config();
        let key = remote_key(&cfg);
        let host = transport.driver_host().expect("a host");
        let (node, mut workers) =
            NodeRuntime::start_hosted(cfg, NodeId(0), transport, host, Default::default())
                .expect("node 0 starts");
        let worker = workers.pop().expect("one worker");
        Puller { node, worker, key, vals: vec![0.0; LEN as usize] }
    }

    /// `pulls` pulls, each one's time in µs appended to `lat`; the round's time.
    pub fn round(&mut self, pulls: usize, lat: &mut Vec<f64>) -> Result<Duration, String> {
        let keys = [self.key];
        let before = self.worker.stats().keys_pulled_remote;
        let start = Instant::now();
        for _ in 0..pulls {
            let t = Instant::now();
            self.worker.pull(&keys, &mut self.vals).map_err(|e| format!("pull: {e}"))?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let elapsed = start.elapsed();
        let remote = self.worker.stats().keys_pulled_remote - before;
        if remote != pulls as u64 {
            return Err(format!("{remote} of {pulls} pulls went to node 1: the key must stay remote"));
        }
        Ok(elapsed)
    }

    /// The frames node 0 sent so far, and their bytes.
    pub fn frames_sent(&self) -> (u64, u64) {
        let d = self.node.stats().driver;
        (d.frames_sent, d.bytes_sent)
    }

    /// Finalizes the worker (a barrier with node 1's, which must finalize at the same time)
    /// and stops the node.
    pub fn finish(self) -> Result<(), String> {
        self.worker.finalize().map_err(|e| format!("node 0's worker: {e}"))?;
        self.node.shutdown().map(|_| ()).map_err(|e| format!("node 0: {e}"))
    }
}

/// Node 1, which holds the key, and its idle worker.
pub struct Holder {
    node: NodeRuntime,
    worker: Worker,
}

impl Holder {
    pub fn start<T: Transport + Send + 'static>(transport: T) -> Holder {
        let (node, mut workers) = NodeRuntime::start(config(), NodeId(1), transport).expect("node 1 starts");
        Holder { node, worker: workers.pop().expect("one worker") }
    }

    /// Over ZeroMQ, the driver on the transport's I/O thread.
    pub fn start_zmq(mut transport: ZmqTransport) -> Holder {
        let host = transport.driver_host().expect("a host");
        let (node, mut workers) =
            NodeRuntime::start_hosted(config(), NodeId(1), transport, host, Default::default())
                .expect("node 1 starts");
        Holder { node, worker: workers.pop().expect("one worker") }
    }

    /// The frames node 1 sent so far, and their bytes.
    pub fn frames_sent(&self) -> (u64, u64) {
        let d = self.node.stats().driver;
        (d.frames_sent, d.bytes_sent)
    }

    /// Finalizes the worker (with node 0's) and stops the node.
    pub fn finish(self) -> Result<(), String> {
        self.worker.finalize().map_err(|e| format!("node 1's worker: {e}"))?;
        self.node.shutdown().map(|_| ()).map_err(|e| format!("node 1: {e}"))
    }
}

/// Both nodes in this process, each node's driver on its transport's I/O thread, or with
/// `driver_thread` on a thread of its own.
pub fn in_process(key: u64, driver_thread: bool) -> (Puller, Holder) {
    let cfg = config();
    let mut ts = local_cluster(2, &zmq_options(), digest(&cfg), Arc::new(BenchToken(key)))
        .expect("two transports on 127.0.0.1");
    let t1 = ts.pop().expect("node 1");
    let t0 = ts.pop().expect("node 0");
    if driver_thread {
        return (Puller::start(t0), Holder::start(t1));
    }
    (Puller::start_zmq(t0), Holder::start_zmq(t1))
}

/// Both nodes in this process over the threaded loopback (no network, no I/O thread): what
/// the runtime alone costs a round trip.
pub fn loopback() -> (Puller, Holder) {
    let mut ts = cluster(2, ThreadedOptions::default());
    let t1 = ts.pop().expect("node 1");
    let t0 = ts.pop().expect("node 0");
    (Puller::start(t0), Holder::start(t1))
}

/// Finalizes both nodes of this process at once.
pub fn finish_both(p: Puller, h: Holder) -> Result<(), String> {
    let other = std::thread::spawn(move || h.finish());
    let mine = p.finish();
    let theirs = other.join().map_err(|_| "node 1's finish panicked".to_string())?;
    mine.and(theirs)
}

/// The sizes of a pull's request and reply frames: `pulls` pulls on a fresh pair of nodes in
/// this process, divided into the frames each node sent.
pub fn frame_sizes(key: u64, pulls: usize) -> Result<(usize, usize), String> {
    let (mut p, h) = in_process(key, false);
    // The first pull waits for the link; its frames count like the others.
    p.round(pulls, &mut Vec::new())?;
    let ((f0, b0), (f1, b1)) = (p.frames_sent(), h.frames_sent());
    finish_both(p, h)?;
    if f0 != pulls as u64 || f1 != pulls as u64 {
        return Err(format!("{pulls} pulls took {f0} frames from node 0 and {f1} from node 1"));
    }
    Ok(((b0 / f0) as usize, (b1 / f1) as usize))
}

// ----- plain zeromq ping-pong -----

/// A ROUTER on a free port of 127.0.0.1 that answers each request with a reply as long as the
/// request's first 4 bytes say; its endpoint. Dropping the side stops it.
pub fn echo_server() -> (Side, String) {
    let (ep_tx, ep_rx) = mpsc::channel();
    let side = Side::spawn(
        "bench-echo",
        Box::new(move |mut rounds, _report| {
            current_thread_runtime().block_on(async move {
                let mut router = RouterSocket::new();
                let ep = router.bind("tcp://127.0.0.1:0").await.expect("a ROUTER on 127.0.0.1");
                let _ = ep_tx.send(ep.to_string());
                let reply: Vec<u8> = (0..MSG_MAX).map(|i| i as u8).collect();
                loop {
                    let msg = tokio::select! {
                        r = rounds.recv() => match r {
                            Some(_) => continue,
                            None => break,
                        },
                        m = router.recv() => match m {
                            Ok(m) => m,
                            Err(_) => break,
                        },
                    };
                    let (Some(id), Some(req)) = (msg.get(0), msg.get(1)) else { continue };
                    let len = req.get(..4).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
                    let mut out = ZmqMessage::from(id.clone());
                    out.push_back(Bytes::copy_from_slice(&reply[..(len as usize).min(MSG_MAX)]));
                    if router.send(out).await.is_err() {
                        break;
                    }
                }
            })
        }),
    );
    let ep = ep_rx.recv_timeout(ROUND_TIMEOUT).expect("the echo server's endpoint");
    (side, ep)
}

/// The ping-pong's client: a DEALER on a current-thread runtime of the calling thread.
pub struct PingClient {
    rt: tokio::runtime::Runtime,
    dealer: DealerSocket,
    request: Vec<u8>,
}

impl PingClient {
    /// Connects to the echo server at `endpoint`; requests of `request` bytes ask for replies
    /// of `reply` bytes.
    pub fn connect(endpoint: &str, request: usize, reply: usize) -> PingClient {
        let rt = current_thread_runtime();
        let mut dealer = DealerSocket::new();
        rt.block_on(dealer.connect(endpoint)).expect("a DEALER connected on 127.0.0.1");
        let mut req: Vec<u8> = (0..request.clamp(4, MSG_MAX)).map(|i| (i * 3) as u8).collect();
        req[..4].copy_from_slice(&(reply as u32).to_le_bytes());
        PingClient { rt, dealer, request: req }
    }

    /// `pings` round trips one after another, each one's time in µs appended to `lat`; the
    /// round's time.
    pub fn round(&mut self, pings: usize, lat: &mut Vec<f64>) -> Result<Duration, String> {
        let (dealer, request) = (&mut self.dealer, &self.request);
        self.rt.block_on(async {
            let start = Instant::now();
            for _ in 0..pings {
                let t = Instant::now();
                dealer
                    .send(ZmqMessage::from(Bytes::copy_from_slice(request)))
                    .await
                    .map_err(|e| e.to_string())?;
                let reply = tokio::time::timeout(ROUND_TIMEOUT, dealer.recv())
                    .await
                    .map_err(|_| "no reply".to_string())?
                    .map_err(|e| e.to_string())?;
                if reply.is_empty() {
                    return Err("an empty reply".into());
                }
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok(start.elapsed())
        })
    }
}

// ----- the transport alone -----

/// Frames of the pull's sizes bounced between two `ZmqTransport`s in this process, without the
/// runtime: node 0's side on the calling thread, node 1's on a thread of its own that answers
/// each frame with one of the reply's size.
pub struct TransportPing {
    t0: ZmqTransport,
    request: usize,
    stop: Arc<AtomicBool>,
    echo: Option<std::thread::JoinHandle<()>>,
}

impl TransportPing {
    pub fn start(key: u64, request: usize, reply: usize) -> TransportPing {
        let mut ts = local_cluster(2, &zmq_options(), 0xbe7c_0002, Arc::new(BenchToken(key)))
            .expect("two transports on 127.0.0.1");
        let mut t1 = ts.pop().expect("node 1");
        let mut t0 = ts.pop().expect("node 0");
        t0.register_waker(&thread_waker());
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let echo = std::thread::spawn(move || {
            t1.register_waker(&thread_waker());
            let end = Instant::now() + ROUND_TIMEOUT * 100;
            let payload = vec![7u8; reply];
            let mut owed = 0usize;
            while !halt.load(Ordering::Relaxed) && Instant::now() < end {
                let got = t1.poll_recv(64, &mut |_, _| owed += 1).unwrap_or(0);
                while owed > 0 {
                    match t1.try_send(NodeId(0), reply, &mut |b| b.copy_from_slice(&payload)) {
                        Ok(()) => owed -= 1,
                        Err(_) => break,
                    }
                }
                if got == 0 {
                    std::thread::park_timeout(Duration::from_millis(1));
                }
            }
        });
        TransportPing { t0, request, stop, echo: Some(echo) }
    }

    pub fn round(&mut self, pings: usize, lat: &mut Vec<f64>) -> Result<Duration, String> {
        let request = vec![3u8; self.request];
        let start = Instant::now();
        for _ in 0..pings {
            let t = Instant::now();
            let end = t + ROUND_TIMEOUT;
            while self.t0.try_send(NodeId(1), request.len(), &mut |b| b.copy_from_slice(&request)).is_err() {
                if Instant::now() > end {
                    return Err("cannot send".into());
                }
                std::thread::park_timeout(Duration::from_millis(1));
            }
            let mut got = 0;
            while got == 0 {
                got = self.t0.poll_recv(1, &mut |_, _| {}).map_err(|e| format!("{e:?}"))?;
                if got == 0 {
                    if Instant::now() > end {
                        return Err("no reply".into());
                    }
                    std::thread::park_timeout(Duration::from_millis(1));
                }
            }
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(start.elapsed())
    }
}

impl Drop for TransportPing {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(e) = self.echo.take() {
            e.thread().unpark();
            let _ = e.join();
        }
    }
}
