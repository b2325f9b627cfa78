//! What every part of the benchmark shares: the cluster token, a waker that unparks a thread,
//! the transports' options, the worker threads that host one side of a comparison, and the
//! statistics of the tables.

use std::sync::{mpsc, Arc, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parma_core::session::Token;
use parma_core::NodeId;
use parma_runtime::HostTurn;
use parma_transport_zmq::{ZmqDriverHost, ZmqOptions};

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

/// A waker that unparks the calling thread.
pub fn thread_waker() -> Waker {
    parma_runtime::host::unpark_waker(std::thread::current())
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

/// A side that does rounds on command and reports each one's result: the payload bytes it
/// received (a receiving side) or sent (a sending side). It runs on a thread of its own
/// ([`Side::spawn`]) or as a task of a transport's I/O thread ([`Side::on_io`]), as a node's
/// driver does. Dropping it ends it.
pub struct Side {
    cmd: Option<Cmd>,
    done: mpsc::Receiver<Result<u64, String>>,
    thread: Option<JoinHandle<()>>,
    io: Option<ZmqDriverHost>,
}

enum Cmd {
    Thread(tokio::sync::mpsc::UnboundedSender<Round>),
    /// Rounds, and the waker of the task that takes them.
    Io(mpsc::Sender<Round>, Arc<Mutex<Option<Waker>>>),
}

/// What runs on a side's thread: takes rounds from the channel until it closes, and reports
/// each round's result.
pub type SideLoop =
    Box<dyn FnOnce(tokio::sync::mpsc::UnboundedReceiver<Round>, mpsc::Sender<Result<u64, String>>) + Send>;

/// What a turn of a side on an I/O thread leaves to do.
pub enum Step {
    /// More to do at once.
    Again,
    /// Nothing until the waker fires (the transport's room or frames).
    Idle,
    /// The round is over: the bytes sent or received.
    Done(Result<u64, String>),
}

/// A side's work, written as turns so that a transport's I/O thread can run it.
pub trait RoundWork: Send + 'static {
    /// A round starts; `waker` wakes the task that runs the turns.
    fn begin(&mut self, round: Round, waker: &Waker);
    /// One turn of the round.
    fn step(&mut self) -> Step;
}

impl Side {
    pub fn spawn(name: &str, body: SideLoop) -> Side {
        let (cmd, rounds) = tokio::sync::mpsc::unbounded_channel();
        let (report, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || body(rounds, report))
            .expect("a benchmark thread");
        Side { cmd: Some(Cmd::Thread(cmd)), done, thread: Some(thread), io: None }
    }

    /// `work` on a thread of its own, parking (at most 1 ms) where a task would sleep.
    pub fn on_thread(name: &str, mut work: impl RoundWork) -> Side {
        Side::spawn(
            name,
            Box::new(move |mut rounds, report| {
                let waker = thread_waker();
                while let Some(r) = rounds.blocking_recv() {
                    work.begin(r, &waker);
                    let result = loop {
                        match work.step() {
                            Step::Again => {}
                            Step::Idle => std::thread::park_timeout(Duration::from_millis(1)),
                            Step::Done(result) => break result,
                        }
                    };
                    if report.send(result).is_err() {
                        break;
                    }
                }
            }),
        )
    }

    /// `work` as a task of the I/O thread `host` belongs to.
    pub fn on_io(mut host: ZmqDriverHost, mut work: impl RoundWork) -> Side {
        let (cmd, rounds) = mpsc::channel::<Round>();
        let (report, done) = mpsc::channel();
        let slot: Arc<Mutex<Option<Waker>>> = Arc::default();
        let task_slot = Arc::clone(&slot);
        let mut busy = false;
        host.host_turns(move |waker| {
            let mut s = task_slot.lock().expect("the waker slot");
            if s.is_none() {
                *s = Some(waker.clone());
            }
            drop(s);
            if !busy {
                match rounds.try_recv() {
                    Ok(r) => {
                        work.begin(r, waker);
                        busy = true;
                    }
                    Err(mpsc::TryRecvError::Empty) => return HostTurn::Idle(Duration::from_secs(1)),
                    Err(mpsc::TryRecvError::Disconnected) => return HostTurn::Done,
                }
            }
            match work.step() {
                Step::Again => HostTurn::Again,
                Step::Idle => HostTurn::Idle(Duration::from_millis(1)),
                Step::Done(r) => {
                    busy = false;
                    let _ = report.send(r);
                    HostTurn::Again
                }
            }
        })
        .expect("the transport's I/O thread runs");
        Side { cmd: Some(Cmd::Io(cmd, slot)), done, thread: None, io: Some(host) }
    }

    /// Starts a round; [`Side::wait`] gives its result.
    pub fn start(&self, round: Round) {
        let sent = match &self.cmd {
            Some(Cmd::Thread(c)) => c.send(round).is_ok(),
            Some(Cmd::Io(c, slot)) => {
                let sent = c.send(round).is_ok();
                wake(slot);
                sent
            }
            None => false,
        };
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

/// Wakes the task whose waker is in `slot`, if it has run yet (if not, it looks for rounds
/// as it first runs).
fn wake(slot: &Mutex<Option<Waker>>) {
    if let Some(w) = slot.lock().expect("the waker slot").as_ref() {
        w.wake_by_ref();
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(Cmd::Io(c, slot)) = self.cmd.take() {
            // The task sees its rounds end and drops its transport, which closes.
            drop(c);
            wake(&slot);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(h) = self.io.take() {
            h.join_io();
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
