//! What the runtime handle, the workers and the driver thread share.

use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Waker;

use parma_core::{Config, NodeId, Store};

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
