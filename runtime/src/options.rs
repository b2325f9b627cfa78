//! Settings of the runtime itself (the protocol's are in [`parma_core::Config`]).

use std::time::Duration;

/// Settings of the driver and the worker handles. `Options::default()` suits most runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Most remote operations one worker may have in flight; a further one first waits for
    /// an earlier one to complete. Capped so that all workers together stay within
    /// `Config::requests_pending_max`.
    pub worker_inflight_max: usize,
    /// Added to `Config::request_timeout` to bound every wait for a remote operation: the node
    /// fails a request after its timeout, this is the backstop should that not happen.
    pub wait_margin: Duration,
    /// Most time a worker waits in a barrier, at a clock gate or in `finalize`'s barriers.
    /// `None` (the default): as long as it takes while every peer is alive. Another worker may
    /// legitimately compute for a long time between two barriers (an evaluation of a large
    /// model); a barrier still ends with an error when a peer fails (the transport's peer
    /// timeout says so), when a worker of this node is dropped without `finalize`
    /// (`OpError::WorkerLeft`), or when the node's waits are aborted (`NodeRuntime::abort`).
    /// With a limit, a barrier not passed in time ends with `OpError::BarrierTimeout`.
    pub barrier_timeout: Option<Duration>,
    /// Most commands queued from the workers to the node's driver. `None` (the default): room
    /// for every worker's operations in flight and for the commands the workers queue without
    /// waking the driver (intents, clock advances). A worker whose command finds the queue
    /// full waits for room (back-pressure), at most `Config::request_timeout`
    /// (`OpError::QueueStalled`). Must be at least 1.
    pub command_queue_max: Option<usize>,
    /// Most time shutdown waits for workers to finish and for the node's work to drain.
    pub drain_timeout: Duration,
    /// Most frames the driver holds that the transport has not taken yet (sends that got
    /// `WouldBlock`) before it stops reading frames from peers. Worker commands already wait
    /// above `Config::outbox_frames_max`; frames are read on beyond it so that two nodes
    /// whose sends to each other block do not stop reading each other. This ceiling only
    /// guards against a peer that sends without ever reading.
    pub unsent_frames_max: usize,
    /// Longest sleep of an idle driver between looks at its flags.
    pub idle_park_max: Duration,
    /// Sleep between polls of a transport that cannot wake the driver (`needs_polling`).
    pub poll_interval: Duration,
    /// How long a worker waiting for a remote operation keeps its core and watches for the
    /// result before it sleeps. A result that comes within it reaches the worker without a
    /// wake-up (tens of microseconds on a virtual machine whose other core is idle); the
    /// worker yields its core to any other runnable thread while it watches. Zero: sleep at
    /// once.
    pub wait_spin: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            worker_inflight_max: 1024,
            wait_margin: Duration::from_secs(10),
            barrier_timeout: None,
            command_queue_max: None,
            drain_timeout: Duration::from_secs(30),
            unsent_frames_max: 1 << 20,
            idle_park_max: Duration::from_millis(50),
            poll_interval: Duration::from_micros(50),
            wait_spin: Duration::from_micros(100),
        }
    }
}
