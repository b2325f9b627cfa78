//! What the runtime handle, the workers and the driver thread share.

use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;

use parma_core::{Config, NodeId, Store};

use crate::options::Options;
use crate::slot::Slot;
use crate::stats::{DriverStats, WorkerCounters};

/// Commands queued without waking the driver ([`Shared::nudge_lazily`]) at which a worker
/// wakes it after all. The command queue has room for twice as many, and one per worker, on
/// top of the workers' operations in flight.
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
    /// The driver thread, to unpark it.
    pub(crate) driver: OnceLock<Thread>,
    /// The driver is about to park or parked; a worker that queued a command unparks it.
    pub(crate) sleeping: AtomicBool,
    /// Commands queued without waking the driver (see [`Shared::nudge_lazily`]) since it
    /// last took commands.
    pub(crate) lazy_queued: AtomicUsize,
    pub(crate) stop: AtomicU8,
    /// The driver has exited: new operations get `Closed`.
    pub(crate) closed: AtomicBool,
    /// Workers not yet finalized or dropped.
    pub(crate) workers_live: AtomicUsize,
    pub(crate) stats_requested: AtomicBool,
    pub(crate) published: Mutex<Published>,
    pub(crate) published_cv: Condvar,
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
            lazy_queued: AtomicUsize::new(0),
            stop: AtomicU8::new(RUNNING),
            closed: AtomicBool::new(false),
            workers_live: AtomicUsize::new(workers),
            stats_requested: AtomicBool::new(false),
            published: Mutex::new(Published::default()),
            published_cv: Condvar::new(),
        }
    }

    /// Unparks the driver thread unconditionally.
    pub(crate) fn wake_driver(&self) {
        if let Some(t) = self.driver.get() {
            t.unpark();
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

    /// After queueing a command that the node needs only when its next sync round starts (an
    /// intent, a clock advance): wakes the driver only once many such commands are queued, so
    /// that the driver does not wake for every step of every worker.
    ///
    /// This delays nothing the node does. It looks at intents and clocks only when a sync
    /// round starts, which is a timeout of the node: the driver wakes for it by itself, and
    /// in each turn it takes the queued commands before it handles a due timeout. Under a
    /// technique without sync rounds these commands only count (intents are ignored, the
    /// clock is not read). The threshold keeps these commands within the room the queue has for
    /// them, so that they neither crowd out the workers' operations nor block a worker while
    /// the driver sleeps. (Workers racing past the threshold together can leave the count
    /// short by fewer than the number of workers; the room is twice the threshold plus one
    /// per worker.)
    pub(crate) fn nudge_lazily(&self) {
        if self.lazy_queued.fetch_add(1, Relaxed) + 1 >= LAZY_QUEUED_MAX {
            self.lazy_queued.store(0, Relaxed);
            self.nudge_driver();
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
