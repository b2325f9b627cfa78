//! A node's driver run on a thread that a transport owns, instead of a thread of its own.
//!
//! A transport with an I/O thread (ZeroMQ's tokio runtime) can run the driver's loop there, as
//! one more task: then handing a frame to the transport, and a received frame to the node,
//! wake no other thread. A one-key remote pull wakes four threads instead of eight (the worker
//! and the I/O thread on each side). [`NodeRuntime::start_hosted`](crate::NodeRuntime::start_hosted)
//! starts a node that way; [`DriverHost`] is what the transport implements.

use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use parma_core::Transport;

use crate::driver::{CloseOnExit, Driver, Turn};
use crate::error::Undrained;

/// A waker that unparks `thread`: what a thread that drives a transport itself (parking
/// while it has nothing to do) registers with it ([`Transport::register_waker`]).
pub fn unpark_waker(thread: Thread) -> Waker {
    Waker::from(Arc::new(Unpark(thread)))
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a node's driver on a thread it owns. The host calls [`HostedDriver::turn`] again and
/// again on that thread, as its answers say, until it answers [`HostTurn::Done`].
pub trait DriverHost: Send {
    /// Takes `driver` over: from now on the host's thread runs it. An error means the host
    /// cannot (its thread is gone); the driver is dropped and the node does not start.
    fn host(&mut self, driver: HostedDriver) -> std::io::Result<()>;

    /// After the driver stopped: waits until the host's thread has ended, if it ends with
    /// the transport (the runtime calls it once, from `shutdown` or drop).
    fn join(self: Box<Self>);
}

/// What the host does after a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostTurn {
    /// Something happened: turn again (the host may first let its other work run).
    Again,
    /// Nothing to do: turn again once the waker given to `turn` fires, or after at most
    /// this long, whichever comes first. A wake that comes early or twice is harmless.
    Idle(Duration),
    /// The driver stopped; turning again does nothing.
    Done,
}

/// The driver's side of [`HostedDriver`], without the transport's type.
trait Turns: Send {
    fn begin(&mut self, waker: &Waker);
    fn turn(&mut self) -> Turn;
    fn end(self: Box<Self>, drained: Result<(), Undrained>) -> Result<(), Undrained>;
}

impl<T: Transport + Send> Turns for Driver<T> {
    fn begin(&mut self, waker: &Waker) {
        Driver::begin(self, waker);
    }
    fn turn(&mut self) -> Turn {
        Driver::turn(self)
    }
    fn end(self: Box<Self>, drained: Result<(), Undrained>) -> Result<(), Undrained> {
        Driver::end(*self, drained)
    }
}

/// A node's driver, handed to a [`DriverHost`] to run. Dropping it before it answered
/// [`HostTurn::Done`] stops the node as a closed transport would: every waiting worker gets
/// `Closed`, and the runtime's shutdown reports the transport closed.
pub struct HostedDriver {
    driver: Option<Box<dyn Turns>>,
    began: bool,
    /// The outcome, to the runtime handle that waits for it.
    done: SyncSender<Result<(), Undrained>>,
    _close: CloseOnExit,
}

impl HostedDriver {
    pub(crate) fn new<T: Transport + Send + 'static>(
        driver: Driver<T>,
        close: CloseOnExit,
        done: SyncSender<Result<(), Undrained>>,
    ) -> HostedDriver {
        HostedDriver { driver: Some(Box::new(driver)), began: false, done, _close: close }
    }

    /// One turn of the driver's loop. `waker` must wake the host's thread to turn again; the
    /// first turn hands it to the transport, the workers and the runtime handle, which wake
    /// the driver with it from then on (so give the same one every time).
    pub fn turn(&mut self, waker: &Waker) -> HostTurn {
        let Some(driver) = self.driver.as_mut() else { return HostTurn::Done };
        if !self.began {
            driver.begin(waker);
            self.began = true;
        }
        match driver.turn() {
            Turn::Again => HostTurn::Again,
            Turn::Idle(d) => HostTurn::Idle(d),
            Turn::Done(drained) => {
                self.finish(drained);
                HostTurn::Done
            }
        }
    }

    fn finish(&mut self, drained: Result<(), Undrained>) {
        if let Some(driver) = self.driver.take() {
            let outcome = driver.end(drained);
            // The handle may be gone already (dropped); then nobody waits for the outcome.
            let _ = self.done.try_send(outcome);
        }
    }
}

impl Drop for HostedDriver {
    fn drop(&mut self) {
        // Unwinding from a panic of the driver: send nothing, so the handle sees the sender
        // gone and reports the panic.
        if !std::thread::panicking() {
            self.finish(Err(Undrained::TransportClosed));
        }
    }
}

impl std::fmt::Debug for HostedDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedDriver").field("running", &self.driver.is_some()).finish()
    }
}
