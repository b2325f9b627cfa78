//! [`NodeRuntime`]: starts one node's driver (on a thread of its own or on a transport's
//! thread) and its workers, and stops them.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration as StdDuration;

use parma_core::{Config, Node, NodeId, OpError, Store, Transport, WorkerId};

use crate::driver::{CloseOnExit, Driver};
use crate::error::{Error, Undrained};
use crate::host::{DriverHost, HostedDriver};
use crate::inspect::StoreView;
use crate::options::Options;
use crate::shared::{Shared, LAZY_QUEUED_MAX, STOP_GRACEFUL, STOP_NOW};
use crate::stats::Stats;
use crate::worker::Worker;

/// How much longer than its drain timeout a stop waits for a hosted driver's outcome.
const HOST_GRACE: StdDuration = StdDuration::from_secs(5);

/// Longest wait of [`NodeRuntime::stats`] for the driver to publish fresh counters.
const STATS_WAIT: StdDuration = StdDuration::from_millis(200);

/// One running node: its driver thread, its store and the handles of its workers.
///
/// Dropping it stops the driver (after at most `Options::drain_timeout` of draining the node's
/// own work, without waiting for workers) and joins the thread; [`NodeRuntime::shutdown`] does
/// the same after waiting for the workers, and reports how it went.
pub struct NodeRuntime {
    shared: Arc<Shared>,
    /// In a lock only so that the handle stays `Sync` whatever the host is.
    driver: Mutex<Option<DriverHandle>>,
}

/// Where the driver runs, to wait for its end.
enum DriverHandle {
    Thread(JoinHandle<Result<(), Undrained>>),
    Hosted { host: Box<dyn DriverHost>, done: Receiver<Result<(), Undrained>> },
}

/// Checks the arguments and builds the node, its driver (not yet started) and its workers.
fn prepare<T>(cfg: Config, me: NodeId, transport: T, opts: Options) -> Result<(Driver<T>, Vec<Worker>), Error>
where
    T: Transport + Send + 'static,
{
    cfg.validate(me)?;
    if transport.local_id() != me {
        return Err(Error::WrongTransport { me, transport: transport.local_id() });
    }
    if cfg.frame_len_max > transport.frame_len_max() {
        return Err(Error::FrameLenMax { config: cfg.frame_len_max, transport: transport.frame_len_max() });
    }
    let store = Arc::new(Store::new(&cfg, me));
    let node = Node::with_store(cfg.clone(), me, Arc::clone(&store))?;
    // One sampler per worker, sharing the node's registry of distributions.
    let samplers: Vec<_> = (0..cfg.workers_per_node).filter_map(|i| node.sampler(WorkerId(i)).ok()).collect();
    let workers = usize::from(cfg.workers_per_node);
    // All workers' operations in flight fit into the node's table of pending requests,
    // and into the command queue: it never refuses a command that respects the bound.
    let inflight_max = opts.worker_inflight_max.min(parma_core::access::inflight_max(&cfg));
    // On top: room for the commands queued without waking the driver (intents, clocks).
    // A smaller bound is back-pressure: a worker waits for room (`Worker::send`).
    let queue_max = match opts.command_queue_max {
        Some(0) => return Err(Error::Option { name: "command_queue_max", why: "must be at least 1" }),
        Some(n) => n,
        None => workers * (inflight_max + 2) + LAZY_QUEUED_MAX,
    };
    let (tx, rx) = sync_channel(queue_max);
    let shared = Arc::new(Shared::new(cfg, me, store, opts));
    let driver = Driver::new(node, transport, Arc::clone(&shared), rx);
    let handles = (0..shared.cfg.workers_per_node)
        .zip(samplers)
        .map(|(i, s)| Worker::new(WorkerId(i), Arc::clone(&shared), tx.clone(), queue_max, inflight_max, s))
        .collect();
    Ok((driver, handles))
}

impl NodeRuntime {
    /// Starts node `me` of the cluster `cfg` describes on `transport` with default
    /// [`Options`]. Returns the runtime and `cfg.workers_per_node` workers, `WorkerId(0..n)`.
    pub fn start<T>(cfg: Config, me: NodeId, transport: T) -> Result<(NodeRuntime, Vec<Worker>), Error>
    where
        T: Transport + Send + 'static,
    {
        NodeRuntime::start_with(cfg, me, transport, Options::default())
    }

    /// [`NodeRuntime::start`] with explicit runtime options.
    pub fn start_with<T>(
        cfg: Config,
        me: NodeId,
        transport: T,
        opts: Options,
    ) -> Result<(NodeRuntime, Vec<Worker>), Error>
    where
        T: Transport + Send + 'static,
    {
        let (driver, workers) = prepare(cfg, me, transport, opts)?;
        let shared = Arc::clone(driver.shared());
        let thread = thread::Builder::new()
            .name(format!("parma-driver-{}", me.0))
            .spawn(move || driver.run())
            .map_err(Error::Spawn)?;
        Ok((NodeRuntime { shared, driver: Mutex::new(Some(DriverHandle::Thread(thread))) }, workers))
    }

    /// Starts node `me` with its driver run by `host` (a transport's I/O thread; see
    /// [`crate::host`]) instead of a thread of its own. Otherwise as [`NodeRuntime::start_with`].
    pub fn start_hosted<T, H>(
        cfg: Config,
        me: NodeId,
        transport: T,
        mut host: H,
        opts: Options,
    ) -> Result<(NodeRuntime, Vec<Worker>), Error>
    where
        T: Transport + Send + 'static,
        H: DriverHost + 'static,
    {
        let (driver, workers) = prepare(cfg, me, transport, opts)?;
        let shared = Arc::clone(driver.shared());
        let (done_tx, done) = sync_channel(1);
        let hosted = HostedDriver::new(driver, CloseOnExit(Arc::clone(&shared)), done_tx);
        host.host(hosted).map_err(Error::Spawn)?;
        let driver = DriverHandle::Hosted { host: Box::new(host), done };
        Ok((NodeRuntime { shared, driver: Mutex::new(Some(driver)) }, workers))
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.shared.me
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.shared.cfg
    }

    /// A read-only view of the node's parameter store, for tests and tools (workers access
    /// the store through their handles; nothing may write it around them).
    pub fn inspect(&self) -> StoreView {
        StoreView::new(Arc::clone(&self.shared.store))
    }

    /// Whether the driver has stopped (shut down, or its transport was closed under it).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(SeqCst)
    }

    /// The peers this node's transport reported failed (crashed, unreachable for longer than
    /// the transport's timeout, or closed), in the order it reported them. An application
    /// that cannot go on without every node (training without failover) stops when this is
    /// not empty.
    pub fn failed_peers(&self) -> Vec<NodeId> {
        self.shared.failed_peers.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Aborts the waits of this node's workers: every wait ends at once, and every later
    /// operation of a worker fails, with `OpError::Aborted`. The node runs on (its peers are
    /// served, `shutdown` drains it as usual). For a job that cannot go on once one of its
    /// workers failed: the others stop at once instead of waiting in a barrier the failed one
    /// never reaches. Callable from any thread, any number of times.
    pub fn abort(&self) {
        self.shared.abort(OpError::Aborted);
    }

    /// Whether [`NodeRuntime::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.shared.aborted.get().is_some()
    }

    /// A snapshot of the counters: asks the driver for fresh node counters (waiting a moment
    /// for them) and adds every worker's published counters.
    pub fn stats(&self) -> Stats {
        if !self.is_closed() {
            let generation = self.shared.published().generation;
            self.shared.stats_requested.store(true, SeqCst);
            self.shared.wake_driver();
            let guard = self.shared.published();
            let _ = self
                .shared
                .published_cv
                .wait_timeout_while(guard, STATS_WAIT, |p| {
                    p.generation == generation && !self.shared.closed.load(SeqCst)
                })
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.snapshot()
    }

    /// Stops the node: waits (at most `Options::drain_timeout`) until every worker has been
    /// finalized or dropped and the node's outstanding work has drained, closes the transport
    /// and joins the driver thread. `Err(NotDrained)` carries the counters if the time ran
    /// out; the thread is joined either way.
    pub fn shutdown(mut self) -> Result<Stats, Error> {
        let drained = self.stop(STOP_GRACEFUL)?;
        let stats = self.snapshot();
        match drained {
            Ok(()) => Ok(stats),
            Err(why) => Err(Error::NotDrained(Box::new(stats), why)),
        }
    }

    fn stop(&mut self, mode: u8) -> Result<Result<(), Undrained>, Error> {
        let Some(driver) = self.driver.get_mut().unwrap_or_else(PoisonError::into_inner).take() else {
            return Ok(Ok(()));
        };
        self.shared.stop.store(mode, SeqCst);
        self.shared.wake_driver();
        match driver {
            DriverHandle::Thread(thread) => {
                // A driver thread that has not begun has no waker yet: it sees the stop as it
                // begins, unless it parks first; unparking covers that.
                thread.thread().unpark();
                thread.join().map_err(|_| Error::DriverPanicked)
            }
            DriverHandle::Hosted { host, done } => {
                // The driver ends within the drain timeout; a host that drops it (its thread
                // ended) sends its outcome as it does; one that panicked sends nothing. A host
                // that stopped turning it at all is not waited for longer, nor joined.
                let wait = self.shared.opts.drain_timeout + HOST_GRACE;
                match done.recv_timeout(wait) {
                    Ok(outcome) => {
                        host.join();
                        Ok(outcome)
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        host.join();
                        Err(Error::DriverPanicked)
                    }
                    Err(RecvTimeoutError::Timeout) => Ok(Err(Undrained::HostStalled)),
                }
            }
        }
    }

    fn snapshot(&self) -> Stats {
        let p = self.shared.published();
        Stats {
            node: p.node.clone(),
            driver: p.driver,
            transport: p.transport,
            workers: self.shared.counters.iter().map(|c| c.load()).collect(),
        }
    }
}

impl Drop for NodeRuntime {
    fn drop(&mut self) {
        let _ = self.stop(STOP_NOW);
    }
}

impl std::fmt::Debug for NodeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRuntime").field("id", &self.shared.me).field("closed", &self.is_closed()).finish()
    }
}
