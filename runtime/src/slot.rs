//! A worker's completion slot: where the driver leaves the results of its remote operations.
//!
//! One per worker. Only two threads ever take its lock: the driver (delivering) and the
//! worker (waiting), so it is not a node-wide lock. Every wait has a deadline.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant as StdInstant;

use parma_core::{Completion, OpError, Ticket};

/// The result of one operation, as the node gave it.
pub(crate) type OpResult = Result<Completion, OpError>;

#[derive(Debug, Default)]
pub(crate) struct SlotState {
    /// Results not yet taken by the worker.
    done: HashMap<Ticket, OpResult>,
    /// Tickets completed since the worker last looked (to release their keys).
    pub(crate) fresh: Vec<Ticket>,
    /// Tickets the worker stopped waiting for; their results are dropped on arrival.
    abandoned: HashSet<Ticket>,
    /// The driver has stopped: nothing more will be delivered.
    closed: bool,
    /// The worker sleeps on the condition variable (so a delivery must wake it).
    waiting: bool,
}

impl SlotState {
    /// Takes the result of `ticket` if it arrived.
    pub(crate) fn take(&mut self, ticket: Ticket) -> Option<OpResult> {
        self.done.remove(&ticket)
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
    cv: Condvar,
}

fn lock(m: &Mutex<SlotState>) -> MutexGuard<'_, SlotState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Slot {
    /// Driver: the operation `ticket` ended. Returns false if nobody waits for it any more.
    pub(crate) fn deliver(&self, ticket: Ticket, result: OpResult) -> bool {
        let mut st = lock(&self.state);
        if st.abandoned.remove(&ticket) || st.closed {
            return false;
        }
        st.done.insert(ticket, result);
        st.fresh.push(ticket);
        let wake = st.waiting;
        drop(st);
        if wake {
            self.cv.notify_all();
        }
        true
    }

    /// Driver (on exit, also when unwinding): nothing more will be delivered.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.cv.notify_all();
    }

    /// Runs `f` on the state once, without waiting.
    pub(crate) fn peek<R>(&self, f: impl FnOnce(&mut SlotState) -> R) -> R {
        f(&mut lock(&self.state))
    }

    /// Waits until `ready` returns `Some` (it runs on every delivery), the slot closes
    /// (`Closed`) or `deadline` passes (`Timeout`).
    pub(crate) fn wait<R>(
        &self,
        deadline: StdInstant,
        mut ready: impl FnMut(&mut SlotState) -> Option<R>,
    ) -> Result<R, OpError> {
        let mut st = lock(&self.state);
        loop {
            if let Some(r) = ready(&mut st) {
                return Ok(r);
            }
            if st.closed {
                return Err(OpError::Closed);
            }
            let now = StdInstant::now();
            if now >= deadline {
                return Err(OpError::Timeout);
            }
            st.waiting = true;
            st = self.cv.wait_timeout(st, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
            st.waiting = false;
        }
    }

    /// The worker gives up on `ticket`: returns its result if it arrived meanwhile, else makes
    /// sure a late result is dropped.
    pub(crate) fn abandon(&self, ticket: Ticket) -> Option<OpResult> {
        let mut st = lock(&self.state);
        if let Some(r) = st.done.remove(&ticket) {
            return Some(r);
        }
        if !st.closed {
            st.abandoned.insert(ticket);
        }
        None
    }
}
