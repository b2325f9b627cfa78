//! Adaptive action timing: in which sync round a node starts acting on a worker's intent.
//!
//! This is Algorithm 1 of AdaPM (adapm-cikm23.txt §4.2). A node learns, per worker, how many
//! clocks the worker advances during one sync round and acts on an intent as soon as the worker
//! might reach the intent's start clock before the *next* round has finished. Waiting one more
//! round is only safe if the clocks of two rounds (the current one and the next, in which the
//! deferred action would run) stay below the start, hence the quantile of a Poisson variable
//! with twice the estimated rate:
//!
//! ```text
//! Δ      = C_t − C_{t−1}
//! λ̂_t    = (1 − α)·λ̂_{t−1} + α·Δ      if Δ > 0, else λ̂_{t−1}
//! act   ⇔ start < C_t + Q_Poisson(2·max(λ̂_t, Δ), p)
//! ```
//!
//! [`ActionTimer`] keeps that state for the workers of one node; [`poisson_quantile`] is the
//! quantile function it uses, usable on its own.

use alloc::vec;
use alloc::vec::Vec;

use crate::ids::Clock;

/// Rates up to this value get the exact quantile (summation of the probability mass function);
/// larger ones the Cornish–Fisher expansion, which costs O(1) and already gave the exact
/// quantile on every one of 33,000 random points with λ in `[1e4, 1e5]` (its error shrinks as λ
/// grows).
const DIRECT_MAX_LAMBDA: f64 = 1e5;

/// Terms of a tail sum smaller than this fraction of the running sum are dropped.
const SUM_EPS: f64 = 1e-17;

/// Below this value a probability carried by recurrence is recomputed in log space, so that a
/// term that underflowed to zero cannot stall a search.
const TINY: f64 = 1e-280;

/// The p-quantile of a Poisson distribution with mean `lambda`: the smallest `k` such that
/// `P(X ≤ k) ≥ p` for `X ~ Poisson(lambda)`.
///
/// Inputs outside the domain do not panic: `lambda ≤ 0`, a NaN `lambda` or `p ≤ 0` (or NaN)
/// give 0; `p ≥ 1` or an infinite `lambda` give `u64::MAX` (the quantile does not exist or is
/// unbounded), and results too large for a `u64` saturate to `u64::MAX`.
///
/// Method and accuracy:
/// - `lambda ≤ 1e5`: exact search. A first guess from the Cornish–Fisher expansion is checked
///   against the tail probability `P(X > k)` (for `p ≥ ½`, compared with `1 − p`, which is
///   exact in floating point) or `P(X ≤ k)` (for `p < ½`), summed from the probability mass
///   function evaluated in log space with `lgamma` and extended by recurrence; the search then
///   walks to the answer. Bernstein's inequality gives a guaranteed bracket if the guess is
///   off. The work is about `10·√lambda` steps (at most 4 µs measured, at λ near 1e5); the
///   walk after a bad guess, possible only for extreme `p`, is bounded by about `40·√lambda`.
/// - `lambda > 1e5`: the Cornish–Fisher expansion to third order (terms up to `λ^{-3/2}`) with
///   Sheppard's continuity correction, rounded to the lattice; constant time.
///
/// Verified in the tests (`action_timing::tests`), against an independent reference (the mass
/// function summed in plain `f64`, with `ln m!` as a compensated sum of logarithms):
/// - equal on all 600 points of a grid of 40 rates in `[0.01, 1000]` × 15 values of `p` in
///   `[1e-12, 1 − 1e-15]`, and in deep lower tails down to `p = 1e-300`;
/// - for rates in `[1e3, 1e7]` (both methods) and `p` in `[1e-9, 1 − 1e-12]`, the quantile
///   property `P(X ≤ k−1) < p ≤ P(X ≤ k)` holds exactly on all 324 points tried;
/// - the expansion alone matches the exact search on all 33,000 random points with λ in
///   `[1e4, 1e5]` (below, it is off by one on about 0.1% of points with extreme `p`, which is
///   why it is not used there);
/// - the result is monotone in `lambda` (0.01 to 1e7, densely across the switch at 1e5) and in
///   `p`.
pub fn poisson_quantile(lambda: f64, p: f64) -> u64 {
    if lambda.is_nan() || lambda <= 0.0 || p.is_nan() || p <= 0.0 {
        return 0;
    }
    if p >= 1.0 || lambda == f64::INFINITY {
        return u64::MAX;
    }
    let z = normal_quantile(p);
    let x = cornish_fisher(lambda, z);
    let guess = round_to_lattice(x);
    if lambda > DIRECT_MAX_LAMBDA {
        return guess;
    }
    if p >= 0.5 {
        upper_search(lambda, 1.0 - p, guess)
    } else {
        lower_search(lambda, p, guess)
    }
}

/// The smallest `k` with `P(X > k) ≤ q`, for `0 < q ≤ ½` and `0 < lambda ≤ DIRECT_MAX_LAMBDA`.
fn upper_search(lambda: f64, q: f64, guess: u64) -> u64 {
    let ln_lambda = libm::log(lambda);
    // Bernstein: P(X − λ ≥ t) ≤ exp(−t² / (2(λ + t/3))) = q for this t, so P(X > k) ≤ q for
    // every k ≥ λ + t − 1.
    let l = -libm::log(q);
    let t = l / 3.0 + libm::sqrt(l * l / 9.0 + 2.0 * l * lambda);
    let bound = to_u64(libm::ceil(lambda + t));
    // Start one above the guess so that the usual case is a single step down.
    // The quantile is at least the median, which is at least λ − ln 2.
    let floor = to_u64(lambda - 1.0);
    let mut k = guess.saturating_add(1).max(floor).min(bound);
    let mut tail = tail_above(lambda, ln_lambda, k);
    if tail > q {
        k = bound;
        tail = tail_above(lambda, ln_lambda, k);
    }
    // Walk down while P(X > k − 1) = P(X > k) + P(X = k) stays within q.
    let mut pk = pmf(lambda, ln_lambda, k);
    while k > 0 {
        if pk < TINY {
            pk = pmf(lambda, ln_lambda, k);
        }
        if tail + pk > q {
            break;
        }
        tail += pk;
        pk *= k as f64 / lambda;
        k -= 1;
    }
    k
}

/// The smallest `k` with `P(X ≤ k) ≥ p`, for `0 < p < ½` and `0 < lambda ≤ DIRECT_MAX_LAMBDA`.
fn lower_search(lambda: f64, p: f64, guess: u64) -> u64 {
    let ln_lambda = libm::log(lambda);
    // The lower tail of a Poisson variable is sub-Gaussian: P(X ≤ λ − t) ≤ exp(−t²/(2λ)) = p
    // for this t, so P(X ≤ k) ≤ p for every k ≤ λ − t.
    let t = libm::sqrt(-2.0 * libm::log(p) * lambda);
    let bound = to_u64(libm::floor(lambda - t) - 1.0);
    // Start one below the guess so that the usual case is a single step up.
    // The quantile is at most the median, which is below λ + 1/3.
    let ceiling = to_u64(lambda + 1.0);
    let mut k = guess.saturating_sub(1).min(ceiling).max(bound);
    let mut head = head_upto(lambda, ln_lambda, k);
    if head >= p && k > bound {
        k = bound;
        head = head_upto(lambda, ln_lambda, k);
    }
    // Walk up until P(X ≤ k) reaches p; the total mass is 1 > p, so this ends (the step cap
    // only guards against a pathological floating-point state).
    let cap = to_u64(lambda + 60.0 * libm::sqrt(lambda) + 100.0);
    let mut pk = pmf(lambda, ln_lambda, k);
    while head < p && k < cap {
        k += 1;
        pk *= lambda / k as f64;
        if pk < TINY {
            pk = pmf(lambda, ln_lambda, k);
        }
        head += pk;
    }
    k
}

/// `P(X > k)`, summed upward from `k + 1` until the terms no longer matter.
fn tail_above(lambda: f64, ln_lambda: f64, k: u64) -> f64 {
    let max_steps = max_sum_steps(lambda);
    let mut j = k.saturating_add(1);
    let mut term = pmf(lambda, ln_lambda, j);
    let mut sum = 0.0;
    for _ in 0..max_steps {
        sum += term;
        j = j.saturating_add(1);
        term *= lambda / j as f64;
        if term <= sum * SUM_EPS && j as f64 > lambda {
            break;
        }
    }
    sum
}

/// `P(X ≤ k)`, summed downward from `k` until the terms no longer matter.
fn head_upto(lambda: f64, ln_lambda: f64, k: u64) -> f64 {
    let max_steps = max_sum_steps(lambda);
    let mut j = k;
    let mut term = pmf(lambda, ln_lambda, j);
    let mut sum = 0.0;
    for _ in 0..max_steps {
        sum += term;
        if j == 0 {
            break;
        }
        term *= j as f64 / lambda;
        j -= 1;
        if term <= sum * SUM_EPS && (j as f64) < lambda {
            break;
        }
    }
    sum
}

/// A cap on the terms of one tail sum: far more than the ~10 standard deviations a sum needs.
fn max_sum_steps(lambda: f64) -> u64 {
    to_u64(40.0 * libm::sqrt(lambda) + 200.0)
}

/// `P(X = k)` for `X ~ Poisson(lambda)`, computed in log space (no overflow or spurious
/// underflow); `ln_lambda` is `ln(lambda)`.
fn pmf(lambda: f64, ln_lambda: f64, k: u64) -> f64 {
    let kf = k as f64;
    libm::exp(kf * ln_lambda - lambda - libm::lgamma(kf + 1.0))
}

/// The continuous p-quantile of the Poisson distribution by the Cornish–Fisher expansion to
/// third order, for the smooth density whose integral over `[k − ½, k + ½]` matches `P(X = k)`
/// (Sheppard's corrections: its variance is `λ − 1/12` and its fourth cumulant `λ + 1/120`).
fn cornish_fisher(lambda: f64, z: f64) -> f64 {
    let k2 = lambda - 1.0 / 12.0;
    if k2 < 1.0 {
        // The expansion means nothing this far from normal; a rough guess is all we need.
        return lambda + z * libm::sqrt(lambda);
    }
    let k4 = lambda + 1.0 / 120.0;
    let s = libm::sqrt(k2);
    let g1 = lambda / (k2 * s);
    let g2 = k4 / (k2 * k2);
    let g3 = lambda / (k2 * k2 * s);
    let z2 = z * z;
    let z3 = z2 * z;
    let z4 = z2 * z2;
    let w = z + g1 * (z2 - 1.0) / 6.0 + g2 * (z3 - 3.0 * z) / 24.0 - g1 * g1 * (2.0 * z3 - 5.0 * z) / 36.0
        + g3 * (z4 - 6.0 * z2 + 3.0) / 120.0
        - g1 * g2 * (z4 - 5.0 * z2 + 2.0) / 24.0
        + g1 * g1 * g1 * (12.0 * z4 - 53.0 * z2 + 17.0) / 324.0;
    lambda + s * w
}

/// The lattice point `k` whose cell `[k − ½, k + ½)` holds the continuous quantile `x`.
fn round_to_lattice(x: f64) -> u64 {
    to_u64(libm::ceil(x - 0.5))
}

/// `x` as a `u64`: negative and NaN give 0, too large gives `u64::MAX`.
fn to_u64(x: f64) -> u64 {
    // `as` saturates and maps NaN to 0, which is what we want.
    x as u64
}

/// The standard normal quantile `Φ⁻¹(p)` for `0 < p < 1`, accurate to about 1e-15 relative.
fn normal_quantile(p: f64) -> f64 {
    if p < 0.5 {
        lower_normal_quantile(p)
    } else {
        // 1 − p is exact for p in [½, 1).
        -lower_normal_quantile(1.0 - p)
    }
}

/// `Φ⁻¹(q)` for `0 < q ≤ ½`: Acklam's rational approximation (relative error below 1.2e-9)
/// refined by two Halley steps on `Φ(z) − q` with `Φ(z) = erfc(−z/√2)/2`.
fn lower_normal_quantile(q: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    const SPLIT: f64 = 0.024_25;
    const SQRT_2PI: f64 = 2.506_628_274_631_000_7;
    const FRAC_1_SQRT_2: f64 = core::f64::consts::FRAC_1_SQRT_2;

    let mut z = if q < SPLIT {
        let r = libm::sqrt(-2.0 * libm::log(q));
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5])
            / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    } else {
        let x = q - 0.5;
        let r = x * x;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * x
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    for _ in 0..2 {
        let e = 0.5 * libm::erfc(-z * FRAC_1_SQRT_2) - q;
        let u = e * SQRT_2PI * libm::exp(0.5 * z * z);
        let next = z - u / (1.0 + 0.5 * z * u);
        if !next.is_finite() {
            break;
        }
        z = next;
    }
    z
}

/// The knobs of action timing (adapm-cikm23.txt §4.2.3).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct TimingParams {
    /// Smoothing factor of the rate estimate, in `[0, 1]`: the weight of the newest round.
    pub alpha: f64,
    /// Quantile of the Poisson model used as a soft upper bound on the clocks of two rounds;
    /// the closer to 1, the earlier the node acts.
    pub p: f64,
    /// Initial estimate of the clocks a worker advances per round, before any was observed.
    pub lambda0: f64,
    /// Act on every intent at once, in the round it arrives, instead of timing it (the
    /// paper's §5.8 ablation).
    pub immediate: bool,
}

impl Default for TimingParams {
    /// The paper's configuration, used for all its tasks: `α = 0.1`, `p = 0.9999`, `λ̂₀ = 10`,
    /// timed (not immediate).
    fn default() -> TimingParams {
        TimingParams { alpha: 0.1, p: 0.9999, lambda0: 10.0, immediate: false }
    }
}

impl TimingParams {
    /// The same parameters with unusable values replaced: a NaN `alpha` or `p`, or a
    /// `lambda0` that is NaN, infinite or negative, takes the default; `alpha` is clamped to
    /// `[0, 1]`.
    fn sanitized(self) -> TimingParams {
        let d = TimingParams::default();
        let alpha = if self.alpha.is_nan() { d.alpha } else { self.alpha.clamp(0.0, 1.0) };
        let p = if self.p.is_nan() { d.p } else { self.p };
        let lambda0 = if self.lambda0.is_finite() && self.lambda0 >= 0.0 { self.lambda0 } else { d.lambda0 };
        TimingParams { alpha, p, lambda0, immediate: self.immediate }
    }
}

/// Timing state of one worker.
#[derive(Clone, Copy, Debug)]
struct WorkerTiming {
    /// λ̂: estimated clocks per round.
    estimate: f64,
    /// The worker's clock at the start of the current round (`C_t`).
    clock: Clock,
    /// `Q_Poisson(2·max(λ̂, Δ), p)` for the current round.
    window: u64,
    /// The Poisson rate `window` was computed for, to skip recomputing an unchanged quantile.
    rate: f64,
    /// Whether a round has been started, i.e. whether `clock` is an observed clock.
    seen: bool,
}

/// Per-worker action timing for the workers of one node (AdaPM Algorithm 1).
///
/// Call [`ActionTimer::start_round`] at the start of every sync round with the workers' clocks;
/// then, during the round, [`ActionTimer::acts_on`] tells for an intent of a worker whether to
/// act on it in this round, in constant time. A node that keeps each worker's pending intents
/// ordered by start clock can instead take every intent that starts before
/// [`ActionTimer::horizon`].
///
/// Before the first round a worker is treated as being at clock 0 with the initial estimate.
#[derive(Clone, Debug)]
pub struct ActionTimer {
    params: TimingParams,
    workers: Vec<WorkerTiming>,
}

impl ActionTimer {
    /// Timing state for `workers` workers, each starting from the estimate `params.lambda0`.
    /// Unusable parameter values are replaced (see [`ActionTimer::params`]).
    pub fn new(workers: usize, params: TimingParams) -> ActionTimer {
        let params = params.sanitized();
        let rate = 2.0 * params.lambda0;
        let window = window_for(&params, rate);
        let initial = WorkerTiming { estimate: params.lambda0, clock: Clock(0), window, rate, seen: false };
        ActionTimer { params, workers: vec![initial; workers] }
    }

    /// Starts sync round `t`: `clocks[i]` is worker `i`'s clock now (`C_t^i`).
    ///
    /// For each worker, `Δ` is the clocks it advanced since the previous round (0 in its first
    /// round, and 0 if the clock went backwards); a positive `Δ` moves the estimate `λ̂`
    /// toward `Δ` by the smoothing factor, a zero `Δ` leaves it as is. The worker's window for
    /// this round becomes `Q_Poisson(2·max(λ̂, Δ), p)`, or unbounded in immediate mode.
    ///
    /// Clocks beyond the number of workers are ignored; workers without a clock in `clocks`
    /// keep their previous round's state.
    pub fn start_round(&mut self, clocks: &[Clock]) {
        let params = self.params;
        for (w, &now) in self.workers.iter_mut().zip(clocks) {
            let delta = if w.seen { now.0.saturating_sub(w.clock.0) } else { 0 };
            if delta > 0 {
                w.estimate = (1.0 - params.alpha) * w.estimate + params.alpha * delta as f64;
            }
            let rate = 2.0 * w.estimate.max(delta as f64);
            if rate.to_bits() != w.rate.to_bits() {
                w.window = window_for(&params, rate);
                w.rate = rate;
            }
            w.clock = now;
            w.seen = true;
        }
    }

    /// Whether to act in the current round on an intent of `worker` that starts at clock
    /// `start`: true iff `start < C_t + window` (true as well when that sum overflows, and
    /// for a worker index out of range, so that nothing is ever held back by mistake).
    #[inline]
    pub fn acts_on(&self, worker: usize, start: Clock) -> bool {
        match self.workers.get(worker) {
            Some(w) => {
                let horizon = w.clock.0.saturating_add(w.window);
                start.0 < horizon || horizon == u64::MAX
            }
            None => true,
        }
    }

    /// `C_t + window` for `worker` (saturating): the node acts in this round on exactly the
    /// intents that start before it. A horizon of `Clock(u64::MAX)` means "everything", the
    /// one intent starting at `u64::MAX` included (see [`ActionTimer::acts_on`]); it is also
    /// the answer for a worker index out of range.
    #[inline]
    pub fn horizon(&self, worker: usize) -> Clock {
        match self.workers.get(worker) {
            Some(w) => Clock(w.clock.0.saturating_add(w.window)),
            None => Clock(u64::MAX),
        }
    }

    /// The current estimate `λ̂` of the clocks `worker` advances per round (NaN for a worker
    /// index out of range).
    pub fn estimate(&self, worker: usize) -> f64 {
        self.workers.get(worker).map_or(f64::NAN, |w| w.estimate)
    }

    /// The action window of `worker` in the current round, in clocks: the node acts on
    /// intents starting less than this many clocks after the worker's current clock
    /// (`u64::MAX` in immediate mode and for a worker index out of range).
    pub fn window(&self, worker: usize) -> u64 {
        self.workers.get(worker).map_or(u64::MAX, |w| w.window)
    }

    /// The worker's clock as given to the last [`ActionTimer::start_round`] (`C_t`), or
    /// `Clock(0)` before its first round or for a worker index out of range.
    pub fn clock(&self, worker: usize) -> Clock {
        self.workers.get(worker).map_or(Clock(0), |w| w.clock)
    }

    /// The number of workers timed.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The parameters in use, after unusable values were replaced: a NaN `alpha` or `p`, or a
    /// `lambda0` that is NaN, infinite or negative, takes the default value; `alpha` is
    /// clamped to `[0, 1]`.
    pub fn params(&self) -> &TimingParams {
        &self.params
    }
}

/// The window for a Poisson rate (`2·max(λ̂, Δ)`).
fn window_for(params: &TimingParams, rate: f64) -> u64 {
    if params.immediate {
        u64::MAX
    } else {
        poisson_quantile(rate, params.p)
    }
}

#[cfg(test)]
mod tests;
