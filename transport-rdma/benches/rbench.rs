//! The RDMA transport's benchmark, for the VM (or a host with an RDMA device); its numbers
//! are read by people (`docs/performance-transports.md`), never asserted.
//!
//! - `rbench oneway <rdma|zmq> <frame bytes> <frames>`: node 0 sends frames to node 1 as fast
//!   as back-pressure lets it, node 1 takes them; MB/s (10^6 bytes per second, as perftest
//!   prints) from the first send to the last frame taken. Both transports in this process;
//!   each end sleeps until its transport's waker when it cannot go on (`RBENCH_SPIN=1`:
//!   yields and tries again).
//! - `rbench pull <rdma|zmq> <pulls>`: two `NodeRuntime`s under static partitioning, node 0's
//!   worker pulls one key homed on node 1 (16 `f32`s), synchronously; the median and mean
//!   round trip in µs.
//! - `rbench --test` (as `cargo bench -- --test` passes): each part once, small.
//!
//! `transport-rdma/benches/vm-bench.sh` runs them beside `ib_send_bw` and `ib_send_lat` in
//! one VM boot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parma_core::placement::Homes;
use parma_core::transport::SendError;
use parma_core::{Config, Key, Layout, NodeId, Technique, Transport};
use parma_runtime::host::unpark_waker;
use parma_runtime::startup::ClusterToken;
use parma_runtime::NodeRuntime;
use parma_transport_rdma::{local_cluster as rdma_cluster, RdmaOptions, Wire};
use parma_transport_zmq::{local_cluster as zmq_cluster, ZmqOptions};

const DEADLINE: Duration = Duration::from_secs(300);
/// The one-way loops look at the clock once per this many turns: a clock read is a trap to
/// the emulated timer in the rdma-vm (`read_hpet` was a quarter of the samples there), and
/// `ib_send_bw`, which these figures are held against, reads no clock per turn either.
const TURNS_PER_CLOCK: u32 = 1024;

fn token() -> Arc<ClusterToken> {
    Arc::new(ClusterToken::generate())
}

/// `why` says why the sender's peer failed, if the transport can tell.
fn oneway<T: Transport + Send + 'static>(
    mut nodes: Vec<T>,
    len: usize,
    frames: u64,
    why: fn(&T) -> String,
) -> f64 {
    let mut rx = nodes.pop().expect("node 1");
    let mut tx = nodes.pop().expect("node 0");
    // As a node's driver does, the two ends sleep until the transport's waker when they
    // cannot go on (the contract of `Transport::register_waker`); `RBENCH_SPIN=1` has them
    // yield and try again instead.
    let park = std::env::var_os("RBENCH_SPIN").is_none();
    let start = Instant::now();
    let sender = std::thread::spawn(move || {
        if park {
            tx.register_waker(&unpark_waker(std::thread::current()));
        }
        let mut sent = 0u64;
        let mut turns = 0u32;
        while sent < frames {
            turns = turns.wrapping_add(1);
            if turns % TURNS_PER_CLOCK == 0 && start.elapsed() >= DEADLINE {
                break;
            }
            match tx.try_send(NodeId(1), len, &mut |b| b[..8.min(len)].fill(sent as u8)) {
                Ok(()) => sent += 1,
                Err(SendError::WouldBlock) if park => std::thread::park_timeout(Duration::from_millis(1)),
                Err(SendError::WouldBlock) => std::thread::yield_now(),
                Err(e) => panic!("send: {e:?} ({})", why(&tx)),
            }
        }
        tx
    });
    if park {
        rx.register_waker(&unpark_waker(std::thread::current()));
    }
    let mut got = 0u64;
    let mut turns = 0u32;
    while got < frames {
        turns = turns.wrapping_add(1);
        if turns % TURNS_PER_CLOCK == 0 {
            assert!(start.elapsed() < DEADLINE, "only {got} of {frames} frames in {DEADLINE:?}");
        }
        let n = rx.poll_recv(256, &mut |_, f| assert_eq!(f.len(), len)).expect("receive");
        if n == 0 && park {
            std::thread::park_timeout(Duration::from_millis(1));
        } else if n == 0 {
            std::thread::yield_now();
        }
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    if let Ok(tx) = sender.join() {
        if std::env::var_os("RBENCH_VERBOSE").is_some() {
            let c = tx.counters();
            eprintln!(
                "sender blocked {} times; {} frames in {} packets (mailbox writes included)",
                c.sends_blocked, c.frames_sent, c.packets_sent
            );
        }
    }
    (len as u64 * frames) as f64 / secs / 1e6
}

fn rdma_why(t: &parma_transport_rdma::RdmaTransport) -> String {
    format!("rdma: {}", t.failure(NodeId(1)).unwrap_or_default())
}

fn no_why<T>(_: &T) -> String {
    "zmq".into()
}

fn pull_config() -> Config {
    let mut cfg = Config::new(2, 1, Layout::uniform(1000, 16).expect("a layout"));
    cfg.technique = Technique::StaticPartitioning;
    cfg
}

fn pull<T: Transport + Send + 'static>(mut nodes: Vec<T>, pulls: usize) -> (f64, f64) {
    let cfg = pull_config();
    let homes = Homes::new(cfg.placement, cfg.nodes, cfg.layout.key_end());
    let key = (0..1000).map(Key).find(|k| homes.home(*k) == NodeId(1)).expect("a key on node 1");
    let t1 = nodes.pop().expect("node 1");
    let t0 = nodes.pop().expect("node 0");
    let (n0, mut w0) = NodeRuntime::start(cfg.clone(), NodeId(0), t0).expect("node 0");
    let (n1, mut w1) = NodeRuntime::start(cfg, NodeId(1), t1).expect("node 1");
    let (mut a, b) = (w0.pop().expect("worker"), w1.pop().expect("worker"));
    let holder = std::thread::spawn(move || b.finalize().map_err(|e| e.to_string()));
    let mut vals = vec![0.0f32; 16];
    let mut lat = Vec::with_capacity(pulls);
    for _ in 0..pulls {
        let t = Instant::now();
        a.pull(&[key], &mut vals).expect("pull");
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    a.finalize().expect("node 0's worker");
    holder.join().expect("holder").expect("node 1's worker");
    n0.shutdown().expect("node 0 stops");
    n1.shutdown().expect("node 1 stops");
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    lat.sort_by(f64::total_cmp);
    (lat[lat.len() / 2], mean)
}

/// The default options; `RBENCH_COMPLETION=channel` or `=poll` picks how completions are
/// waited for, `RBENCH_WIRE=send` or `=ring` how frames travel, `RBENCH_SLOTS=<n>` sets
/// `recv_slots` and `send_slots`, `RBENCH_RING=<bytes>` `ring_len` and
/// `RBENCH_RING_MSGS=<n>` `ring_msgs`, `RBENCH_BATCH=<n>` `batch_above_inflight`;
/// `RBENCH_VERBOSE=1` prints how often the one-way sender was blocked, and its frames and
/// packets.
fn rdma_opts() -> RdmaOptions {
    let mut o = RdmaOptions::loopback();
    let num = |v: &str| std::env::var(v).ok().and_then(|v| v.parse().ok());
    match std::env::var("RBENCH_WIRE").as_deref() {
        Ok("send") => o.wire = Wire::Send,
        Ok("ring") => o.wire = Wire::Ring,
        _ => {}
    }
    if let Some(n) = num("RBENCH_RING") {
        o.ring_len = n;
    }
    if let Some(n) = num("RBENCH_RING_MSGS") {
        o.ring_msgs = n;
    }
    if let Some(n) = num("RBENCH_BATCH") {
        o.batch_above_inflight = n;
    }
    if let Some(n) = std::env::var("RBENCH_SLOTS").ok().and_then(|v| v.parse().ok()) {
        (o.recv_slots, o.send_slots) = (n, n);
    }
    match std::env::var("RBENCH_COMPLETION").as_deref() {
        Ok("channel") => o.completion = parma_transport_rdma::Completion::Channel,
        Ok("poll") => o.completion = parma_transport_rdma::Completion::Poll,
        _ => {}
    }
    o
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).filter(|s| *s != "--bench").collect();
    let digest = parma_core::cluster_digest(&pull_config(), 0, None);
    match a.as_slice() {
        ["--test", ..] | [] => {
            if std::env::var_os("RDMA_VM").is_none() && a.is_empty() {
                println!("rbench: see the file's docs (runs in the rdma-vm: benches/vm-bench.sh)");
                return;
            }
            let mb =
                oneway(zmq_cluster(2, &ZmqOptions::loopback(), 1, token()).expect("zmq"), 1024, 100, no_why);
            println!("oneway zmq 1024: {mb:.1} MB/s (smoke)");
        }
        ["oneway", t, len, frames] => {
            let (len, frames): (usize, u64) = (len.parse().expect("bytes"), frames.parse().expect("frames"));
            let mb = match *t {
                "rdma" => {
                    oneway(rdma_cluster(2, &rdma_opts(), 1, token()).expect("rdma"), len, frames, rdma_why)
                }
                _ => oneway(
                    zmq_cluster(2, &ZmqOptions::loopback(), 1, token()).expect("zmq"),
                    len,
                    frames,
                    no_why,
                ),
            };
            println!("oneway {t} {len}: {mb:.1} MB/s ({frames} frames)");
        }
        ["pull", t, pulls] => {
            let pulls: usize = pulls.parse().expect("pulls");
            let (median, mean) = match *t {
                "rdma" => pull(rdma_cluster(2, &rdma_opts(), digest, token()).expect("rdma"), pulls),
                _ => pull(zmq_cluster(2, &ZmqOptions::loopback(), digest, token()).expect("zmq"), pulls),
            };
            println!("pull {t}: median {median:.1} µs, mean {mean:.1} µs ({pulls} pulls)");
        }
        other => panic!(
            "usage: rbench oneway <rdma|zmq> <bytes> <frames> | pull <rdma|zmq> <pulls>; got {other:?}"
        ),
    }
}
