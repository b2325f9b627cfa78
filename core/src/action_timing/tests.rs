use super::*;
use alloc::collections::BinaryHeap;
use alloc::format;
use alloc::string::String;
use core::cmp::Reverse;

// ---------------------------------------------------------------------------------------------
// Helpers: a PRNG, a Poisson sampler and an independent reference for the Poisson distribution.
// ---------------------------------------------------------------------------------------------

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Uniform in `[lo, lo + n)`.
    fn range(&mut self, lo: u64, n: u64) -> u64 {
        lo + self.next_u64() % n
    }
    /// A Poisson(lambda) sample, exact: the sum of Poisson pieces of mean at most 30, each drawn
    /// by sequential inversion of its CDF (no use of the code under test).
    fn poisson(&mut self, lambda: f64) -> u64 {
        let pieces = libm::ceil(lambda / 30.0).max(1.0);
        let mu = lambda / pieces;
        let mut total = 0;
        for _ in 0..pieces as u64 {
            let u = self.uniform();
            let mut k = 0u64;
            let mut pk = libm::exp(-mu);
            let mut cdf = pk;
            while u > cdf && k < 1000 {
                k += 1;
                pk *= mu / k as f64;
                cdf += pk;
            }
            total += k;
        }
        total
    }
}

/// The Poisson(lambda) mass function on `lo..lo + pmf.len()`, covering all but a negligible
/// part of the mass (`width` standard deviations each side, 15 by default).
///
/// Independent of the code under test: `ln(m!)` at the mode is a compensated sum of `ln j`
/// (no `lgamma`), and the other terms follow by the ratio `P(k+1)/P(k) = λ/(k+1)`.
struct Reference {
    lo: u64,
    pmf: Vec<f64>,
    /// `cdf[i] = P(X ≤ lo + i)`, summed upward.
    cdf: Vec<f64>,
    /// `sf[i] = P(X > lo + i)`, summed downward from the far tail.
    sf: Vec<f64>,
}

impl Reference {
    fn new(lambda: f64) -> Reference {
        Reference::wide(lambda, 15.0)
    }

    fn wide(lambda: f64, width: f64) -> Reference {
        let mode = libm::floor(lambda) as u64;
        let sigma = libm::sqrt(lambda);
        let lo = (lambda - width * sigma - 30.0).max(0.0) as u64;
        let hi = (lambda + width * sigma + 80.0) as u64;
        // Kahan-compensated ln(mode!).
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for j in 2..=mode {
            let y = libm::log(j as f64) - c;
            let t = s + y;
            c = (t - s) - y;
            s = t;
        }
        let at_mode = libm::exp(mode as f64 * libm::log(lambda) - lambda - s);
        let n = (hi - lo + 1) as usize;
        let mut pmf = vec![0.0; n];
        let m = (mode - lo) as usize;
        pmf[m] = at_mode;
        for i in (0..m).rev() {
            let k = lo + i as u64;
            pmf[i] = pmf[i + 1] * (k + 1) as f64 / lambda;
        }
        for i in m + 1..n {
            let k = lo + i as u64;
            pmf[i] = pmf[i - 1] * lambda / k as f64;
        }
        let mut cdf = vec![0.0; n];
        let mut acc = 0.0;
        for i in 0..n {
            acc += pmf[i];
            cdf[i] = acc;
        }
        let mut sf = vec![0.0; n];
        let mut acc = 0.0;
        for i in (0..n).rev() {
            sf[i] = acc;
            acc += pmf[i];
        }
        Reference { lo, pmf, cdf, sf }
    }

    /// `P(X ≤ k)`.
    fn cdf(&self, k: i64) -> f64 {
        if k < self.lo as i64 {
            return 0.0;
        }
        self.cdf.get((k - self.lo as i64) as usize).copied().unwrap_or(1.0)
    }

    /// `P(X > k)`.
    fn sf(&self, k: i64) -> f64 {
        if k < self.lo as i64 {
            return 1.0;
        }
        self.sf.get((k - self.lo as i64) as usize).copied().unwrap_or(0.0)
    }

    /// Whether `P(X ≤ k) ≥ p`, through the upper tail for `p ≥ ½` (where `1 − p` is exact).
    fn reaches(&self, k: i64, p: f64) -> bool {
        if p >= 0.5 {
            self.sf(k) <= 1.0 - p
        } else {
            self.cdf(k) >= p
        }
    }

    /// The reference p-quantile.
    fn quantile(&self, p: f64) -> u64 {
        let mut k = self.lo as i64;
        while !self.reaches(k, p) && k < (self.lo as usize + self.pmf.len()) as i64 {
            k += 1;
        }
        k as u64
    }
}

fn log_grid(from: f64, to: f64, n: usize) -> Vec<f64> {
    let (a, b) = (libm::log(from), libm::log(to));
    (0..n).map(|i| libm::exp(a + (b - a) * i as f64 / (n - 1) as f64)).collect()
}

const P_GRID: [f64; 15] = [
    1e-12,
    1e-6,
    0.01,
    0.1,
    0.3,
    0.5,
    0.7,
    0.9,
    0.99,
    0.999,
    0.9999,
    1.0 - 1e-6,
    1.0 - 1e-9,
    1.0 - 1e-12,
    1.0 - 1e-15,
];

// ---------------------------------------------------------------------------------------------
// poisson_quantile
// ---------------------------------------------------------------------------------------------

#[test]
fn quantile_known_values() {
    // Each value was checked with mpmath (50 digits, regularized incomplete gamma) and is
    // re-derived here from the reference summation.
    let known: [(f64, f64, u64); 14] = [
        (20.0, 0.9999, 39),
        (19.0, 0.9999, 37),
        (60.0, 0.9999, 91),
        (0.01, 0.9999, 1),
        (1.0, 0.5, 1),
        (10.0, 0.5, 10),
        (2.0, 0.9999, 9),
        (200.0, 0.9999, 255),
        (1e4, 0.9999, 10_374),
        (1e6, 0.9999, 1_003_721),
        (1e7, 0.9999, 10_011_763),
        (1e7, 0.5, 10_000_000),
        (3e6, 1e-6, 2_991_770),
        (1000.0, 0.001, 904),
    ];
    for (lambda, p, k) in known {
        assert_eq!(poisson_quantile(lambda, p), k, "Q({lambda}, {p})");
        if lambda <= 1e4 {
            assert_eq!(Reference::new(lambda).quantile(p), k, "reference Q({lambda}, {p})");
        }
    }
}

#[test]
fn quantile_matches_reference_up_to_1000() {
    let mut checked = 0;
    for lambda in log_grid(0.01, 1000.0, 40) {
        let r = Reference::new(lambda);
        for p in P_GRID {
            let got = poisson_quantile(lambda, p);
            let want = r.quantile(p);
            assert_eq!(got, want, "Q({lambda}, {p}): got {got}, reference {want}");
            checked += 1;
        }
    }
    assert_eq!(checked, 600);
}

/// Checks `P(X ≤ k−1) < p ≤ P(X ≤ k)` against the reference for rates 1e3..1e7, on both the
/// exact path (≤ 1e5) and the Cornish–Fisher path (> 1e5). Returns (points, failures, max
/// distance to the reference quantile).
fn property_on(lambdas: &[f64], ps: &[f64]) -> (usize, usize, u64, String) {
    let (mut n, mut bad, mut max_err) = (0, 0, 0);
    let mut first = String::new();
    for &lambda in lambdas {
        let r = Reference::new(lambda);
        for &p in ps {
            let k = poisson_quantile(lambda, p);
            n += 1;
            let ok = r.reaches(k as i64, p) && !r.reaches(k as i64 - 1, p);
            if !ok {
                let want = r.quantile(p);
                bad += 1;
                max_err = max_err.max(k.abs_diff(want));
                if first.is_empty() {
                    first = format!("Q({lambda}, {p}) = {k}, reference {want}");
                }
            }
        }
    }
    (n, bad, max_err, first)
}

#[test]
fn quantile_property_large_lambda() {
    let mut lambdas = Vec::new();
    for decade in [1e3, 1e4, 1e5, 1e6] {
        for f in [1.0, 1.37, 2.0, 3.1, 4.9, 7.77] {
            lambdas.push(decade * f);
        }
    }
    lambdas.push(99_999.5);
    lambdas.push(100_000.5);
    lambdas.push(1e7);
    let ps = [1e-9, 1e-6, 1e-3, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0 - 1e-6, 1.0 - 1e-9, 1.0 - 1e-12];
    let (n, bad, max_err, first) = property_on(&lambdas, &ps);
    std::println!("{n} points checked, {bad} off");
    assert_eq!(bad, 0, "{bad} of {n} points off (max error {max_err}); first: {first}");
}

#[test]
fn cornish_fisher_agrees_with_exact_search() {
    // The switch to the expansion above λ = 1e5 rests on this: on random rates in [1e4, 1e5]
    // the expansion alone already gives the exact quantile for every p tried (its error
    // shrinks as λ grows). Below, it is at most one off, and only for extreme p.
    let mut rng = Rng(7);
    let ps = [1e-9, 1e-6, 1e-3, 0.1, 0.5, 0.9, 0.99, 0.9999, 1.0 - 1e-6, 1.0 - 1e-9, 1.0 - 1e-12];
    let mut report = String::new();
    for (lo, hi) in [(100.0, 1e3), (1e3, 1e4), (1e4, 1e5)] {
        let (mut n, mut bad, mut max_err) = (0, 0, 0);
        for _ in 0..3000 {
            let lambda = libm::exp(libm::log(lo) + rng.uniform() * libm::log(hi / lo));
            for p in ps {
                let cf = round_to_lattice(cornish_fisher(lambda, normal_quantile(p)));
                let exact = poisson_quantile(lambda, p);
                n += 1;
                if cf != exact {
                    bad += 1;
                    max_err = max_err.max(cf.abs_diff(exact));
                }
            }
        }
        report.push_str(&format!("λ in [{lo}, {hi}]: {bad} of {n} differ, by at most {max_err}\n"));
        assert!(max_err <= 1, "{report}");
        if lo >= 1e4 {
            assert_eq!(bad, 0, "{report}");
        }
    }
    std::println!("{report}");
}

#[test]
fn quantile_is_monotone() {
    for p in [1e-6, 0.1, 0.5, 0.9, 0.9999, 1.0 - 1e-12] {
        let mut prev = 0;
        // Dense around the switch between the two methods, sparse elsewhere.
        let mut lambdas = log_grid(0.01, 1e7, 3000);
        lambdas.extend((0..2000).map(|i| 99_000.0 + i as f64));
        lambdas.sort_by(f64::total_cmp);
        for lambda in lambdas {
            let k = poisson_quantile(lambda, p);
            assert!(k >= prev, "Q({lambda}, {p}) = {k} < {prev}");
            prev = k;
        }
    }
    for lambda in [0.01, 0.7, 20.0, 1e3, 1e5, 2e5, 1e7] {
        let mut prev = 0;
        for i in 1..2000 {
            let p = i as f64 / 2000.0;
            let k = poisson_quantile(lambda, p);
            assert!(k >= prev, "Q({lambda}, {p}) = {k} < {prev}");
            prev = k;
        }
    }
}

#[test]
fn quantile_edge_inputs() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    assert_eq!(poisson_quantile(nan, 0.5), 0);
    assert_eq!(poisson_quantile(0.0, 0.9999), 0);
    assert_eq!(poisson_quantile(-3.0, 0.9999), 0);
    assert_eq!(poisson_quantile(-inf, 0.9999), 0);
    assert_eq!(poisson_quantile(10.0, nan), 0);
    assert_eq!(poisson_quantile(10.0, 0.0), 0);
    assert_eq!(poisson_quantile(10.0, -1.0), 0);
    assert_eq!(poisson_quantile(10.0, 1.0), u64::MAX);
    assert_eq!(poisson_quantile(10.0, 2.0), u64::MAX);
    assert_eq!(poisson_quantile(10.0, inf), u64::MAX);
    assert_eq!(poisson_quantile(inf, 0.5), u64::MAX);
    assert_eq!(poisson_quantile(1e300, 0.5), u64::MAX);
    assert_eq!(poisson_quantile(1e-300, 1.0 - f64::EPSILON / 2.0), 0);
    // P(X = 0) = e^{-10} ≈ 4.5e-5 ≥ 1e-300.
    assert_eq!(poisson_quantile(10.0, 1e-300), 0);
    assert_eq!(poisson_quantile(10.0, f64::MIN_POSITIVE / 4.0), 0);
    // No panic and a sane answer on awkward values.
    let lambdas =
        [f64::MIN_POSITIVE, 1e-300, 1e-12, 1e-3, 0.5, 1.0, 700.0, 750.0, 99_999.0, 1e5, 1e12, 1e18, 1e19];
    let ps = [f64::MIN_POSITIVE, 1e-300, 1e-100, 1e-20, 0.5, 0.5 + 1e-16, 1.0 - f64::EPSILON / 2.0];
    for lambda in lambdas {
        for p in ps {
            let k = poisson_quantile(lambda, p);
            if lambda < 1e17 {
                assert!((k as f64) < lambda + 60.0 * libm::sqrt(lambda) + 100.0, "Q({lambda}, {p}) = {k}");
            }
        }
    }
    // Deep tails on the exact path, against the reference.
    for (lambda, p) in [(700.0, 1e-300), (750.0, 1e-200), (1000.0, 1e-100), (5.0, 1e-300), (0.01, 1e-300)] {
        let k = poisson_quantile(lambda, p);
        let r = Reference::wide(lambda, 45.0);
        assert!(r.cdf(k as i64) >= p && r.cdf(k as i64 - 1) < p, "Q({lambda}, {p}) = {k}");
    }
    for (lambda, p) in
        [(0.01, 1.0 - f64::EPSILON / 2.0), (1e-6, 1.0 - f64::EPSILON / 2.0), (1e3, 1.0 - f64::EPSILON)]
    {
        let k = poisson_quantile(lambda, p);
        assert_eq!(k, Reference::new(lambda).quantile(p), "Q({lambda}, {p})");
    }
}

#[test]
fn normal_quantile_inverts_erfc() {
    let mut p = 1e-300;
    while p < 1.0 {
        let z = normal_quantile(p);
        // Compare in the tail that is not rounded away: Φ(z) for p < ½, 1 − Φ(z) otherwise.
        let (got, want) = if p < 0.5 {
            (0.5 * libm::erfc(-z / core::f64::consts::SQRT_2), p)
        } else {
            (0.5 * libm::erfc(z / core::f64::consts::SQRT_2), 1.0 - p)
        };
        assert!(libm::fabs(got / want - 1.0) < 1e-12, "p = {p}: z = {z}, tail {got} vs {want}");
        p = if p < 0.01 {
            p * 10.0
        } else if p < 0.99 {
            p + 0.01
        } else {
            1.0 - (1.0 - p) / 10.0
        };
        if 1.0 - p < 1e-15 {
            break;
        }
    }
    assert_eq!(normal_quantile(0.5), 0.0);
}

// ---------------------------------------------------------------------------------------------
// ActionTimer
// ---------------------------------------------------------------------------------------------

/// Intents simulated against a sequence of rounds.
///
/// Round `t` starts with the worker at clock `clocks[t]` (`C_t`), and the node acts on the
/// intents that start before `horizons[t]`. An action taken in round `r` is complete when the
/// round ends, i.e. when the worker is at `C_{r+1}`; it is **late** if the worker has reached
/// the intent's start by then (`C_{r+1} ≥ start`), because the worker's clock passed `start`
/// during round `r`, before the action finished.
///
/// Intents are created in the rounds `created` (`per_round` each) with a start clock uniform
/// in `[C_t + 1, C_t + spread]`. One whose start is already within the window when it is
/// created is acted on at once; if that is late the intent was signaled too late, which no
/// timing can fix, so such intents are only counted apart (`at_once`). The late fraction is
/// over the intents that were deferred at least once, the ones whose timing the algorithm
/// decided.
struct LateStats {
    /// Deferred intents acted on in a round of `judged`.
    counted: u64,
    /// Of those, how many were late.
    late: u64,
    /// Intents acted on in the round they were created.
    at_once: u64,
}

impl LateStats {
    fn fraction(&self) -> f64 {
        self.late as f64 / self.counted.max(1) as f64
    }
}

fn late_stats(
    clocks: &[u64],
    horizons: &[u64],
    created: core::ops::Range<usize>,
    judged: core::ops::Range<usize>,
    per_round: usize,
    spread: u64,
    rng: &mut Rng,
) -> LateStats {
    let mut stats = LateStats { counted: 0, late: 0, at_once: 0 };
    let mut pending: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let rounds = clocks.len().min(horizons.len());
    for t in 0..rounds.saturating_sub(1) {
        let (now, next, horizon) = (clocks[t], clocks[t + 1], horizons[t]);
        if created.contains(&t) {
            for _ in 0..per_round {
                let start = rng.range(now + 1, spread);
                if start < horizon {
                    stats.at_once += 1;
                } else {
                    pending.push(Reverse(start));
                }
            }
        }
        while let Some(&Reverse(start)) = pending.peek() {
            if start >= horizon {
                break;
            }
            pending.pop();
            if judged.contains(&t) {
                stats.counted += 1;
                if next >= start {
                    stats.late += 1;
                }
            }
        }
    }
    stats
}

/// Runs `timer` (one worker) over `clocks` and returns the horizon of every round, checking on
/// the way that `acts_on` and `horizon` agree.
fn horizons_of(timer: &mut ActionTimer, clocks: &[u64], rng: &mut Rng) -> Vec<u64> {
    let mut out = Vec::with_capacity(clocks.len());
    for &c in clocks {
        timer.start_round(&[Clock(c)]);
        let h = timer.horizon(0);
        assert_eq!(h.0, c.saturating_add(timer.window(0)));
        if h.0 > 0 {
            assert!(timer.acts_on(0, Clock(h.0 - 1)));
        }
        assert!(!timer.acts_on(0, h) || h.0 == u64::MAX);
        let s = rng.range(c, 4 * timer.window(0).min(1 << 40) + 1);
        assert_eq!(timer.acts_on(0, Clock(s)), s < h.0 || h.0 == u64::MAX);
        out.push(h.0);
    }
    out
}

/// Clock sequence `C_0 = start`, `C_{t+1} = C_t + Poisson(rate(t))`.
fn clocks(rounds: usize, rng: &mut Rng, mut rate: impl FnMut(usize) -> f64) -> Vec<u64> {
    let mut c = 1_000;
    (0..rounds)
        .map(|t| {
            let now = c;
            c += rng.poisson(rate(t));
            now
        })
        .collect()
}

#[test]
fn late_fraction_below_one_in_thousand() {
    const WARMUP: usize = 200;
    const ROUNDS: usize = 1800;
    const PER_ROUND: usize = 64;
    let mut report = String::new();
    for (i, lambda) in [0.5, 3.0, 10.0, 100.0, 5000.0].into_iter().enumerate() {
        let mut rng = Rng(0x5eed + i as u64);
        let spread = 10 * (2.0 * lambda + 40.0) as u64 + 100;
        // Enough extra rounds for every intent created to come due.
        let drain = (spread as f64 / lambda) as usize + 50;
        let cs = clocks(WARMUP + ROUNDS + drain, &mut rng, |_| lambda);
        let mut timer = ActionTimer::new(1, TimingParams::default());
        let hs = horizons_of(&mut timer, &cs, &mut rng);
        let s = late_stats(&cs, &hs, WARMUP..WARMUP + ROUNDS, 0..cs.len(), PER_ROUND, spread, &mut rng);
        let line = format!(
            "λ = {lambda}: {} late of {} deferred intents ({:.2e}), {} acted on at once, final λ̂ = {:.3}\n",
            s.late,
            s.counted,
            s.fraction(),
            s.at_once,
            timer.estimate(0)
        );
        report.push_str(&line);
        assert!(s.counted >= 100_000, "too few intents: {line}");
        assert!(s.late * 1000 < s.counted, "too many late intents: {line}");
    }
    std::println!("{report}");
}

/// Estimates after a rate change: `est[s][trial]` is λ̂ after the `s`-th round boundary that
/// follows the change (s = 0: the last estimate before any clock at the new rate was seen).
fn estimates_after_change(from: f64, to: f64, trials: usize, after: usize, seed: u64) -> Vec<Vec<f64>> {
    const WARMUP: usize = 200;
    let mut rng = Rng(seed);
    let mut est = vec![Vec::with_capacity(trials); after + 1];
    for _ in 0..trials {
        let mut timer = ActionTimer::new(1, TimingParams::default());
        // Rounds 0..WARMUP advance at `from`, the rest at `to`; round boundary WARMUP + s is
        // the first to have seen s rounds at the new rate.
        let cs = clocks(WARMUP + after + 1, &mut rng, |t| if t < WARMUP { from } else { to });
        for (t, &c) in cs.iter().enumerate() {
            timer.start_round(&[Clock(c)]);
            if t >= WARMUP {
                est[t - WARMUP].push(timer.estimate(0));
            }
        }
    }
    est
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn rate_change_up_is_tracked() {
    // With α = 0.1 the expected estimate after s rounds at the new rate is
    // λ_new + (λ_old − λ_new)·0.9^s: from 5 to 50, |gap| = 45·0.9^s, below 20% of 50 (10) from
    // s = 15 on (9.3) and above it at s = 12 (12.7).
    let est = estimates_after_change(5.0, 50.0, 400, 100, 11);
    let m12 = mean(&est[12]);
    let m16 = mean(&est[16]);
    assert!(m12 < 40.0, "mean λ̂ 12 rounds after 5 → 50 is {m12}: adapts faster than α = 0.1 allows");
    assert!(m16 > 40.0, "mean λ̂ 16 rounds after 5 → 50 is {m16}, not within 20% of 50");
    // Every single trial stays within 20% from 30 rounds on (bias 1.9, noise σ ≈ 1.6).
    for (s, row) in est.iter().enumerate().skip(30) {
        for &e in row {
            assert!((40.0..=60.0).contains(&e), "λ̂ = {e} {s} rounds after 5 → 50");
        }
    }
    std::println!(
        "5 → 50: mean λ̂ after 12 rounds {m12:.2}, after 16 {m16:.2}, after 30 {:.2}",
        mean(&est[30])
    );
}

#[test]
fn rate_change_down_is_tracked() {
    // From 50 to 5: |gap| = 45·0.9^s (plus 0.03 because rounds without clocks are skipped, so
    // λ̂ tends to E[Δ | Δ > 0] = 5.03), below 20% of 5 (1.0) from s = 37 on and 1.9 at s = 30.
    let est = estimates_after_change(50.0, 5.0, 400, 100, 12);
    let m30 = mean(&est[30]);
    let m38 = mean(&est[38]);
    assert!(m30 > 6.0, "mean λ̂ 30 rounds after 50 → 5 is {m30}: adapts faster than α = 0.1 allows");
    assert!(m38 < 6.0, "mean λ̂ 38 rounds after 50 → 5 is {m38}, not within 20% of 5");
    // Single trials are noisier at this rate (σ ≈ 0.5): 90% within 20% at s = 60, all within 50%.
    let within = est[60].iter().filter(|e| (4.0..=6.0).contains(*e)).count();
    assert!(
        within * 10 >= est[60].len() * 9,
        "only {within} of {} trials within 20% at s = 60",
        est[60].len()
    );
    for (s, row) in est.iter().enumerate().skip(60) {
        for &e in row {
            assert!((2.5..=7.5).contains(&e), "λ̂ = {e} {s} rounds after 50 → 5");
        }
    }
    std::println!(
        "50 → 5: mean λ̂ after 30 rounds {m30:.2}, after 38 {m38:.2}, {within}/400 within 20% at 60"
    );
}

/// The paper's rule without the `max(λ̂, Δ)` heuristic, for comparison: window `Q(2·λ̂, p)`.
fn horizons_without_max(clocks: &[u64]) -> Vec<u64> {
    let TimingParams { alpha, p, lambda0, .. } = TimingParams::default();
    let mut est = lambda0;
    let mut prev = None;
    clocks
        .iter()
        .map(|&c| {
            let delta = prev.map_or(0, |q| c - q);
            if delta > 0 {
                est = (1.0 - alpha) * est + alpha * delta as f64;
            }
            prev = Some(c);
            c + poisson_quantile(2.0 * est, p)
        })
        .collect()
}

#[test]
fn rate_jump_up_late_fraction_stays_low() {
    // The rate jumps from 5 to 50 in round J. Decisions taken in rounds J − 1 and J cannot
    // know of it (actions in rounds J and J + 1 may be late whatever the rule). From round
    // J + 1 on the node has seen Δ ≈ 50, so with max(λ̂, Δ) the window covers the new rate at
    // once, while λ̂ alone needs ~20 rounds to catch up. Judged: intents acted on in rounds
    // J + 2 ..= J + 30.
    const J: usize = 200;
    let mut rng = Rng(99);
    let (mut with, mut without) = (LateStats { counted: 0, late: 0, at_once: 0 }, 0u64);
    let mut unavoidable = LateStats { counted: 0, late: 0, at_once: 0 };
    for _ in 0..200 {
        let cs = clocks(J + 80, &mut rng, |t| if t < J { 5.0 } else { 50.0 });
        let mut timer = ActionTimer::new(1, TimingParams::default());
        let hs = horizons_of(&mut timer, &cs, &mut rng);
        let base = horizons_without_max(&cs);
        let seed = rng.next_u64();
        let s = late_stats(&cs, &hs, J - 20..J + 30, J + 2..J + 31, 32, 1500, &mut Rng(seed));
        let b = late_stats(&cs, &base, J - 20..J + 30, J + 2..J + 31, 32, 1500, &mut Rng(seed));
        let u = late_stats(&cs, &hs, J - 20..J + 30, J..J + 2, 32, 1500, &mut Rng(seed));
        with.counted += s.counted;
        with.late += s.late;
        without += b.late;
        unavoidable.counted += u.counted;
        unavoidable.late += u.late;
    }
    let f_with = with.fraction();
    let f_without = without as f64 / with.counted as f64;
    let msg = format!(
        "5 → 50, rounds J+2..=J+30: late {f_with:.2e} with max(λ̂, Δ), {f_without:.2e} with λ̂ alone \
         ({} intents); rounds J, J+1: {:.2e}",
        with.counted,
        unavoidable.fraction()
    );
    std::println!("{msg}");
    assert!(with.counted >= 100_000, "{msg}");
    assert!(f_with < 0.005, "{msg}");
    assert!(f_with * 10.0 < f_without, "{msg}");
}

#[test]
fn idle_rounds_keep_estimate() {
    let mut timer = ActionTimer::new(2, TimingParams::default());
    let mut rng = Rng(3);
    let mut c = [0u64, 0];
    for _ in 0..50 {
        c[0] += rng.poisson(30.0);
        c[1] += rng.poisson(2.0);
        timer.start_round(&[Clock(c[0]), Clock(c[1])]);
    }
    let before = [timer.estimate(0), timer.estimate(1)];
    // Worker 0 pauses (e.g. evaluation at the end of an epoch); worker 1 keeps going.
    for _ in 0..100 {
        c[1] += 1 + rng.poisson(2.0);
        timer.start_round(&[Clock(c[0]), Clock(c[1])]);
        assert_eq!(timer.estimate(0).to_bits(), before[0].to_bits());
        assert_eq!(timer.window(0), poisson_quantile(2.0 * before[0], 0.9999));
        assert_eq!(timer.horizon(0), Clock(c[0] + timer.window(0)));
    }
    assert_ne!(timer.estimate(1).to_bits(), before[1].to_bits());
    // A clock that goes backwards counts as no progress.
    timer.start_round(&[Clock(c[0] - 5), Clock(c[1])]);
    assert_eq!(timer.estimate(0).to_bits(), before[0].to_bits());
    assert_eq!(timer.estimate(0).to_bits(), before[0].to_bits());
}

#[test]
fn immediate_mode_acts_on_everything() {
    let params = TimingParams { immediate: true, ..TimingParams::default() };
    let mut timer = ActionTimer::new(3, params);
    let starts = [0, 1, 1_000, 1 << 40, u64::MAX - 1, u64::MAX];
    for &s in &starts {
        assert!(timer.acts_on(1, Clock(s)), "before the first round, start {s}");
    }
    let mut rng = Rng(5);
    let mut c = 0;
    for _ in 0..100 {
        c += rng.poisson(7.0);
        timer.start_round(&[Clock(c), Clock(c / 2), Clock(u64::MAX)]);
        for w in 0..3 {
            assert_eq!(timer.window(w), u64::MAX);
            assert_eq!(timer.horizon(w), Clock(u64::MAX));
            for &s in &starts {
                assert!(timer.acts_on(w, Clock(s)), "worker {w}, start {s}");
            }
        }
    }
    // The estimate is still maintained.
    assert!((timer.estimate(0) - 7.0).abs() < 3.0, "{}", timer.estimate(0));
    // Timed mode does not act on everything.
    let mut timed = ActionTimer::new(1, TimingParams::default());
    timed.start_round(&[Clock(0)]);
    assert!(!timed.acts_on(0, Clock(1_000)));
}

#[test]
fn first_round_uses_lambda0() {
    let q20 = Reference::new(20.0).quantile(0.9999);
    assert_eq!(q20, 39);
    let mut timer = ActionTimer::new(2, TimingParams::default());
    // Before any round: clock 0, λ̂₀ = 10, window Q(20).
    assert_eq!((timer.estimate(0), timer.window(0), timer.horizon(0)), (10.0, q20, Clock(q20)));
    // First round: no previous clock, so Δ = 0 however far the clock is from 0.
    timer.start_round(&[Clock(1_000), Clock(0)]);
    for w in 0..2 {
        assert_eq!(timer.estimate(w), 10.0);
        assert_eq!(timer.window(w), q20);
    }
    assert_eq!(timer.horizon(0), Clock(1_000 + q20));
    assert!(timer.acts_on(0, Clock(1_000 + q20 - 1)));
    assert!(!timer.acts_on(0, Clock(1_000 + q20)));
    // Second round, Δ = 5 < λ̂: λ̂ = 0.9·10 + 0.1·5 = 9.5 and the window is Q(2·9.5).
    // Worker 1, Δ = 30 > λ̂: λ̂ = 0.9·10 + 0.1·30 = 12 and the window is Q(2·30).
    timer.start_round(&[Clock(1_005), Clock(30)]);
    assert!((timer.estimate(0) - 9.5).abs() < 1e-12);
    assert_eq!(timer.window(0), Reference::new(19.0).quantile(0.9999));
    assert!((timer.estimate(1) - 12.0).abs() < 1e-12);
    assert_eq!(timer.window(1), Reference::new(60.0).quantile(0.9999));
    assert_eq!(timer.window(1), 91);
    // A different λ̂₀ is honoured.
    let mut other = ActionTimer::new(1, TimingParams { lambda0: 100.0, ..TimingParams::default() });
    other.start_round(&[Clock(7)]);
    assert_eq!((other.estimate(0), other.window(0)), (100.0, 255));
}

#[test]
fn robust_to_bad_input() {
    let mut timer = ActionTimer::new(2, TimingParams::default());
    // Out-of-range workers: act, no panic.
    assert!(timer.acts_on(2, Clock(u64::MAX)));
    assert!(timer.acts_on(usize::MAX, Clock(5)));
    assert_eq!(timer.horizon(9), Clock(u64::MAX));
    assert_eq!(timer.window(9), u64::MAX);
    assert!(timer.estimate(9).is_nan());
    assert_eq!(timer.clock(9), Clock(0));
    // Fewer clocks than workers: the others keep their state; more: the rest is ignored.
    timer.start_round(&[Clock(10)]);
    assert_eq!(timer.clock(0), Clock(10));
    assert_eq!(timer.clock(1), Clock(0));
    timer.start_round(&[Clock(20), Clock(3), Clock(99)]);
    assert_eq!((timer.clock(0), timer.clock(1)), (Clock(20), Clock(3)));
    assert_eq!(timer.workers(), 2);
    // Clocks near the top of the range saturate instead of overflowing.
    timer.start_round(&[Clock(u64::MAX - 3), Clock(u64::MAX)]);
    assert_eq!(timer.horizon(0), Clock(u64::MAX));
    assert!(timer.acts_on(0, Clock(u64::MAX)));
    assert!(timer.estimate(0).is_finite());
    // Unusable parameters are replaced.
    let bad = TimingParams { alpha: f64::NAN, p: f64::NAN, lambda0: -1.0, immediate: false };
    let t = ActionTimer::new(1, bad);
    assert_eq!(*t.params(), TimingParams::default());
    let t =
        ActionTimer::new(1, TimingParams { alpha: 7.0, lambda0: f64::INFINITY, ..TimingParams::default() });
    assert_eq!((t.params().alpha, t.params().lambda0), (1.0, 10.0));
    // No workers at all.
    let mut empty = ActionTimer::new(0, TimingParams::default());
    empty.start_round(&[Clock(1)]);
    assert!(empty.acts_on(0, Clock(1)));
}
