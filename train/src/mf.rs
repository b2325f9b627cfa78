//! Biased matrix factorization trained with SGD (`parma train mf`): the rating of user `u` for
//! item `i` is predicted as `mu + b_u + b_i + <p_u, q_i>` (Koren, Bell, Volinsky 2009; Surprise's
//! SVD), `mu` the training mean. User `u` is key `u`, item `i` key `users + i`; a key's value is
//! `[bias | factors (dim)]`.
//!
//! A step sums, per key, the gradients of `(r - prediction)² / 2 + reg/2 · (b² + |p|²)` over its
//! ratings and pushes `-lr · gradient`. Predictions are clipped to the rating range for the
//! RMSE, as Surprise does.
//!
//! Data: RecBole's `.inter` files (`ml-100k.inter`, a header line `user_id:token item_id:token
//! rating:float timestamp:float` then tab-separated rows) and the original `u.data` layout
//! (whitespace-separated `user item rating timestamp`, no header). The split is fixed by its
//! seed (`--split-seed`, by default [`SPLIT_SEED`]): the rows are shuffled with it and the
//! first 80 % train, the rest test.
//! MovieLens-100k has no validation split; the periodic evaluation reports RMSE on the test
//! split, and nothing here is tuned on it.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use parma::Key;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_distr::{Distribution as _, Normal};

use super::task::{Quality, StepBuffers, Task};
use super::{mix, TrainError, TrainOptions};

/// The default seed of the 80/20 split (`--split-seed`).
pub const SPLIT_SEED: u64 = 0x6d6c_3130_306b;

/// One rating.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rating {
    /// User, by number.
    pub user: u32,
    /// Item, by number.
    pub item: u32,
    /// The rating.
    pub value: f32,
}

/// Ratings with the fixed split.
#[derive(Clone, Debug)]
pub struct Ratings {
    /// Users (numbered in order of first appearance).
    pub users: u32,
    /// Items.
    pub items: u32,
    /// Training ratings (80 %).
    pub train: Vec<Rating>,
    /// Test ratings (20 %).
    pub test: Vec<Rating>,
}

/// Why ratings could not be loaded.
#[derive(Debug)]
pub enum RatingsError {
    /// The file could not be read.
    Io(PathBuf, std::io::Error),
    /// A line is malformed.
    Line {
        /// The file.
        file: PathBuf,
        /// Its number, from 1.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// Fewer than 2 ratings.
    TooFew(PathBuf),
}

impl fmt::Display for RatingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RatingsError::Io(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            RatingsError::Line { file, line, what } => write!(f, "{}:{line}: {what}", file.display()),
            RatingsError::TooFew(p) => write!(f, "{}: fewer than 2 ratings", p.display()),
        }
    }
}

impl std::error::Error for RatingsError {}

impl Ratings {
    /// Loads a `.inter` or `u.data` file and splits it with `split_seed`.
    pub fn load(file: &Path, split_seed: u64) -> Result<Ratings, RatingsError> {
        let text = std::fs::read_to_string(file).map_err(|e| RatingsError::Io(file.to_path_buf(), e))?;
        Ratings::parse(file, &text, split_seed)
    }

    /// Parses `text` (read from `file`) and splits it with `split_seed`.
    pub fn parse(file: &Path, text: &str, split_seed: u64) -> Result<Ratings, RatingsError> {
        let (mut users, mut items) = (HashMap::new(), HashMap::new());
        let mut all = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || (i == 0 && line.contains(':')) {
                continue;
            }
            let bad = |what: String| RatingsError::Line { file: file.to_path_buf(), line: i + 1, what };
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 3 {
                return Err(bad(format!(
                    "expected `user item rating [timestamp]`, found {} fields",
                    f.len()
                )));
            }
            let value: f32 = f[2].parse().map_err(|_| bad(format!("rating `{}` is not a number", f[2])))?;
            if !value.is_finite() {
                return Err(bad(format!("rating `{}` is not finite", f[2])));
            }
            let n = users.len() as u32;
            let user = *users.entry(f[0].to_string()).or_insert(n);
            let n = items.len() as u32;
            let item = *items.entry(f[1].to_string()).or_insert(n);
            all.push(Rating { user, item, value });
        }
        if all.len() < 2 {
            return Err(RatingsError::TooFew(file.to_path_buf()));
        }
        Ok(Ratings::split(users.len() as u32, items.len() as u32, all, split_seed))
    }

    /// The 80/20 split of `all` that `split_seed` shuffles.
    pub fn split(users: u32, items: u32, mut all: Vec<Rating>, split_seed: u64) -> Ratings {
        all.shuffle(&mut StdRng::seed_from_u64(split_seed));
        let cut = (all.len() * 4 / 5).max(1);
        let test = all.split_off(cut);
        Ratings { users, items, train: all, test }
    }
}

/// Options of `parma train mf`.
#[derive(Clone, Debug, PartialEq)]
pub struct MfOptions {
    /// L2 regularization weight (Surprise: 0.02).
    pub reg: f32,
    /// Standard deviation of the factors' normal initialization (Surprise: 0.1).
    pub init_std: f32,
}

impl Default for MfOptions {
    fn default() -> MfOptions {
        MfOptions { reg: 0.02, init_std: 0.1 }
    }
}

impl MfOptions {
    /// Refuses options that cannot work.
    pub fn check(&self) -> Result<(), TrainError> {
        if !(self.reg.is_finite() && self.reg >= 0.0) {
            return Err(TrainError::Options(format!("--reg must be a finite number >= 0, not {}", self.reg)));
        }
        if !(self.init_std.is_finite() && self.init_std > 0.0) {
            return Err(TrainError::Options(format!(
                "--init-std must be a finite number > 0, not {}",
                self.init_std
            )));
        }
        Ok(())
    }
}

/// Matrix factorization as a [`Task`].
pub struct MfTask<'a> {
    data: &'a Ratings,
    dim: usize,
    lr: f32,
    reg: f32,
    init_std: f32,
    mean: f32,
    range: (f32, f32),
}

impl<'a> MfTask<'a> {
    /// The task of factorizing `data` (options checked by the caller).
    pub fn new(data: &'a Ratings, opts: &TrainOptions, mf: &MfOptions) -> MfTask<'a> {
        let mean = (data.train.iter().map(|r| f64::from(r.value)).sum::<f64>()
            / data.train.len().max(1) as f64) as f32;
        let range =
            data.train.iter().fold((f32::MAX, f32::MIN), |(lo, hi), r| (lo.min(r.value), hi.max(r.value)));
        MfTask { data, dim: opts.dim, lr: opts.lr, reg: mf.reg, init_std: mf.init_std, mean, range }
    }

    fn item_key(&self, i: u32) -> u64 {
        u64::from(self.data.users) + u64::from(i)
    }

    /// RMSE of always predicting the training mean on the test split.
    pub fn mean_rmse(&self) -> f64 {
        rmse(self.data.test.iter().map(|r| (r.value, self.mean)))
    }

    fn predict(&self, u: &[f32], i: &[f32]) -> f32 {
        self.mean + u[0] + i[0] + u[1..].iter().zip(&i[1..]).map(|(a, b)| a * b).sum::<f32>()
    }
}

fn rmse(pairs: impl Iterator<Item = (f32, f32)>) -> f64 {
    let (mut sum, mut n) = (0.0f64, 0u64);
    for (r, p) in pairs {
        let e = f64::from(r - p);
        sum += e * e;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        (sum / n as f64).sqrt()
    }
}

impl Task for MfTask<'_> {
    type Example = Rating;

    fn name(&self) -> &'static str {
        "mf"
    }

    fn model_name(&self) -> &'static str {
        "biased-mf"
    }

    fn train(&self) -> &[Rating] {
        &self.data.train
    }

    fn keys(&self) -> u64 {
        u64::from(self.data.users) + u64::from(self.data.items)
    }

    fn value_len(&self) -> usize {
        self.dim + 1
    }

    /// Zero bias, N(0, init_std) factors.
    fn init(&self, seed: u64, key: u64, out: &mut [f32]) {
        let mut rng = StdRng::seed_from_u64(mix(seed ^ mix(key.wrapping_add(0x3f))));
        let normal = Normal::new(0.0f32, self.init_std).expect("std checked positive and finite");
        out[0] = 0.0;
        for v in &mut out[1..] {
            *v = normal.sample(&mut rng);
        }
    }

    fn keys_of(&self, examples: &[Rating], keys: &mut Vec<Key>) {
        keys.clear();
        for r in examples {
            keys.extend([Key(r.user.into()), Key(self.item_key(r.item))]);
        }
        keys.sort_unstable();
        keys.dedup();
    }

    fn negatives(&self, _examples: usize) -> Option<(u64, usize)> {
        None
    }

    fn step(&self, examples: &[Rating], b: &mut StepBuffers) -> f64 {
        let len = self.value_len();
        b.rows.clear();
        for (i, k) in b.keys.iter().enumerate() {
            b.rows.insert(k.0, i);
        }
        b.grads.clear();
        b.grads.resize(b.keys.len() * len, 0.0);
        let mut loss = 0.0f64;
        for r in examples {
            let (u, i) = (b.rows[&u64::from(r.user)], b.rows[&self.item_key(r.item)]);
            let (uv, iv) = (&b.vals[u * len..(u + 1) * len], &b.vals[i * len..(i + 1) * len]);
            let e = r.value - self.predict(uv, iv);
            loss += f64::from(e * e);
            // d/d b_u = -e + reg b_u; d/d p_u = -e q_i + reg p_u; and the same for the item.
            for (row, own, other) in [(u, uv, iv), (i, iv, uv)] {
                let g = &mut b.grads[row * len..(row + 1) * len];
                g[0] += -e + self.reg * own[0];
                for k in 1..len {
                    g[k] += -e * other[k] + self.reg * own[k];
                }
            }
        }
        b.touched.clear();
        b.touched.extend_from_slice(&b.keys);
        b.deltas.clear();
        b.deltas.extend(b.grads.iter().map(|g| -self.lr * g));
        loss
    }

    /// MovieLens has no validation split: every evaluation is of the test ratings.
    fn has_validation(&self) -> bool {
        false
    }

    /// Squared errors summed, and their count.
    type Partial = (f64, u64);

    fn eval_len(&self, _test: bool) -> usize {
        self.data.test.len()
    }

    fn evaluate_part(&self, view: &[f32], _test: bool, part: std::ops::Range<usize>) -> (f64, u64) {
        let len = self.value_len();
        let row = |k: u64| &view[k as usize * len..(k as usize + 1) * len];
        let (lo, hi) = self.range;
        self.data.test[part].iter().fold((0.0, 0), |(sum, n), r| {
            let p = self.predict(row(r.user.into()), row(self.item_key(r.item))).clamp(lo, hi);
            let e = f64::from(r.value - p);
            (sum + e * e, n + 1)
        })
    }

    fn merge(&self, _view: &[f32], _test: bool, parts: Vec<(f64, u64)>) -> Quality {
        let (sum, n) = parts.into_iter().fold((0.0, 0), |(s, n), (a, b)| (s + a, n + b));
        Quality::Rmse { rmse: if n == 0 { 0.0 } else { (sum / n as f64).sqrt() } }
    }

    fn access_counts(&self) -> Vec<(Key, u64)> {
        let mut counts = vec![0u64; self.keys() as usize];
        for r in &self.data.train {
            counts[r.user as usize] += 1;
            counts[self.item_key(r.item) as usize] += 1;
        }
        counts.into_iter().enumerate().map(|(k, c)| (Key(k as u64), c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inter_and_udata_files_parse_and_split_80_20() {
        let inter = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n\
                     196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n\
                     196\t302\t4\t1\n186\t242\t5\t2\n";
        let r = Ratings::parse(Path::new("x.inter"), inter, SPLIT_SEED).unwrap();
        assert_eq!((r.users, r.items, r.train.len(), r.test.len()), (3, 3, 4, 1));
        let udata = "1 10 5 0\n2 10 4 0\n1 11 2 0\n";
        let r = Ratings::parse(Path::new("u.data"), udata, SPLIT_SEED).unwrap();
        assert_eq!((r.users, r.items, r.train.len() + r.test.len()), (2, 2, 3));
    }

    #[test]
    fn the_split_seed_picks_the_split_and_keeps_every_rating() {
        let text: String = (0..50).map(|i| format!("{} {} {}\n", i % 7, i % 11, 1 + i % 5)).collect();
        let split = |seed| {
            let r = Ratings::parse(Path::new("x"), &text, seed).unwrap();
            let key = |r: &Rating| (r.user, r.item, r.value as u32);
            let (mut train, mut test): (Vec<_>, Vec<_>) =
                (r.train.iter().map(key).collect(), r.test.iter().map(key).collect());
            train.sort();
            test.sort();
            (train, test)
        };
        let (a, b, again) = (split(1), split(2), split(1));
        assert_eq!(a, again);
        assert_ne!(a.1, b.1);
        for (train, test) in [&a, &b] {
            assert_eq!((train.len(), test.len()), (40, 10));
            let mut all = [train.clone(), test.clone()].concat();
            all.sort();
            let mut expect = split(3).0;
            expect.extend(split(3).1);
            expect.sort();
            assert_eq!(all, expect);
        }
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        for (text, expect) in
            [("1 2\n", "x:1: expected `user item rating"), ("1 2 3\n1 2 three\n", "x:2: rating `three`")]
        {
            let e = Ratings::parse(Path::new("x"), text, SPLIT_SEED).unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
        }
        assert!(Ratings::parse(Path::new("x"), "1 2 3\n", SPLIT_SEED)
            .unwrap_err()
            .to_string()
            .contains("fewer than 2"));
    }

    /// Evaluated in parts and merged, the test ratings give the RMSE of one pass over them.
    #[test]
    fn parts_merge_into_the_whole_evaluation() {
        let text: String = (0..60).map(|i| format!("{} {} {}\n", i % 7, i % 11, 1 + i % 5)).collect();
        let data = Ratings::parse(Path::new("x"), &text, SPLIT_SEED).unwrap();
        let t =
            MfTask::new(&data, &TrainOptions { dim: 3, ..TrainOptions::default() }, &MfOptions::default());
        let model: Vec<f32> = (0..t.keys() as usize * 4).map(|k| ((k * 13 % 7) as f32 - 3.0) * 0.2).collect();
        let n = t.eval_len(true);
        assert_eq!(n, 12);
        let parts = [0..5, 5..5, 5..12].map(|r| t.evaluate_part(&model, true, r)).to_vec();
        let (Quality::Rmse { rmse: a }, Quality::Rmse { rmse: b }) =
            (t.merge(&model, true, parts), t.evaluate(&model, true))
        else {
            panic!("MF measures RMSE")
        };
        assert!((a - b).abs() < 1e-12 && a > 0.0, "{a} {b}");
        assert!(!t.has_validation());
    }

    #[test]
    fn gradient_step_lowers_the_error() {
        let data = Ratings {
            users: 1,
            items: 1,
            train: vec![Rating { user: 0, item: 0, value: 5.0 }],
            test: vec![],
        };
        let opts = TrainOptions { dim: 2, lr: 0.1, ..TrainOptions::default() };
        let t = MfTask::new(&data, &opts, &MfOptions::default());
        let mut b = StepBuffers::default();
        t.keys_of(&data.train, &mut b.keys);
        b.vals = vec![0.0, 0.5, 0.5, 0.0, 0.5, 0.5];
        let mut losses = Vec::new();
        for _ in 0..5 {
            losses.push(t.step(&data.train, &mut b));
            for (v, d) in b.vals.iter_mut().zip(&b.deltas) {
                *v += d;
            }
        }
        // The mean is the only rating, so the error is -(biases + <p, q>), 0.5 at first; it shrinks.
        assert!(losses[0] > 0.2 && losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    }
}
