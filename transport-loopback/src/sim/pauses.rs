//! The pause schedule of one simulated node.

use std::collections::VecDeque;

use super::{Faults, SplitMix64};

/// When a node is paused: seeded windows `[start, end)` drawn lazily from the node's own stream
/// (so the schedule does not depend on who asks when), plus a manual pause.
#[derive(Debug)]
pub(super) struct Pauses {
    rng: SplitMix64,
    gap_mean_us: u64,
    len_max_us: u64,
    /// Windows not yet over, in order; they are disjoint and never touch.
    windows: VecDeque<(u64, u64)>,
    /// End of the last window drawn.
    drawn_to: u64,
    manual_until: u64,
}

impl Pauses {
    pub(super) fn new(rng: SplitMix64, faults: &Faults) -> Pauses {
        let (gap_mean_us, len_max_us) =
            if faults.pauses() { (faults.pause_gap_mean_us, faults.pause_len_max_us) } else { (0, 0) };
        Pauses { rng, gap_mean_us, len_max_us, windows: VecDeque::new(), drawn_to: 0, manual_until: 0 }
    }

    /// The earliest time at or after `t` at which the node is not paused.
    pub(super) fn release(&mut self, t: u64) -> u64 {
        let t = t.max(self.manual_until);
        if self.gap_mean_us == 0 {
            return t;
        }
        // Every window that could hold `t` starts before `drawn_to`.
        while self.drawn_to <= t {
            let start = self.drawn_to.saturating_add(1 + self.rng.below(2 * self.gap_mean_us + 1));
            let end = start.saturating_add(1 + self.rng.below(self.len_max_us));
            self.windows.push_back((start, end));
            self.drawn_to = end;
        }
        // The next window starts after this one's end, so one jump is enough.
        match self.windows.iter().find(|&&(start, end)| start <= t && t < end) {
            Some(&(_, end)) => end,
            None => t,
        }
    }

    /// Drops the windows over by `now`.
    pub(super) fn forget_before(&mut self, now: u64) {
        while self.windows.front().is_some_and(|&(_, end)| end <= now) {
            self.windows.pop_front();
        }
    }

    pub(super) fn pause_until(&mut self, until: u64) {
        self.manual_until = self.manual_until.max(until);
    }

    /// No pause any more, seeded or manual.
    pub(super) fn heal(&mut self) {
        self.gap_mean_us = 0;
        self.windows.clear();
        self.manual_until = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::{Faults, Pauses, SplitMix64};

    #[test]
    fn release_skips_exactly_the_windows() {
        let faults = Faults { pause_gap_mean_us: 100, pause_len_max_us: 50, ..Faults::none() };
        let mut p = Pauses::new(SplitMix64::new(3), &faults);
        let mut paused = 0;
        for t in 0..10_000 {
            let r = p.release(t);
            assert!(r >= t);
            if r > t {
                paused += 1;
                assert_eq!(p.release(r), r, "a release time is not paused");
                assert!(r - t <= 50);
            }
        }
        assert!(paused > 0 && paused < 10_000, "some, not all, instants are paused: {paused}");
    }

    #[test]
    fn schedule_does_not_depend_on_queries() {
        let faults = Faults { pause_gap_mean_us: 100, pause_len_max_us: 50, ..Faults::none() };
        let mut a = Pauses::new(SplitMix64::new(9), &faults);
        let mut b = Pauses::new(SplitMix64::new(9), &faults);
        let _ = b.release(5_000);
        for t in (0..5_000).rev() {
            assert_eq!(a.release(t), b.release(t));
        }
    }

    #[test]
    fn manual_pause_and_heal() {
        let mut p = Pauses::new(SplitMix64::new(1), &Faults::none());
        assert_eq!(p.release(10), 10);
        p.pause_until(100);
        assert_eq!(p.release(10), 100);
        assert_eq!(p.release(150), 150);
        p.heal();
        assert_eq!(p.release(10), 10);
    }
}
