//! Logistic regression on hashed sparse features (`parma train lr`), the classic
//! parameter-server workload (Li et al., OSDI'14: ad-click models). Each of the `2^bits` hashed
//! features is one key; its value is two reals, the optimizer's state beside the weight, so the
//! state travels with it as AdaGrad's accumulators do in the KGE task:
//!
//! - AdaGrad: `[w | Σ g²]`; a step pushes `-lr · g / (sqrt(acc + g²) + eps)` and `g²`, where `g`
//!   is the feature's gradient summed over the step's examples plus `l2 · w`.
//! - FTRL-Proximal (McMahan et al., KDD'13, Algorithm 1): `[z | n]`; the weight is
//!   `0` if `|z| ≤ l1`, else `-(z - sign(z) l1) / ((beta + sqrt(n)) / lr + l2)`; a step pushes
//!   `g - sigma · w` on `z` and `g²` on `n`, with `sigma = (sqrt(n + g²) - sqrt(n)) / lr`. Both
//!   updates are sums, so concurrent pushes of several workers add up as parma merges them.
//!
//! Quality: AUC (ties count half) and mean log loss on the test rows. The data sets have no
//! validation split; the periodic evaluation reports the test rows too, and nothing is tuned
//! on them by the program.

pub mod data;

use std::fmt;

use parma::Key;

use self::data::LrData;
use super::task::{Quality, StepBuffers, Task};
use super::{TrainError, TrainOptions};

/// The optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimizer {
    /// Per-coordinate AdaGrad.
    AdaGrad,
    /// FTRL-Proximal with L1 and L2.
    Ftrl,
}

impl Optimizer {
    /// Every optimizer.
    pub const ALL: [Optimizer; 2] = [Optimizer::AdaGrad, Optimizer::Ftrl];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::AdaGrad => "adagrad",
            Optimizer::Ftrl => "ftrl",
        }
    }

    /// The optimizer called `name`.
    pub fn from_name(name: &str) -> Option<Optimizer> {
        Optimizer::ALL.into_iter().find(|o| o.name() == name)
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of `parma train lr`.
#[derive(Clone, Debug, PartialEq)]
pub struct LrOptions {
    /// The optimizer.
    pub optimizer: Optimizer,
    /// L1 weight (FTRL only).
    pub l1: f32,
    /// L2 weight.
    pub l2: f32,
    /// FTRL's beta.
    pub beta: f32,
}

impl Default for LrOptions {
    fn default() -> LrOptions {
        LrOptions { optimizer: Optimizer::AdaGrad, l1: 0.0, l2: 1e-4, beta: 1.0 }
    }
}

/// Largest `--bits`.
pub const BITS_MAX: u32 = 26;

impl LrOptions {
    /// Refuses options that cannot work.
    pub fn check(&self) -> Result<(), TrainError> {
        for (name, v) in [("--l1", self.l1), ("--l2", self.l2), ("--beta", self.beta)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(TrainError::Options(format!("{name} must be a finite number >= 0, not {v}")));
            }
        }
        if self.l1 > 0.0 && self.optimizer != Optimizer::Ftrl {
            return Err(TrainError::Options("--l1 needs --optimizer ftrl (AdaGrad has no L1 here)".into()));
        }
        Ok(())
    }
}

/// Checks `--bits`.
pub fn check_bits(bits: u32) -> Result<(), TrainError> {
    if !(1..=BITS_MAX).contains(&bits) {
        return Err(TrainError::Options(format!("--bits must be between 1 and {BITS_MAX}, not {bits}")));
    }
    Ok(())
}

/// AdaGrad's term that keeps the step finite.
const EPS: f32 = 1e-8;

/// Logistic regression as a [`Task`]; an example is a training row's number.
pub struct LrTask<'a> {
    data: &'a LrData,
    rows: Vec<u32>,
    lr: f32,
    opt: LrOptions,
}

impl<'a> LrTask<'a> {
    /// The task of fitting `data` (options checked by the caller).
    pub fn new(data: &'a LrData, opts: &TrainOptions, lr: &LrOptions) -> LrTask<'a> {
        LrTask { data, rows: (0..data.train.len() as u32).collect(), lr: opts.lr, opt: lr.clone() }
    }

    /// The weight a key's value stands for.
    fn weight(&self, v: &[f32]) -> f32 {
        match self.opt.optimizer {
            Optimizer::AdaGrad => v[0],
            Optimizer::Ftrl => {
                let (z, n) = (v[0], v[1]);
                if z.abs() <= self.opt.l1 {
                    0.0
                } else {
                    -(z - z.signum() * self.opt.l1) / ((self.opt.beta + n.sqrt()) / self.lr + self.opt.l2)
                }
            }
        }
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Log loss of predicting `p` for `label`, with `p` kept off 0 and 1.
fn logloss(p: f64, label: bool) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    if label {
        -p.ln()
    } else {
        -(1.0 - p).ln()
    }
}

/// Area under the ROC curve of `scores` against `labels` (Mann-Whitney; ties count half);
/// 0.5 if one class is missing.
pub fn auc(scores: &[f64], labels: &[bool]) -> f64 {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|a, b| scores[*a].total_cmp(&scores[*b]));
    let (mut rank_sum, mut i) = (0.0f64, 0);
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && scores[idx[j + 1]] == scores[idx[i]] {
            j += 1;
        }
        let mid = (i + j) as f64 / 2.0 + 1.0;
        rank_sum += idx[i..=j].iter().filter(|k| labels[**k]).count() as f64 * mid;
        i = j + 1;
    }
    let pos = labels.iter().filter(|l| **l).count() as f64;
    let neg = labels.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return 0.5;
    }
    (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
}

impl Task for LrTask<'_> {
    type Example = u32;

    fn name(&self) -> &'static str {
        "lr"
    }

    fn model_name(&self) -> &'static str {
        match self.opt.optimizer {
            Optimizer::AdaGrad => "lr-adagrad",
            Optimizer::Ftrl => "lr-ftrl",
        }
    }

    fn train(&self) -> &[u32] {
        &self.rows
    }

    fn keys(&self) -> u64 {
        self.data.keys()
    }

    fn value_len(&self) -> usize {
        2
    }

    /// Every weight and state starts at zero (the loss is convex).
    fn init(&self, _seed: u64, _key: u64, out: &mut [f32]) {
        out.fill(0.0);
    }

    fn keys_of(&self, examples: &[u32], keys: &mut Vec<Key>) {
        keys.clear();
        for r in examples {
            keys.extend(self.data.train.row(*r as usize).iter().map(|k| Key(u64::from(*k))));
        }
        keys.sort_unstable();
        keys.dedup();
    }

    fn negatives(&self, _examples: usize) -> Option<(u64, usize)> {
        None
    }

    fn step(&self, examples: &[u32], b: &mut StepBuffers) -> f64 {
        b.rows.clear();
        for (i, k) in b.keys.iter().enumerate() {
            b.rows.insert(k.0, i);
        }
        b.row_vals.clear();
        b.row_vals.extend(b.vals.chunks_exact(2).map(|v| self.weight(v)));
        b.grads.clear();
        b.grads.resize(b.keys.len(), 0.0);
        let mut loss = 0.0;
        for r in examples {
            let row = self.data.train.row(*r as usize);
            let label = self.data.train.labels[*r as usize];
            let z: f64 = row.iter().map(|k| f64::from(b.row_vals[b.rows[&u64::from(*k)]])).sum();
            let p = sigmoid(z);
            loss += logloss(p, label);
            let g = (p - f64::from(u8::from(label))) as f32;
            for k in row {
                b.grads[b.rows[&u64::from(*k)]] += g;
            }
        }
        b.touched.clear();
        b.touched.extend_from_slice(&b.keys);
        b.deltas.clear();
        for (i, v) in b.vals.chunks_exact(2).enumerate() {
            let w = b.row_vals[i];
            match self.opt.optimizer {
                Optimizer::AdaGrad => {
                    let g = b.grads[i] + self.opt.l2 * w;
                    let g2 = g * g;
                    b.deltas.extend([-self.lr * g / ((v[1] + g2).sqrt() + EPS), g2]);
                }
                Optimizer::Ftrl => {
                    let (g, n) = (b.grads[i], v[1].max(0.0));
                    let sigma = ((n + g * g).sqrt() - n.sqrt()) / self.lr;
                    b.deltas.extend([g - sigma * w, g * g]);
                }
            }
        }
        loss
    }

    /// The data sets have no validation split: every evaluation is of the test rows.
    fn has_validation(&self) -> bool {
        false
    }

    /// The scores of the part's test rows, in order.
    type Partial = Vec<f64>;

    fn eval_len(&self, _test: bool) -> usize {
        self.data.test.len()
    }

    /// The weights, one per key.
    fn eval_view(&self, model: Vec<f32>) -> Vec<f32> {
        model.chunks_exact(2).map(|v| self.weight(v)).collect()
    }

    fn evaluate_part(&self, view: &[f32], _test: bool, part: std::ops::Range<usize>) -> Vec<f64> {
        let rows = &self.data.test;
        part.map(|i| rows.row(i).iter().map(|k| f64::from(view[*k as usize])).sum()).collect()
    }

    fn merge(&self, _view: &[f32], _test: bool, parts: Vec<Vec<f64>>) -> Quality {
        let rows = &self.data.test;
        let scores = parts.concat();
        let loss: f64 = scores.iter().zip(&rows.labels).map(|(z, l)| logloss(sigmoid(*z), *l)).sum::<f64>();
        Quality::Classification { auc: auc(&scores, &rows.labels), logloss: loss / rows.len().max(1) as f64 }
    }

    fn access_counts(&self) -> Vec<(Key, u64)> {
        let mut counts = vec![0u64; self.keys() as usize];
        for k in &self.data.train.keys {
            counts[*k as usize] += 1;
        }
        counts.into_iter().enumerate().filter(|(_, c)| *c > 0).map(|(k, c)| (Key(k as u64), c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_counts_ties_half_and_orders() {
        assert_eq!(auc(&[0.1, 0.2, 0.3, 0.4], &[false, false, true, true]), 1.0);
        assert_eq!(auc(&[0.4, 0.3, 0.2, 0.1], &[false, false, true, true]), 0.0);
        assert_eq!(auc(&[0.5, 0.5], &[false, true]), 0.5);
        assert_eq!(auc(&[0.1, 0.2], &[true, true]), 0.5);
    }

    #[test]
    fn both_optimizers_lower_the_loss_of_a_separable_row() {
        let raw = data::RawData {
            fields: vec!["f".into()],
            train: vec![
                data::RawRow { label: true, values: vec![(0, data::Value::Cat("a".into()))] },
                data::RawRow { label: false, values: vec![(0, data::Value::Cat("b".into()))] },
            ],
            test: vec![],
        };
        let d = LrData::hash(&raw, 8, false);
        for optimizer in Optimizer::ALL {
            let t = LrTask::new(
                &d,
                &TrainOptions { lr: 0.5, ..TrainOptions::default() },
                &LrOptions { optimizer, ..LrOptions::default() },
            );
            let mut b = StepBuffers::default();
            t.keys_of(&[0, 1], &mut b.keys);
            b.vals = vec![0.0; b.keys.len() * 2];
            let mut losses = Vec::new();
            for _ in 0..5 {
                losses.push(t.step(&[0, 1], &mut b));
                for (v, d) in b.vals.iter_mut().zip(&b.deltas) {
                    *v += d;
                }
            }
            assert!(losses.windows(2).all(|w| w[1] < w[0]), "{optimizer}: {losses:?}");
        }
    }

    #[test]
    fn equal_tokens_of_different_fields_get_different_keys() {
        let row = |u: &str, i: &str| data::RawRow {
            label: true,
            values: vec![(0, data::Value::Cat(u.into())), (1, data::Value::Cat(i.into()))],
        };
        let raw = data::RawData {
            fields: vec!["user".into(), "item".into()],
            train: (1..1000).map(|k| row(&k.to_string(), &(k + 100).to_string())).collect(),
            test: vec![],
        };
        let d = LrData::hash(&raw, 18, false);
        let users: std::collections::HashSet<u32> = (0..d.train.len()).map(|i| d.train.row(i)[1]).collect();
        let shared = (0..d.train.len()).filter(|i| users.contains(&d.train.row(*i)[2])).count();
        // 999 users and 999 items in 2^18 keys: a few chance collisions at most.
        assert!(shared < 20, "{shared} items share a key with a user");
    }

    /// Evaluated in parts and merged, the test rows give the figures of one pass over them.
    #[test]
    fn parts_merge_into_the_whole_evaluation() {
        let d = LrData::hash(&data::planted(200, 3, 4, 2), 8, false);
        let t = LrTask::new(&d, &TrainOptions::default(), &LrOptions::default());
        let model: Vec<f32> = (0..d.keys() * 2).map(|k| ((k * 37 % 11) as f32 - 5.0) * 0.1).collect();
        let view = t.eval_view(model.clone());
        let n = t.eval_len(true);
        assert!(n > 10, "{n} test rows");
        let parts = [0..3, 3..n / 2, n / 2..n].map(|r| t.evaluate_part(&view, true, r)).to_vec();
        assert_eq!(t.merge(&view, true, parts), t.evaluate(&model, true));
    }

    #[test]
    fn ftrl_l1_keeps_small_weights_at_zero() {
        let d = LrData::hash(&data::planted(10, 1, 2, 1), 4, false);
        let t = LrTask::new(
            &d,
            &TrainOptions::default(),
            &LrOptions { optimizer: Optimizer::Ftrl, l1: 1.0, ..LrOptions::default() },
        );
        assert_eq!(t.weight(&[0.9, 4.0]), 0.0);
        assert!(t.weight(&[2.0, 4.0]) < 0.0);
    }
}
