//! The fault settings of a simulated network.

use super::SplitMix64;

/// Fault settings of a [`SimNet`](super::SimNet). All times are virtual microseconds.
///
/// Swarm testing: [`Faults::from_seed`] derives every setting from one seed, so a seed sweep
/// covers calm and hostile networks alike, and a failing seed names its network exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// Smallest base delay of a pair. Each pair draws its base delay once, uniformly in
    /// `[delay_min_us, delay_max_us]`.
    pub delay_min_us: u64,
    /// Largest base delay of a pair.
    pub delay_max_us: u64,
    /// Each frame adds a delay drawn uniformly in `[0, jitter_us]` to its pair's base delay
    /// (order within the pair is kept regardless).
    pub jitter_us: u64,
    /// Mean time between two pauses of one node, 0 for no seeded pauses. While a node is paused,
    /// frames to it are held.
    pub pause_gap_mean_us: u64,
    /// Longest seeded pause; each lasts uniformly `[1, pause_len_max_us]`.
    pub pause_len_max_us: u64,
    /// Frames per pair sent and not yet received before sends block. At least 1.
    pub pair_frames_max: usize,
    /// The largest frame accepted, in bytes.
    pub frame_len_max: usize,
}

impl Faults {
    /// Default [`Faults::pair_frames_max`]: large, but still a bound.
    pub const PAIR_FRAMES_MAX_DEFAULT: usize = 1 << 20;
    /// Default [`Faults::frame_len_max`], the same as the threaded transport's.
    pub const FRAME_LEN_MAX_DEFAULT: usize = 64 << 20;

    /// A perfect network: no delay, no pause; a frame can be received as soon as it is sent.
    pub const fn none() -> Faults {
        Faults {
            delay_min_us: 0,
            delay_max_us: 0,
            jitter_us: 0,
            pause_gap_mean_us: 0,
            pause_len_max_us: 0,
            pair_frames_max: Faults::PAIR_FRAMES_MAX_DEFAULT,
            frame_len_max: Faults::FRAME_LEN_MAX_DEFAULT,
        }
    }

    /// A calm network for measurements: every frame takes exactly `delay_us` on every pair; no
    /// jitter, no pause, the default capacities.
    pub const fn fixed_delay(delay_us: u64) -> Faults {
        Faults { delay_min_us: delay_us, delay_max_us: delay_us, ..Faults::none() }
    }

    /// Every setting derived from `seed`: delays from none to 100 ms, jitter from none to 10 ms,
    /// pauses in half the seeds, small pair capacities (back-pressure) in a quarter of them.
    /// `frame_len_max` stays the default, since it is configuration rather than a fault.
    pub fn from_seed(seed: u64) -> Faults {
        let mut rng = SplitMix64::derive(seed, &[0xFA_u64]);
        let delay_max_us = rng.pick(&[0, 10, 100, 1_000, 10_000, 100_000]);
        let delay_min_us = if rng.one_in(2) { 0 } else { rng.below(delay_max_us + 1) };
        let jitter_us = rng.pick(&[0, 1, 10, 100, 1_000, 10_000]);
        let (pause_gap_mean_us, pause_len_max_us) = if rng.one_in(2) {
            (rng.pick(&[1_000, 10_000, 100_000, 1_000_000]), rng.pick(&[100, 1_000, 10_000, 100_000]))
        } else {
            (0, 0)
        };
        let pair_frames_max =
            if rng.one_in(4) { rng.pick(&[1, 4, 16, 64]) } else { Faults::PAIR_FRAMES_MAX_DEFAULT };
        Faults {
            delay_min_us,
            delay_max_us,
            jitter_us,
            pause_gap_mean_us,
            pause_len_max_us,
            pair_frames_max,
            frame_len_max: Faults::FRAME_LEN_MAX_DEFAULT,
        }
    }

    /// These faults without delays, jitter or pauses; capacities stay.
    pub fn healed(self) -> Faults {
        Faults { pair_frames_max: self.pair_frames_max, frame_len_max: self.frame_len_max, ..Faults::none() }
    }

    /// True if this network ever pauses nodes by itself.
    pub fn pauses(&self) -> bool {
        self.pause_gap_mean_us > 0 && self.pause_len_max_us > 0
    }

    pub(super) fn check(&self) {
        assert!(self.delay_min_us <= self.delay_max_us, "delay_min_us > delay_max_us in {self:?}");
        assert!(self.pair_frames_max >= 1, "pair_frames_max must be at least 1");
    }
}

impl Default for Faults {
    fn default() -> Self {
        Faults::none()
    }
}
