//! Local pull and push rates of nodes of different sizes, measured in paired rounds: in each
//! round every node runs the same number of operations, in rotating order, so a drift of the
//! machine's speed hits every size of a round alike; the figure is the per-round ratio
//! rate(N) / rate(baseline).

use std::hint::black_box;
use std::time::{Duration, Instant};

use parma_core::Key;
use parma_runtime::Worker;

use crate::build::{Keys, Node, LEN};

/// Keys per pull or push (distinct under uniform access; Zipf batches repeat hot keys).
pub const KEYS_PER_OP: usize = 1000;
/// Keys drawn in advance per worker: far more than the caches hold at every size measured.
const RING_KEYS: usize = KEYS_PER_OP * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    Uniform,
    /// Zipf(0.99) over the key ranks; rank r is `Keys::key(r)`.
    Zipf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Pull,
    Push,
}

/// xorshift64*.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf over ranks `0..n` with exponent `s` (not 1) by rejection-inversion (Hörmann and
/// Derflinger 1996, as `rand_distr::Zipf`): constant memory at any `n`.
pub struct Zipf {
    n: u64,
    s: f64,
    t: f64,
    q: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        let q = 1.0 / (1.0 - s);
        Zipf { n, s, t: ((n as f64).powf(1.0 - s) - s) * q, q }
    }
    fn inv_cdf(&self, p: f64) -> f64 {
        let pt = p * self.t;
        if pt <= 1.0 {
            pt
        } else {
            (pt * (1.0 - self.s) + self.s).powf(self.q)
        }
    }
    pub fn draw(&self, rng: &mut Rng) -> u64 {
        loop {
            let inv_b = self.inv_cdf(rng.unit());
            let x = (inv_b + 1.0).floor();
            let mut ratio = x.powf(-self.s);
            if x > 1.0 {
                ratio *= inv_b.powf(self.s);
            }
            if rng.unit() < ratio {
                return (x as u64).clamp(1, self.n) - 1;
            }
        }
    }
}

/// `RING_KEYS` keys of `keys` drawn under `dist`, for worker `lane`.
fn ring(keys: Keys, dist: Dist, lane: u64) -> Vec<Key> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (lane + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let zipf = Zipf::new(keys.n(), 0.99);
    (0..RING_KEYS)
        .map(|_| {
            let i = match dist {
                Dist::Uniform => rng.next() % keys.n(),
                Dist::Zipf => zipf.draw(&mut rng),
            };
            keys.key(i)
        })
        .collect()
}

/// One worker's state while timed.
struct Lane<'a> {
    worker: &'a mut Worker,
    ring: Vec<Key>,
    at: usize,
    buf: Vec<f32>,
}

/// `ops` operations on every lane at once, one thread a lane; the wall time.
fn run(lanes: &mut [Lane], op: Op, ops: usize, delta: &[f32]) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for l in lanes.iter_mut() {
            s.spawn(move || {
                for _ in 0..ops {
                    let keys = &l.ring[l.at..l.at + KEYS_PER_OP];
                    l.at = (l.at + KEYS_PER_OP) % RING_KEYS;
                    match op {
                        Op::Pull => l.worker.pull(keys, black_box(&mut l.buf)).expect("pull"),
                        Op::Push => {
                            let t = l.worker.push(keys, black_box(delta)).expect("push");
                            l.worker.wait(t).expect("push applied");
                        }
                    }
                }
            });
        }
    });
    start.elapsed()
}

/// One row: per node, its median rate (keys per second) and, for every node after the first,
/// the sorted per-round ratios rate(node) / rate(first).
pub struct Row {
    pub rates: Vec<f64>,
    pub ratios: Vec<Vec<f64>>,
}

/// Times `op` under `dist` with `threads` workers on every node, in `rounds` paired rounds
/// of `ops` operations per worker and node. Asserts that every access was local.
pub fn row(nodes: &mut [Node], dist: Dist, op: Op, threads: usize, rounds: usize, ops: usize) -> Row {
    let delta = vec![0.5f32; KEYS_PER_OP * LEN];
    let mut sides: Vec<Vec<Lane>> = nodes
        .iter_mut()
        .map(|n| {
            let keys = n.keys;
            n.workers[..threads]
                .iter_mut()
                .enumerate()
                .map(|(i, worker)| Lane {
                    worker,
                    ring: ring(keys, dist, i as u64),
                    at: 0,
                    buf: vec![0.0; KEYS_PER_OP * LEN],
                })
                .collect()
        })
        .collect();
    let remote = |sides: &Vec<Vec<Lane>>| -> u64 {
        sides
            .iter()
            .flatten()
            .map(|l| l.worker.stats())
            .map(|s| s.keys_pulled_remote + s.keys_pushed_remote)
            .sum()
    };
    let remote_before = remote(&sides);
    let keys_per_side = (ops * KEYS_PER_OP * threads) as f64;
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    for r in 0..rounds {
        for j in 0..sides.len() {
            let s = (r + j) % sides.len();
            secs[s].push(run(&mut sides[s], op, ops, &delta).as_secs_f64());
        }
    }
    assert_eq!(remote(&sides), remote_before, "every timed access must be local");
    let ratios =
        (1..secs.len()).map(|s| sorted(secs[0].iter().zip(&secs[s]).map(|(b, x)| b / x).collect())).collect();
    let rates = secs.into_iter().map(|v| keys_per_side / sorted(v)[rounds / 2]).collect();
    Row { rates, ratios }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}
