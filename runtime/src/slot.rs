//! A worker's completion slot: where the driver leaves the results of its remote operations.
//!
//! One per worker. Only two threads ever take its lock: the driver (delivering) and the
//! worker (waiting), so it is not a node-wide lock. Every wait has a deadline.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use parma_core::{Completion, OpError, Ticket};

/// Looks at the delivery count between two yields of a spinning wait.
const SPIN_LOOKS: u32 = 64;

/// A yield that took longer than this gave the core to another thread.
const YIELD_TAKEN: StdDuration = StdDuration::from_micros(5);

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
    /// The node's waits were aborted (`NodeRuntime::abort`): every wait ends with this.
    aborted: Option<OpError>,
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
    /// Counts deliveries and the close: a worker that spins before sleeping watches it
    /// instead of the lock.
    changes: AtomicU64,
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
        self.changes.fetch_add(1, Ordering::Release);
        drop(st);
        if wake {
            self.cv.notify_all();
        }
        true
    }

    /// Driver (on exit, also when unwinding): nothing more will be delivered.
    pub(crate) fn close(&self) {
        lock(&self.state).closed = true;
        self.changes.fetch_add(1, Ordering::Release);
        self.cv.notify_all();
    }

    /// Aborts: every wait, present and future, ends with `why`.
    pub(crate) fn abort(&self, why: OpError) {
        lock(&self.state).aborted.get_or_insert(why);
        self.changes.fetch_add(1, Ordering::Release);
        self.cv.notify_all();
    }

    /// Wakes a waiting worker so that its `ready` looks again (at something outside the slot,
    /// set before this call).
    pub(crate) fn interrupt(&self) {
        let st = lock(&self.state);
        self.changes.fetch_add(1, Ordering::Release);
        drop(st);
        self.cv.notify_all();
    }

    /// Runs `f` on the state once, without waiting.
    pub(crate) fn peek<R>(&self, f: impl FnOnce(&mut SlotState) -> R) -> R {
        f(&mut lock(&self.state))
    }

    /// Waits until `ready` returns `Some` (it runs on every delivery and interrupt), the slot
    /// closes (`Closed`), the node's waits are aborted (their error) or `deadline`, if any,
    /// passes (`Timeout`). For the first `spin` of the wait the
    /// worker keeps its core and watches for a delivery (yielding it to any other runnable
    /// thread); only then does it sleep, so that a delivery within `spin` costs the driver
    /// no wake-up call and the worker no trip through the scheduler.
    pub(crate) fn wait<R>(
        &self,
        deadline: Option<StdInstant>,
        spin: StdDuration,
        mut ready: impl FnMut(&mut SlotState) -> Option<R>,
    ) -> Result<R, OpError> {
        let mut st = lock(&self.state);
        let mut spin_until = None;
        loop {
            if let Some(r) = ready(&mut st) {
                return Ok(r);
            }
            if let Some(why) = st.aborted {
                return Err(why);
            }
            if st.closed {
                return Err(OpError::Closed);
            }
            let now = StdInstant::now();
            let left = deadline.map(|d| d.saturating_duration_since(now));
            if left == Some(StdDuration::ZERO) {
                return Err(OpError::Timeout);
            }
            let spin_end = *spin_until.get_or_insert_with(|| now + left.map_or(spin, |l| spin.min(l)));
            if now < spin_end {
                // Deliveries after this read (made under the lock we hold) change the count.
                let seen = self.changes.load(Ordering::Acquire);
                drop(st);
                if !self.spin_while(seen, spin_end) {
                    spin_until = Some(now);
                }
                st = lock(&self.state);
                continue;
            }
            st.waiting = true;
            st = match left {
                Some(left) => self.cv.wait_timeout(st, left).unwrap_or_else(PoisonError::into_inner).0,
                None => self.cv.wait(st).unwrap_or_else(PoisonError::into_inner),
            };
            st.waiting = false;
        }
    }

    /// Spins until a delivery changes the count from `seen` or `until` passes. Every few
    /// looks it yields the core; if another thread took it meanwhile, the machine has more
    /// runnable threads than cores, and spinning would only delay the threads that deliver:
    /// the wait sleeps at once instead (returns false).
    fn spin_while(&self, seen: u64, until: StdInstant) -> bool {
        loop {
            for _ in 0..SPIN_LOOKS {
                if self.changes.load(Ordering::Acquire) != seen {
                    return true;
                }
                std::hint::spin_loop();
            }
            let before = StdInstant::now();
            if before >= until {
                return false;
            }
            std::thread::yield_now();
            if before.elapsed() > YIELD_TAKEN {
                return false;
            }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use parma_core::{Completion, OpError, Ticket};

    use super::Slot;

    /// A spinning wait takes a result delivered while it spins, and a result delivered after
    /// the spin ended (the worker asleep) wakes it.
    #[test]
    fn a_wait_gets_results_delivered_while_it_spins_and_while_it_sleeps() {
        for (spin, after) in
            [(Duration::from_secs(5), Duration::from_millis(2)), (Duration::ZERO, Duration::from_millis(2))]
        {
            let slot = Arc::new(Slot::default());
            let deliverer = {
                let slot = slot.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(after);
                    slot.deliver(Ticket(7), Ok(Completion::Write))
                })
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let got = slot.wait(Some(deadline), spin, |st| st.take(Ticket(7)));
            assert!(matches!(got, Ok(Ok(Completion::Write))), "spin {spin:?}: {got:?}");
            assert!(deliverer.join().unwrap());
        }
    }

    /// A spin never outlasts the wait's deadline, and a close ends a spinning wait.
    #[test]
    fn a_spinning_wait_ends_at_its_deadline_or_when_the_slot_closes() {
        let slot = Arc::new(Slot::default());
        let start = Instant::now();
        let got = slot
            .wait(Some(start + Duration::from_millis(20)), Duration::from_secs(60), |st| st.take(Ticket(1)));
        assert_eq!(got.unwrap_err(), OpError::Timeout);
        assert!(start.elapsed() < Duration::from_secs(30), "the spin outlasted its deadline");

        let closer = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                slot.close();
            })
        };
        let got = slot.wait(Some(Instant::now() + Duration::from_secs(60)), Duration::from_secs(60), |st| {
            st.take(Ticket(1))
        });
        assert_eq!(got.unwrap_err(), OpError::Closed);
        closer.join().unwrap();
    }

    /// A wait without a deadline ends when the node's waits are aborted (while it spins and
    /// while it sleeps), and every later wait ends at once with the same error.
    #[test]
    fn an_abort_ends_waits_without_a_deadline() {
        for spin in [Duration::from_secs(60), Duration::ZERO] {
            let slot = Arc::new(Slot::default());
            let aborter = {
                let slot = slot.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    slot.abort(OpError::Aborted);
                })
            };
            let got = slot.wait(None, spin, |st| st.take(Ticket(1)));
            assert_eq!(got.unwrap_err(), OpError::Aborted, "spin {spin:?}");
            aborter.join().unwrap();
            assert_eq!(slot.wait(None, spin, |st| st.take(Ticket(2))).unwrap_err(), OpError::Aborted);
        }
    }

    /// An interrupt makes a sleeping wait look again at what its `ready` reads.
    #[test]
    fn an_interrupt_makes_a_sleeping_wait_look_again() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let slot = Arc::new(Slot::default());
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let (slot, flag) = (slot.clone(), flag.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                flag.store(true, SeqCst);
                slot.interrupt();
            })
        };
        let got = slot.wait(None, Duration::ZERO, |_| flag.load(SeqCst).then_some(()));
        assert_eq!(got, Ok(()));
        setter.join().unwrap();
    }
}
