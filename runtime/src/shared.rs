//! What the runtime handle, the workers and the driver thread share.

use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Waker;
use std::time::Duration;

use parma_core::{Config, NodeId, OpError, Store, WorkerId};

use crate::options::Options;
use crate::slot::Slot;
use crate::stats::{DriverStats, WorkerCounters};

/// Most commands the workers of a node together queue without waking the driver (see
/// `Worker::nudge_lazily`; one per worker if there are more workers than this). The command
/// queue has room for them on top of the workers' operations in flight.
pub(crate) const LAZY_QUEUED_MAX: usize = 128;

/// Values of [`Shared::stop`].
pub(crate) const RUNNING: u8 = 0;
/// Stop once every worker is gone and the node is idle (or the drain timeout passed).
pub(crate) const STOP_GRACEFUL: u8 = 1;
/// Stop once the node is idle (or the drain timeout passed), whatever the workers do.
pub(crate) const STOP_NOW: u8 = 2;

/// Counters the driver publishes for [`crate::NodeRuntime::stats`].
#[derive(Debug, Default)]
pub(crate) struct Published {
    pub(crate) node: parma_core::Stats,
    pub(crate) driver: DriverStats,
    pub(crate) transport: parma_core::transport::TransportCounters,
    pub(crate) generation: u64,
}

/// Threads the nodes alive in this process run: each node's workers and its driver. Waits
/// spin only while this does not exceed the cores.
static NODE_THREADS: AtomicUsize = AtomicUsize::new(0);

/// A node's share of [`NODE_THREADS`], given back when its shared state goes (once the
/// driver, the runtime handle and every worker are gone).
struct ThreadClaim(usize);

impl ThreadClaim {
    fn new(threads: usize) -> ThreadClaim {
        NODE_THREADS.fetch_add(threads, SeqCst);
        ThreadClaim(threads)
    }
}

impl Drop for ThreadClaim {
    fn drop(&mut self) {
        NODE_THREADS.fetch_sub(self.0, SeqCst);
    }
}

/// The cores this process may use (1 if unknown).
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) me: NodeId,
    pub(crate) store: Arc<Store>,
    pub(crate) opts: Options,
    /// Completion slots, by worker id.
    pub(crate) slots: Box<[Slot]>,
    /// Published worker counters, by worker id.
    pub(crate) counters: Box<[WorkerCounters]>,
    /// Wakes the driver: its thread's, or the task's of the transport that hosts it.
    pub(crate) driver: OnceLock<Waker>,
    /// The driver is about to park or parked; a worker that queued a command unparks it.
    pub(crate) sleeping: AtomicBool,
    pub(crate) stop: AtomicU8,
    /// The driver has exited: new operations get `Closed`.
    pub(crate) closed: AtomicBool,
    /// Workers not yet finalized or dropped.
    pub(crate) workers_live: AtomicUsize,
    pub(crate) stats_requested: AtomicBool,
    pub(crate) published: Mutex<Published>,
    pub(crate) published_cv: Condvar,
    /// Peers the transport reported failed, in the order it did (at most one entry per node).
    pub(crate) failed_peers: Mutex<Vec<NodeId>>,
    /// Set once the node's waits were aborted (`NodeRuntime::abort`): why. Every later
    /// operation of its workers fails with it.
    pub(crate) aborted: OnceLock<OpError>,
    /// The first worker dropped without `finalize`: no barrier of this node can pass.
    pub(crate) left: OnceLock<WorkerId>,
    /// This node's workers and driver, counted in [`NODE_THREADS`].
    _threads: ThreadClaim,
}

impl Shared {
    pub(crate) fn new(cfg: Config, me: NodeId, store: Arc<Store>, opts: Options) -> Shared {
        let workers = usize::from(cfg.workers_per_node);
        Shared {
            cfg,
            me,
            store,
            opts,
            slots: (0..workers).map(|_| Slot::default()).collect(),
            counters: (0..workers).map(|_| WorkerCounters::default()).collect(),
            driver: OnceLock::new(),
            sleeping: AtomicBool::new(false),
            stop: AtomicU8::new(RUNNING),
            closed: AtomicBool::new(false),
            workers_live: AtomicUsize::new(workers),
            stats_requested: AtomicBool::new(false),
            published: Mutex::new(Published::default()),
            published_cv: Condvar::new(),
            failed_peers: Mutex::new(Vec::new()),
            aborted: OnceLock::new(),
            left: OnceLock::new(),
            _threads: ThreadClaim::new(workers + 1),
        }
    }

    /// How long a worker's wait spins before it sleeps: `Options::wait_spin` while every
    /// worker and driver of the nodes in this process has a core of its own, else zero (a
    /// spinning worker would hold a core that a driver or another worker needs).
    pub(crate) fn wait_spin(&self) -> Duration {
        if NODE_THREADS.load(Relaxed) <= cores() {
            self.opts.wait_spin
        } else {
            Duration::ZERO
        }
    }

    /// Wakes the driver unconditionally (once it has begun; before, it has not slept yet).
    pub(crate) fn wake_driver(&self) {
        if let Some(w) = self.driver.get() {
            w.wake_by_ref();
        }
    }

    /// After queueing a command: unparks the driver if it is going to sleep. Pairs with the
    /// fence in the driver's park (a Dekker handshake: one of the two sees the other's write).
    pub(crate) fn nudge_driver(&self) {
        fence(SeqCst);
        if self.sleeping.load(SeqCst) && self.sleeping.swap(false, SeqCst) {
            self.wake_driver();
        }
    }

    /// Ends every wait of this node's workers, and fails their later operations, with `why`
    /// (the first reason given stays). The node itself runs on.
    pub(crate) fn abort(&self, why: OpError) {
        let _ = self.aborted.set(why);
        let why = self.aborted.get().copied().unwrap_or(why);
        for s in self.slots.iter() {
            s.abort(why);
        }
    }

    /// Worker `worker` was dropped without `finalize`: the barriers its siblings wait in, or
    /// will enter, end with `WorkerLeft`.
    pub(crate) fn worker_left(&self, worker: WorkerId) {
        let _ = self.left.set(worker);
        for s in self.slots.iter() {
            s.interrupt();
        }
    }

    pub(crate) fn published(&self) -> MutexGuard<'_, Published> {
        self.published.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Driver exit (also when unwinding from a panic): every wait ends with `Closed`.
    pub(crate) fn close(&self) {
        self.closed.store(true, SeqCst);
        for s in self.slots.iter() {
            s.close();
        }
        drop(self.published());
        self.published_cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use parma_core::{Config, Layout, NodeId, Store};

    use super::{cores, Shared};
    use crate::options::Options;

    /// Whatever other nodes live in the process, one node with more workers than cores makes
    /// every wait sleep at once.
    #[test]
    fn waits_do_not_spin_while_the_nodes_threads_outnumber_the_cores() {
        let workers = u16::try_from(cores()).unwrap_or(u16::MAX - 1) + 1;
        let cfg = Config::new(1, workers, Layout::uniform(8, 1).unwrap());
        let store = Arc::new(Store::new(&cfg, NodeId(0)));
        let opts = Options { wait_spin: Duration::from_millis(1), ..Options::default() };
        let shared = Shared::new(cfg, NodeId(0), store, opts);
        assert_eq!(shared.wait_spin(), Duration::ZERO);
    }
}
