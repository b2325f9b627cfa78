//! How a worker waits for its own operations. Every wait has a deadline: the node fails a
//! request after `Config::request_timeout`; `Options::wait_margin` later the worker gives up
//! by itself, so that not even a bug can make it hang.

use std::time::{Duration as StdDuration, Instant as StdInstant};

use parma_core::{AccessKind, Completion, Key, OpError, Ticket as CoreTicket, WorkerAccess};

use super::{Ticket, Worker};
use crate::slot::SlotState;

/// Releases the keys of the operations that completed since the worker last looked.
fn reap(order: &mut WorkerAccess, st: &mut SlotState) {
    for t in st.fresh.drain(..) {
        order.complete(t);
    }
}

impl Worker {
    fn backstop(&self) -> Option<StdInstant> {
        let timeout = StdDuration::from_micros(self.shared.cfg.request_timeout.as_micros());
        Some(StdInstant::now() + timeout + self.shared.opts.wait_margin)
    }

    /// Looks at completions without waiting.
    pub(super) fn reap(&mut self) {
        let order = &mut self.access;
        self.shared.slots[self.id.index()].peek(|st| reap(order, st));
    }

    /// Waits until an `access` to `keys` no longer overtakes an operation of this worker.
    pub(super) fn settle(&mut self, keys: &[Key], access: AccessKind) -> Result<(), OpError> {
        let deadline = self.backstop();
        let order = &mut self.access;
        self.shared.slots[self.id.index()].wait(deadline, self.shared.wait_spin(), |st| {
            reap(order, st);
            (!order.conflicts(keys, access)).then_some(())
        })
    }

    /// Waits until one more operation fits in this worker's in-flight bound.
    pub(super) fn make_room(&mut self) -> Result<(), OpError> {
        if self.access.has_room() {
            return Ok(());
        }
        let deadline = self.backstop();
        let order = &mut self.access;
        self.shared.slots[self.id.index()]
            .wait(deadline, self.shared.wait_spin(), |st| {
                reap(order, st);
                order.has_room().then_some(())
            })
            .map_err(|e| if e == OpError::Timeout { OpError::Busy } else { e })
    }

    /// Waits until every operation of this worker completed (their results stay for `wait`).
    pub(super) fn wait_all(&mut self) -> Result<(), OpError> {
        if self.access.outstanding() == 0 {
            return Ok(());
        }
        let deadline = self.backstop();
        let order = &mut self.access;
        self.shared.slots[self.id.index()].wait(deadline, self.shared.wait_spin(), |st| {
            reap(order, st);
            (order.outstanding() == 0).then_some(())
        })
    }

    /// The completion of `t`, or `None` if it completed in the worker's own call.
    pub(super) fn wait_completion(&mut self, t: Ticket) -> Result<Option<Completion>, OpError> {
        if t.worker != self.id {
            return Err(OpError::InvalidArgument);
        }
        if !t.remote {
            return Ok(None);
        }
        let deadline = self.backstop();
        self.wait_until(t.id, deadline).map(Some)
    }

    /// Waits for the result of operation `id` until `deadline`; then gives up on it.
    pub(super) fn wait_until(
        &mut self,
        id: CoreTicket,
        deadline: Option<StdInstant>,
    ) -> Result<Completion, OpError> {
        self.wait_for(id, deadline, false)
    }

    /// Waits for the barrier or gate `id` until `deadline` (none: for as long as it takes), or
    /// until a worker of this node is dropped without `finalize` (`WorkerLeft`).
    pub(super) fn wait_barrier(
        &mut self,
        id: CoreTicket,
        deadline: Option<StdInstant>,
    ) -> Result<Completion, OpError> {
        self.wait_for(id, deadline, true)
    }

    fn wait_for(
        &mut self,
        id: CoreTicket,
        deadline: Option<StdInstant>,
        barrier: bool,
    ) -> Result<Completion, OpError> {
        let slot = &self.shared.slots[self.id.index()];
        let order = &mut self.access;
        let left = &self.shared.left;
        match slot.wait(deadline, self.shared.wait_spin(), |st| {
            reap(order, st);
            if let Some(r) = st.take(id) {
                return Some(r);
            }
            let worker = *left.get().filter(|_| barrier)?;
            Some(Err(OpError::WorkerLeft { worker }))
        }) {
            Ok(result) => result,
            Err(e) => {
                let late = slot.abandon(id);
                order.complete(id);
                late.unwrap_or(Err(e))
            }
        }
    }
}
