//! The sampler's random generator: SplitMix64, small, seeded, no OS randomness. A run replays
//! exactly from `Config::seed`.

use rand_core::{impls, RngCore};

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, passes BigCrush; plenty for drawing
/// samples and shuffling pools.
#[derive(Clone, Copy, Debug)]
pub struct SampleRng(u64);

impl SampleRng {
    /// A generator for worker `worker` of node `node` in a run seeded with `seed`: every
    /// (seed, node, worker) triple gets its own stream.
    pub fn new(seed: u64, node: u16, worker: u16) -> SampleRng {
        let mut r = SampleRng(seed ^ 0x5a4d_504c_455f_7267);
        let tag = (u64::from(node) << 16) | u64::from(worker);
        r.0 = r.next_u64() ^ tag.wrapping_mul(0xD1B5_4A32_D192_ED03);
        r
    }

    /// A generator for another stream, seeded from this one.
    pub fn fork(&mut self) -> SampleRng {
        SampleRng::new(self.next_u64(), 0, 0)
    }

    /// Uniform in `0..n` (`n > 0`), without modulo bias (Lemire's multiply-and-reject).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Shuffles `items` in place (Fisher-Yates): every order equally likely.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

impl RngCore for SampleRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        impls::fill_bytes_via_next(self, dest);
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
