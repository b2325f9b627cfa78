//! Counters: the node's own ([`parma_core::Stats`]), the driver's, and each worker's.

use std::sync::atomic::{AtomicU64, Ordering};

/// Key accesses of one worker, split by where they were served.
///
/// "Local" keys were served from this node's store by the worker thread itself; "remote" keys
/// were handed to the node (after de-duplication), whether or not the node then found them
/// here after all (that case is `parma_core::Stats::keys_served_late_local`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Keys of pulls served locally.
    pub keys_pulled_local: u64,
    /// Keys of pulls handed to the node.
    pub keys_pulled_remote: u64,
    /// Keys of pushes and sets applied locally.
    pub keys_pushed_local: u64,
    /// Keys of pushes and sets handed to the node.
    pub keys_pushed_remote: u64,
    /// Commands that found the queue to the node full and waited for room (back-pressure:
    /// the node's driver did not keep up with this worker for a moment).
    pub commands_waited: u64,
}

impl WorkerStats {
    /// The sum of two workers' counters.
    pub fn plus(self, o: WorkerStats) -> WorkerStats {
        WorkerStats {
            keys_pulled_local: self.keys_pulled_local + o.keys_pulled_local,
            keys_pulled_remote: self.keys_pulled_remote + o.keys_pulled_remote,
            keys_pushed_local: self.keys_pushed_local + o.keys_pushed_local,
            keys_pushed_remote: self.keys_pushed_remote + o.keys_pushed_remote,
            commands_waited: self.commands_waited + o.commands_waited,
        }
    }

    /// Share of key accesses (pulls and pushes) that were remote, in `[0, 1]`.
    pub fn remote_share(&self) -> f64 {
        let remote = self.keys_pulled_remote + self.keys_pushed_remote;
        let all = remote + self.keys_pulled_local + self.keys_pushed_local;
        if all == 0 {
            0.0
        } else {
            remote as f64 / all as f64
        }
    }
}

/// Counters of the driver thread: the work it did between the transport and the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverStats {
    /// Frames handed to the node from the transport.
    pub frames_received: u64,
    /// Frames the transport accepted.
    pub frames_sent: u64,
    /// Bytes of the frames the transport accepted.
    pub bytes_sent: u64,
    /// Sends refused with `WouldBlock` (and retried later).
    pub sends_blocked: u64,
    /// Frames dropped because their peer failed or the transport refused them for good.
    pub frames_dropped: u64,
    /// Worker commands handed to the node.
    pub commands: u64,
    /// Completions delivered to workers.
    pub completions: u64,
    /// Completions nobody waited for any more (the worker gave up or is gone).
    pub completions_orphaned: u64,
    /// Peer failures reported to the node.
    pub peers_failed: u64,
    /// Times the driver went to sleep for lack of work.
    pub parks: u64,
    /// Intents the node refused (its intent bounds were full); the keys may be accessed
    /// remotely.
    pub intents_dropped: u64,
}

/// A snapshot of one node's counters. See [`crate::NodeRuntime::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// The node's protocol counters, as the driver last published them.
    pub node: parma_core::Stats,
    /// The driver thread's counters.
    pub driver: DriverStats,
    /// The transport's counters, as the driver last published them (zeros for a transport
    /// that keeps none).
    pub transport: parma_core::transport::TransportCounters,
    /// Each worker's counters, by worker id.
    pub workers: Vec<WorkerStats>,
}

impl Stats {
    /// The counters of all workers added up.
    pub fn workers_total(&self) -> WorkerStats {
        self.workers.iter().fold(WorkerStats::default(), |a, w| a.plus(*w))
    }
}

/// One worker's counters as other threads read them: the worker stores its plain counters
/// here after every call (its own cache line, so workers do not slow each other down).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct WorkerCounters([AtomicU64; 5]);

impl WorkerCounters {
    pub(crate) fn publish(&self, s: &WorkerStats) {
        let v = [
            s.keys_pulled_local,
            s.keys_pulled_remote,
            s.keys_pushed_local,
            s.keys_pushed_remote,
            s.commands_waited,
        ];
        for (a, v) in self.0.iter().zip(v) {
            a.store(v, Ordering::Relaxed);
        }
    }

    pub(crate) fn load(&self) -> WorkerStats {
        let [a, b, c, d, e] = &self.0;
        WorkerStats {
            keys_pulled_local: a.load(Ordering::Relaxed),
            keys_pulled_remote: b.load(Ordering::Relaxed),
            keys_pushed_local: c.load(Ordering::Relaxed),
            keys_pushed_remote: d.load(Ordering::Relaxed),
            commands_waited: e.load(Ordering::Relaxed),
        }
    }
}
