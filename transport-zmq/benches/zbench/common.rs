//! What every part of the benchmark shares: the cluster token, a waker that unparks a thread,
//! the transports' options, the worker threads that host one side of a comparison, and the
//! statistics of the tables.

use std::sync::{mpsc, Arc};
use std::task::{Wake, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use parma_core::session::Token;
use parma_core::NodeId;
use parma_transport_zmq::ZmqOptions;

/// The longest one round of any measurement may take before the benchmark gives up on it.
pub const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// A token for benchmarks (not a keyed hash; it differs by nonce, ends and digest). Both
/// processes derive it from the same key.
pub struct BenchToken(pub u64);

impl Token for BenchToken {
    fn prove(&self, nonce: u64, prover: NodeId, verifier: NodeId, digest: u64) -> [u8; 32] {
        let mut h = self.0 ^ nonce.rotate_left(17) ^ digest.rotate_left(33);
        h ^= (u64::from(prover.0) << 16) | u64::from(verifier.0);
        let mut out = [0; 32];
        for chunk in out.chunks_mut(8) {
            h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ 0x5851_f42d_4c95_7f2d;
            chunk.copy_from_slice(&h.to_le_bytes());
        }
        out
    }
}

/// The transport's options in every measurement: the defaults on 127.0.0.1.
pub fn zmq_options() -> ZmqOptions {
    ZmqOptions::loopback()
}

/// Unparks the thread that made it.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that unparks the calling thread.
pub fn thread_waker() -> Waker {
    Waker::from(Arc::new(ThreadWaker(std::thread::current())))
}

/// A tokio runtime on the current thread, as the transport's I/O thread runs one.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// One round's work for a side of a one-way comparison: `frames` frames of `size` bytes.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    pub frames: u64,
    pub size: usize,
}

/// A thread that does rounds on command and reports each one's result: the payload bytes it
/// received (a receiving side) or sent (a sending side). Dropping it ends the thread.
pub struct Side {
    cmd: Option<tokio::sync::mpsc::UnboundedSender<Round>>,
    done: mpsc::Receiver<Result<u64, String>>,
    thread: Option<JoinHandle<()>>,
}

/// What runs on a side's thread: takes rounds from the channel until it closes, and reports
/// each round's result.
pub type SideLoop =
    Box<dyn FnOnce(tokio::sync::mpsc::UnboundedReceiver<Round>, mpsc::Sender<Result<u64, String>>) + Send>;

impl Side {
    pub fn spawn(name: &str, body: SideLoop) -> Side {
        let (cmd, rounds) = tokio::sync::mpsc::unbounded_channel();
        let (report, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || body(rounds, report))
            .expect("a benchmark thread");
        Side { cmd: Some(cmd), done, thread: Some(thread) }
    }

    /// Starts a round; [`Side::wait`] gives its result.
    pub fn start(&self, round: Round) {
        let sent = self.cmd.as_ref().is_some_and(|c| c.send(round).is_ok());
        assert!(sent, "a benchmark side ended early");
    }

    /// The result of the round started last.
    pub fn wait(&self) -> Result<u64, String> {
        match self.done.recv_timeout(ROUND_TIMEOUT) {
            Ok(r) => r,
            Err(e) => Err(format!("no result within {ROUND_TIMEOUT:?}: {e}")),
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.cmd.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The deadline of a round that starts now.
pub fn deadline() -> Instant {
    Instant::now() + ROUND_TIMEOUT
}

/// `v` sorted.
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// The `q`-quantile of sorted `v` (nearest rank), or NaN if it is empty.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The median of `v`, its smallest and its largest, as `1.23 (1.10–1.40)`.
pub fn spread(v: &[f64], digits: usize) -> String {
    let s = sorted(v.to_vec());
    let (lo, mid, hi) = (quantile(&s, 0.0), quantile(&s, 0.5), quantile(&s, 1.0));
    format!("{mid:.digits$} ({lo:.digits$}-{hi:.digits$})")
}

/// The CPU time of every thread of process `pid` (this one if `None`), in ns, from
/// `/proc/<pid>/task/*/schedstat` (0 where the system does not tell). Threads that ended are
/// not counted: take differences over threads that live through the measurement.
pub fn cpu_ns(pid: Option<u32>) -> u64 {
    let dir = match pid {
        Some(p) => format!("/proc/{p}/task"),
        None => "/proc/self/task".to_string(),
    };
    let Ok(tasks) = std::fs::read_dir(dir) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .sum()
}

/// The machine's load averages over 1, 5 and 15 minutes, if the system tells them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}
