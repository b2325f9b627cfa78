//! A node's driver on the I/O thread: [`ZmqDriverHost`] runs `parma_runtime`'s
//! [`HostedDriver`] as a task of the transport's tokio runtime, beside the sockets' tasks.
//!
//! On its own thread, the driver hands a frame to the I/O thread (a wake of another thread)
//! and is handed received frames by it (another). As a task, both are a push to the runtime's
//! local queue. Workers wake it from their threads through the task's waker.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use parma_runtime::{DriverHost, HostTurn, HostedDriver};

/// Busy turns of the driver in a row before it lets the sockets' tasks run.
const TURNS_PER_YIELD: u32 = 8;

/// Runs a node's driver on a [`crate::ZmqTransport`]'s I/O thread; see
/// [`crate::ZmqTransport::driver_host`].
pub struct ZmqDriverHost {
    io: tokio::runtime::Handle,
    thread: JoinHandle<()>,
}

impl ZmqDriverHost {
    pub(crate) fn new(io: tokio::runtime::Handle, thread: JoinHandle<()>) -> ZmqDriverHost {
        ZmqDriverHost { io, thread }
    }
}

impl ZmqDriverHost {
    /// Runs any loop written as turns on the I/O thread, as [`DriverHost::host`] runs a node's
    /// driver: `turn` is called again and again as its answers say ([`HostTurn::Idle`]: once
    /// the waker it was given fires, or after the time), until [`HostTurn::Done`]. The waker
    /// is the same on every call. Should the I/O thread end first, `turn` is dropped unfinished.
    pub fn host_turns<F>(&mut self, turn: F) -> std::io::Result<()>
    where
        F: FnMut(&Waker) -> HostTurn + Send + 'static,
    {
        if self.thread.is_finished() {
            return Err(std::io::Error::other("the transport's I/O thread has ended"));
        }
        self.io.spawn(drive(turn));
        Ok(())
    }

    /// Waits until the I/O thread has ended (within the transport's linger of its close).
    pub fn join_io(self) {
        let _ = self.thread.join();
    }
}

impl DriverHost for ZmqDriverHost {
    fn host(&mut self, mut driver: HostedDriver) -> std::io::Result<()> {
        // Should the I/O thread end meanwhile, the task is dropped with its runtime, which
        // stops the node as a closed transport.
        self.host_turns(move |waker| driver.turn(waker))
    }

    fn join(self: Box<Self>) {
        // The I/O thread ends within the transport's linger of the close that the driver's
        // end made.
        self.join_io();
    }
}

impl std::fmt::Debug for ZmqDriverHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZmqDriverHost").field("io_thread_ended", &self.thread.is_finished()).finish()
    }
}

/// The driver's task: turns while there is work, yielding to the sockets every few turns;
/// sleeps until woken or its timer.
async fn drive(mut turn: impl FnMut(&Waker) -> HostTurn) {
    // A tokio task's waker stays the same for the task's life: the one of the first poll is
    // the one the driver hands out.
    let waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
    let mut busy = 0;
    loop {
        match turn(&waker) {
            HostTurn::Again => {
                busy += 1;
                if busy == TURNS_PER_YIELD {
                    busy = 0;
                    tokio::task::yield_now().await;
                }
            }
            HostTurn::Idle(d) => {
                busy = 0;
                woken_or(d).await;
            }
            _ => return,
        }
    }
}

/// Completes when the task is polled again (something woke it) or after `d`.
async fn woken_or(d: Duration) {
    let mut timer = pin!(tokio::time::sleep(d));
    let mut first = true;
    poll_fn(|cx| {
        if !std::mem::take(&mut first) {
            return Poll::Ready(());
        }
        timer.as_mut().poll(cx)
    })
    .await;
}
