//! Announcing the keys a worker will use: one call whose meaning the core decides from the
//! configuration ([`parma_core::Config::announcement`]), so that a training loop does not
//! branch on the technique.

use parma_core::{Clock, Key, OpError};

use super::{Ticket, Worker};

/// Refuses a clock window `[start, end)` that holds no clock.
pub(crate) fn check_window(start: Clock, end: Clock) -> Result<(), OpError> {
    if start >= end {
        return Err(OpError::IntentWindow { start, end });
    }
    Ok(())
}

impl Worker {
    /// Declares that this worker will access `keys` while its clock is in `[start, end)` and
    /// lets the configuration decide what that means: under the adaptive techniques (and
    /// under SparseSSP) an intent, which the node acts on when action timing says so; under
    /// relocation a `localize`, whose ticket is returned (wait for it before the window's
    /// first access, or the keys may still be remote); under static partitioning nothing
    /// beyond validating the keys. Announce early: a look-ahead of a few hundred to a few
    /// thousand examples' worth of clocks lets the keys arrive before they are used
    /// ([`crate::Prefetch`] keeps that distance for a loop of steps).
    ///
    /// Errors: an empty window (`IntentWindow`) or a key outside the layout announce nothing;
    /// otherwise the errors of `intent` and `localize` (under relocation with SparseSSP, a
    /// failed `localize` leaves the intent declared).
    pub fn announce(&mut self, keys: &[Key], start: Clock, end: Clock) -> Result<Option<Ticket>, OpError> {
        check_window(start, end)?;
        let plan = self.shared.cfg.announcement();
        if plan.intent() {
            self.intent(keys, start, end)?;
        } else {
            self.validate_keys(keys)?;
        }
        if plan.localize() {
            return self.localize(keys).map(Some);
        }
        Ok(None)
    }
}
