//! Knowledge-graph embedding models (ComplEx, DistMult) and one training step: negative
//! sampling with a logistic loss, regularization, AdaGrad.
//!
//! Each entity and each relation is one key: entity `e` is key `e`, relation `r` is key
//! `entities + r`. A key's value is `[embedding (dim) | AdaGrad accumulator (dim)]`, as in
//! AdaPM's KGE app, so the optimizer's state travels with the embedding. A step pulls the
//! values, computes the summed gradient of every key it touched, and pushes one delta per key:
//! `-lr * g / (sqrt(acc + g²) + eps)` on the embedding and `g²` on the accumulator.
//!
//! Loss of a triple `(h, r, t)` with negatives `h'_1..h'_n` (head corrupted) and `t'_1..t'_n`
//! (tail corrupted): `softplus(-s(h, r, t)) + Σ softplus(s(h'_i, r, t)) + Σ softplus(s(h, r, t'_i))`.
//! ComplEx reads an embedding of `dim` reals as `dim / 2` complex numbers, real parts first:
//! `s = Re(Σ h_k r_k conj(t_k))`. DistMult: `s = Σ h_k r_k t_k`.

use std::fmt;

use parma::Key;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution as _, Normal};

use super::eval::{rank_sums, Filter, RankSums};
use super::kg::{Kg, Triple};
use super::task::{Quality, StepBuffers, Task};
use super::{mix, KgeOptions, TrainOptions};

mod query;

pub(crate) use query::{dot, Side};

/// The scoring function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Trouillon et al. 2016: complex embeddings, `Re(<h, r, conj t>)`.
    ComplEx,
    /// Yang et al. 2015: `<h, r, t>`.
    DistMult,
}

impl Model {
    /// Every model.
    pub const ALL: [Model; 2] = [Model::ComplEx, Model::DistMult];

    /// The model's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Model::ComplEx => "complex",
            Model::DistMult => "distmult",
        }
    }

    /// The model called `name`.
    pub fn from_name(name: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The score of `(h, r, t)`.
    pub fn score(self, h: &[f32], r: &[f32], t: &[f32]) -> f32 {
        match self {
            Model::DistMult => h.iter().zip(r).zip(t).map(|((h, r), t)| h * r * t).sum(),
            Model::ComplEx => {
                let d = h.len() / 2;
                let (hr, hi) = h.split_at(d);
                let (rr, ri) = r.split_at(d);
                let (tr, ti) = t.split_at(d);
                let mut s = 0.0;
                for k in 0..d {
                    s += hr[k] * rr[k] * tr[k] + hi[k] * rr[k] * ti[k] + hr[k] * ri[k] * ti[k]
                        - hi[k] * ri[k] * tr[k];
                }
                s
            }
        }
    }

    /// Adds `c` times the score's gradient with respect to `h`, `r` and `t` to `gh`, `gr`, `gt`.
    #[allow(clippy::too_many_arguments)]
    fn add_grad(
        self,
        c: f32,
        h: &[f32],
        r: &[f32],
        t: &[f32],
        gh: &mut [f32],
        gr: &mut [f32],
        gt: &mut [f32],
    ) {
        match self {
            Model::DistMult => {
                for k in 0..h.len() {
                    gh[k] += c * r[k] * t[k];
                    gr[k] += c * h[k] * t[k];
                    gt[k] += c * h[k] * r[k];
                }
            }
            Model::ComplEx => {
                let d = h.len() / 2;
                for k in 0..d {
                    let (hr, hi, rr, ri, tr, ti) = (h[k], h[d + k], r[k], r[d + k], t[k], t[d + k]);
                    gh[k] += c * (rr * tr + ri * ti);
                    gh[d + k] += c * (rr * ti - ri * tr);
                    gr[k] += c * (hr * tr + hi * ti);
                    gr[d + k] += c * (hr * ti - hi * tr);
                    gt[k] += c * (hr * rr - hi * ri);
                    gt[d + k] += c * (hi * rr + hr * ri);
                }
            }
        }
    }
}

/// The regularizer; [`RegOn`] says which uses of an embedding it is applied on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reg {
    /// `weight/2 · ||x||²`.
    L2(f32),
    /// `weight · Σ |x_k|³` (for ComplEx over the moduli of the complex numbers; Lacroix et al.
    /// 2018).
    N3(f32),
}

impl Reg {
    /// Parses `l2:WEIGHT`, `n3:WEIGHT` or `none`.
    pub fn parse(s: &str) -> Result<Reg, String> {
        if s == "none" {
            return Ok(Reg::L2(0.0));
        }
        let (kind, w) = s.split_once(':').ok_or_else(|| {
            format!("--reg `{s}`: expected `l2:WEIGHT`, `n3:WEIGHT` or `none` (e.g. l2:1e-3)")
        })?;
        let w: f32 = w.parse().map_err(|_| format!("--reg `{s}`: `{w}` is not a number"))?;
        if !(w.is_finite() && w >= 0.0) {
            return Err(format!("--reg `{s}`: the weight must be a finite number >= 0"));
        }
        match kind {
            "l2" => Ok(Reg::L2(w)),
            "n3" => Ok(Reg::N3(w)),
            _ => Err(format!("--reg `{s}`: unknown regularizer `{kind}`; one of: l2, n3, none")),
        }
    }

    fn weight(self) -> f32 {
        match self {
            Reg::L2(w) | Reg::N3(w) => w,
        }
    }

    /// Adds the regularizer's gradient at `x` to `g`.
    fn add_grad(self, model: Model, x: &[f32], g: &mut [f32]) {
        match self {
            Reg::L2(w) => {
                for (g, x) in g.iter_mut().zip(x) {
                    *g += w * x;
                }
            }
            Reg::N3(w) => match model {
                Model::DistMult => {
                    for (g, x) in g.iter_mut().zip(x) {
                        *g += 3.0 * w * x * x.abs();
                    }
                }
                Model::ComplEx => {
                    let d = x.len() / 2;
                    for k in 0..d {
                        let m = (x[k] * x[k] + x[d + k] * x[d + k]).sqrt();
                        g[k] += 3.0 * w * m * x[k];
                        g[d + k] += 3.0 * w * m * x[d + k];
                    }
                }
            },
        }
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reg::L2(w) if *w == 0.0 => f.write_str("none"),
            Reg::L2(w) => write!(f, "l2:{w}"),
            Reg::N3(w) => write!(f, "n3:{w}"),
        }
    }
}

/// Which embeddings a step regularizes (`--reg-on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegOn {
    /// The three embeddings of each training triple, once per positive score (AdaPM's KGE
    /// app: the penalty enters the loss with the positive triple's score only).
    Positives,
    /// Every embedding each time a score uses it, negatives included: with negatives of each
    /// triple's own, the triple's embeddings once per score they enter and each negative once;
    /// with the query step (`--loss softmax`, `--shared-negatives`), the triple's three once
    /// and each candidate once per query.
    All,
}

impl RegOn {
    /// Both choices.
    pub const ALL: [RegOn; 2] = [RegOn::Positives, RegOn::All];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            RegOn::Positives => "positives",
            RegOn::All => "all",
        }
    }

    /// The choice called `name`.
    pub fn from_name(name: &str) -> Option<RegOn> {
        RegOn::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// The loss of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Logistic: each score, true or sampled, is a binary classification (AdaPM's app).
    Bce,
    /// Cross-entropy of each query's true answer against its sampled candidates (1vsAll
    /// training over a sample).
    Softmax,
}

impl Loss {
    /// Every loss.
    pub const ALL: [Loss; 2] = [Loss::Bce, Loss::Softmax];

    /// The loss's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Loss::Bce => "bce",
            Loss::Softmax => "softmax",
        }
    }

    /// The loss called `name`.
    pub fn from_name(name: &str) -> Option<Loss> {
        Loss::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// What a step needs to know about the model.
#[derive(Clone, Copy, Debug)]
pub struct StepModel {
    /// The scoring function.
    pub model: Model,
    /// Reals per embedding.
    pub dim: usize,
    /// Negatives per side of each triple, or, if `shared`, per step.
    pub negatives: usize,
    /// The step's negatives are the candidates of every query of the step (LibKGE's "batch"
    /// negative sampling), instead of `negatives` per side of each triple.
    pub shared: bool,
    /// The loss.
    pub loss: Loss,
    /// AdaGrad's learning rate.
    pub lr: f32,
    /// The regularizer.
    pub reg: Reg,
    /// Which embeddings it applies to.
    pub reg_on: RegOn,
    /// Entities (relation `r` is key `entities + r`).
    pub entities: u64,
}

/// AdaGrad's term that keeps the step finite.
const ADAGRAD_EPS: f32 = 1e-10;

fn softplus(x: f32) -> f32 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl StepModel {
    /// Value length of a key.
    pub fn value_len(&self) -> usize {
        2 * self.dim
    }

    /// The key of relation `r`.
    pub fn rel_key(&self, r: u32) -> Key {
        Key(self.entities + u64::from(r))
    }

    /// Fills `keys` with the sorted distinct keys of `triples`.
    pub fn keys_of(&self, triples: &[Triple], keys: &mut Vec<Key>) {
        keys.clear();
        for t in triples {
            keys.extend([Key(t.head.into()), Key(t.tail.into()), self.rel_key(t.rel)]);
        }
        keys.sort_unstable();
        keys.dedup();
    }

    /// The row of `k` in the step's tables, added with `val` if new.
    fn row(&self, b: &mut StepBuffers, k: Key, val: &[f32]) -> usize {
        *b.rows.entry(k.0).or_insert_with(|| {
            b.touched.push(k);
            b.row_vals.extend_from_slice(val);
            b.grads.resize(b.grads.len() + self.dim, 0.0);
            b.touched.len() - 1
        })
    }

    /// Negatives a step on `triples` triples draws: `negatives` if they are shared, else
    /// `2 * negatives` per triple.
    pub fn negatives_per_step(&self, triples: usize) -> usize {
        if self.shared {
            self.negatives
        } else {
            2 * self.negatives * triples
        }
    }

    /// Computes the step on `triples` with the pulled `b.keys`/`b.vals` and negatives
    /// `b.neg_keys`/`b.neg_vals`; leaves the keys to push in `b.touched` and their
    /// deltas in `b.deltas`. Returns the summed loss (without the regularizer).
    pub fn step(&self, triples: &[Triple], b: &mut StepBuffers) -> f64 {
        let (d, len) = (self.dim, self.value_len());
        b.rows.clear();
        b.touched.clear();
        b.row_vals.clear();
        b.grads.clear();
        let (keys, vals) = (std::mem::take(&mut b.keys), std::mem::take(&mut b.vals));
        for (i, k) in keys.iter().enumerate() {
            self.row(b, *k, &vals[i * len..(i + 1) * len]);
        }
        let (nk, nv) = (std::mem::take(&mut b.neg_keys), std::mem::take(&mut b.neg_vals));
        let neg_rows: Vec<usize> =
            nk.iter().enumerate().map(|(i, k)| self.row(b, *k, &nv[i * len..(i + 1) * len])).collect();
        let loss = if self.loss == Loss::Bce && !self.shared {
            self.step_bce(triples, b, &neg_rows)
        } else {
            self.step_queries(triples, b, &neg_rows)
        };
        b.deltas.clear();
        b.deltas.resize(b.touched.len() * len, 0.0);
        for row in 0..b.touched.len() {
            let g = &b.grads[row * d..(row + 1) * d];
            let acc = &b.row_vals[row * len + d..(row + 1) * len];
            let out = &mut b.deltas[row * len..(row + 1) * len];
            for k in 0..d {
                let g2 = g[k] * g[k];
                out[k] = -self.lr * g[k] / ((acc[k] + g2).sqrt() + ADAGRAD_EPS);
                out[d + k] = g2;
            }
        }
        b.keys = keys;
        b.vals = vals;
        b.neg_keys = nk;
        b.neg_vals = nv;
        loss
    }

    /// The logistic loss with negatives of each triple's own, as AdaPM's KGE app computes it:
    /// every score with its three gradients, and the regularizer's gradient for the three
    /// embeddings of the positive score (`RegOn::Positives`, as AdaPM's app penalizes the
    /// positive triple only) or of every score (`RegOn::All`). Adds the gradients to
    /// `b.grads`; returns the loss.
    fn step_bce(&self, triples: &[Triple], b: &mut StepBuffers, neg_rows: &[usize]) -> f64 {
        let (d, len, n) = (self.dim, self.value_len(), self.negatives);
        let mut loss = 0.0f64;
        let (mut gh, mut gr, mut gt) = (vec![0.0f32; d], vec![0.0f32; d], vec![0.0f32; d]);
        for (j, t) in triples.iter().enumerate() {
            let rh = b.rows[&u64::from(t.head)];
            let rr = b.rows[&self.rel_key(t.rel).0];
            let rt = b.rows[&u64::from(t.tail)];
            // Positive, then `n` corrupted heads, then `n` corrupted tails.
            for c in 0..=2 * n {
                let (h, tl) = match c {
                    0 => (rh, rt),
                    c if c <= n => (neg_rows[j * 2 * n + c - 1], rt),
                    c => (rh, neg_rows[j * 2 * n + c - 1]),
                };
                let hv = &b.row_vals[h * len..h * len + d];
                let rv = &b.row_vals[rr * len..rr * len + d];
                let tv = &b.row_vals[tl * len..tl * len + d];
                let s = self.model.score(hv, rv, tv);
                // d loss / d s: -sigmoid(-s) for the positive, sigmoid(s) for a negative.
                let coef = if c == 0 {
                    loss += f64::from(softplus(-s));
                    -sigmoid(-s)
                } else {
                    loss += f64::from(softplus(s));
                    sigmoid(s)
                };
                gh.fill(0.0);
                gr.fill(0.0);
                gt.fill(0.0);
                self.model.add_grad(coef, hv, rv, tv, &mut gh, &mut gr, &mut gt);
                if self.reg.weight() > 0.0 && (c == 0 || self.reg_on == RegOn::All) {
                    self.reg.add_grad(self.model, hv, &mut gh);
                    self.reg.add_grad(self.model, rv, &mut gr);
                    self.reg.add_grad(self.model, tv, &mut gt);
                }
                for (row, g) in [(h, &gh), (rr, &gr), (tl, &gt)] {
                    for (a, x) in b.grads[row * d..(row + 1) * d].iter_mut().zip(g.iter()) {
                        *a += x;
                    }
                }
            }
        }
        loss
    }
}

/// Knowledge-graph embeddings as a [`Task`].
pub struct KgeTask<'a> {
    kg: &'a Kg,
    model: StepModel,
    init_std: f32,
    filter: Filter,
    /// Triples per step.
    batch: usize,
}

impl<'a> KgeTask<'a> {
    /// The task of training `kge`'s model on `kg` (options checked by the caller).
    pub fn new(kg: &'a Kg, opts: &TrainOptions, kge: &KgeOptions) -> KgeTask<'a> {
        let model = StepModel {
            model: kge.model,
            dim: opts.dim,
            negatives: kge.negatives,
            shared: kge.shared_negatives,
            loss: kge.loss,
            lr: opts.lr,
            reg: kge.reg,
            reg_on: kge.reg_on,
            entities: kg.n_entities().into(),
        };
        KgeTask { kg, model, init_std: kge.init_std, filter: Filter::new(kg), batch: opts.batch }
    }

    fn split(&self, test: bool) -> &[Triple] {
        if test {
            &self.kg.test
        } else {
            &self.kg.valid
        }
    }
}

impl Task for KgeTask<'_> {
    type Example = Triple;

    fn name(&self) -> &'static str {
        "kge"
    }

    fn model_name(&self) -> &'static str {
        self.model.model.name()
    }

    fn train(&self) -> &[Triple] {
        &self.kg.train
    }

    fn keys(&self) -> u64 {
        u64::from(self.kg.n_entities()) + u64::from(self.kg.n_relations())
    }

    fn value_len(&self) -> usize {
        self.model.value_len()
    }

    /// N(0, init_std) embedding, zero accumulator.
    fn init(&self, seed: u64, key: u64, out: &mut [f32]) {
        let dim = self.model.dim;
        let mut rng = StdRng::seed_from_u64(mix(seed ^ mix(key.wrapping_add(0x1217))));
        let normal = Normal::new(0.0f32, self.init_std).expect("std checked positive and finite");
        for v in &mut out[..dim] {
            *v = normal.sample(&mut rng);
        }
        out[dim..].fill(0.0);
    }

    fn keys_of(&self, examples: &[Triple], keys: &mut Vec<Key>) {
        self.model.keys_of(examples, keys);
    }

    fn negatives(&self, examples: usize) -> Option<(u64, usize)> {
        Some((self.kg.n_entities().into(), self.model.negatives_per_step(examples)))
    }

    fn step(&self, examples: &[Triple], b: &mut StepBuffers) -> f64 {
        self.model.step(examples, b)
    }

    type Partial = RankSums;

    /// A query is a triple of the split (ranked for its tail and for its head).
    fn eval_len(&self, test: bool) -> usize {
        self.split(test).len()
    }

    fn evaluate_part(&self, view: &[f32], test: bool, part: std::ops::Range<usize>) -> RankSums {
        let (len, dim) = (self.model.value_len(), self.model.dim);
        let emb = |k: u64| &view[k as usize * len..k as usize * len + dim];
        let triples = &self.split(test)[part];
        rank_sums(self.model.model, self.kg.n_entities(), triples, &self.filter, emb)
    }

    fn merge(&self, _view: &[f32], _test: bool, parts: Vec<RankSums>) -> Quality {
        Quality::Ranking(parts.into_iter().fold(RankSums::default(), |a, b| a + b).ranking())
    }

    /// Each triple reads its head, tail and relation, and each step its uniform negatives.
    fn access_counts(&self) -> Vec<(Key, u64)> {
        let ents = u64::from(self.kg.n_entities());
        let mut counts = vec![0u64; self.keys() as usize];
        for t in &self.kg.train {
            counts[t.head as usize] += 1;
            counts[t.tail as usize] += 1;
            counts[(ents + u64::from(t.rel)) as usize] += 1;
        }
        let n = self.kg.train.len();
        let steps = n.div_ceil(self.batch.max(1));
        let negs = self.model.negatives_per_step(self.batch.min(n)) as u64 * steps as u64;
        let negs_each = negs.div_ceil(ents.max(1));
        for c in &mut counts[..ents as usize] {
            *c += negs_each;
        }
        counts.into_iter().enumerate().map(|(k, c)| (Key(k as u64), c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analytic gradient against central differences of the score.
    #[test]
    fn gradients_match_finite_differences() {
        let h = [0.3f32, -0.2, 0.5, 0.1];
        let r = [0.7f32, 0.4, -0.3, 0.2];
        let t = [-0.1f32, 0.6, 0.2, -0.4];
        for m in Model::ALL {
            let (mut gh, mut gr, mut gt) = ([0.0; 4], [0.0; 4], [0.0; 4]);
            m.add_grad(1.0, &h, &r, &t, &mut gh, &mut gr, &mut gt);
            let eps = 1e-3;
            for k in 0..4 {
                let num = |which: usize| {
                    let (mut a, mut b) = ([h, r, t], [h, r, t]);
                    a[which][k] += eps;
                    b[which][k] -= eps;
                    (m.score(&a[0], &a[1], &a[2]) - m.score(&b[0], &b[1], &b[2])) / (2.0 * eps)
                };
                for (which, g) in [(0, gh[k]), (1, gr[k]), (2, gt[k])] {
                    assert!(
                        (num(which) - g).abs() < 1e-3,
                        "{m:?} arg {which} elem {k}: {} vs {g}",
                        num(which)
                    );
                }
            }
        }
    }

    #[test]
    fn complex_is_the_real_part_of_the_trilinear_product() {
        // h = 1+2i, r = 3-1i, t = 2+1i: h r conj(t) = (5+5i)(2-1i) = 15+5i.
        assert_eq!(Model::ComplEx.score(&[1.0, 2.0], &[3.0, -1.0], &[2.0, 1.0]), 15.0);
        assert_eq!(Model::DistMult.score(&[1.0, 2.0], &[3.0, -1.0], &[2.0, 1.0]), 4.0);
    }

    /// `--reg-on positives` leaves a negative's update as it is without a regularizer, in both
    /// step paths; `all` regularizes it too.
    #[test]
    fn positives_only_regularization_leaves_negatives_unpenalized() {
        let triple = [Triple { head: 0, rel: 0, tail: 1 }];
        let val = |k: u64| -> Vec<f32> {
            (0..4).map(|i| ((k * 5 + i) % 7) as f32 * 0.1 - 0.25).chain([0.5; 4]).collect()
        };
        let negative_delta = |loss, shared, reg, reg_on| {
            let m = StepModel {
                model: Model::ComplEx,
                dim: 4,
                negatives: 1,
                shared,
                loss,
                lr: 0.1,
                reg,
                reg_on,
                entities: 3,
            };
            let mut b = StepBuffers::default();
            m.keys_of(&triple, &mut b.keys);
            b.vals = b.keys.iter().flat_map(|k| val(k.0)).collect();
            b.neg_keys = vec![Key(2); m.negatives_per_step(1)];
            b.neg_vals = b.neg_keys.iter().flat_map(|k| val(k.0)).collect();
            m.step(&triple, &mut b);
            let row = b.touched.iter().position(|k| *k == Key(2)).unwrap();
            b.deltas[row * 8..row * 8 + 4].to_vec()
        };
        for (loss, shared) in [(Loss::Bce, false), (Loss::Softmax, true)] {
            let none = negative_delta(loss, shared, Reg::L2(0.0), RegOn::All);
            let pos = negative_delta(loss, shared, Reg::L2(0.5), RegOn::Positives);
            let all = negative_delta(loss, shared, Reg::L2(0.5), RegOn::All);
            assert_eq!(pos, none, "{loss:?}");
            assert!(all.iter().zip(&none).all(|(a, n)| (a - n).abs() > 1e-6), "{loss:?}: {all:?} {none:?}");
        }
        assert_eq!(RegOn::from_name("positives"), Some(RegOn::Positives));
        assert_eq!(RegOn::from_name("negatives"), None);
    }

    #[test]
    fn regularizers_parse() {
        assert_eq!(Reg::parse("l2:1e-3"), Ok(Reg::L2(1e-3)));
        assert_eq!(Reg::parse("n3:0.01"), Ok(Reg::N3(0.01)));
        assert_eq!(Reg::parse("none"), Ok(Reg::L2(0.0)));
        for bad in ["l2", "l1:3", "n3:x", "l2:-1", "l2:inf"] {
            assert!(Reg::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Reg::parse("n3:0.5").unwrap().to_string(), "n3:0.5");
    }

    #[test]
    fn a_step_lowers_the_loss_of_its_triple() {
        let m = StepModel {
            model: Model::ComplEx,
            dim: 4,
            negatives: 1,
            shared: false,
            loss: Loss::Bce,
            lr: 0.1,
            reg: Reg::L2(0.0),
            reg_on: RegOn::Positives,
            entities: 3,
        };
        let triple = [Triple { head: 0, rel: 0, tail: 1 }];
        let mut b = StepBuffers::default();
        m.keys_of(&triple, &mut b.keys);
        assert_eq!(b.keys, [Key(0), Key(1), Key(3)]);
        let init = |k: u64| -> Vec<f32> {
            (0..4).map(|i| ((k * 7 + i) % 5) as f32 * 0.1 - 0.2).chain([0.0; 4]).collect()
        };
        let mut table: Vec<Vec<f32>> = (0..4).map(init).collect();
        let mut losses = Vec::new();
        for _ in 0..5 {
            b.vals = b.keys.iter().flat_map(|k| table[k.0 as usize].clone()).collect();
            b.neg_keys = vec![Key(2), Key(2)];
            b.neg_vals = b.neg_keys.iter().flat_map(|k| table[k.0 as usize].clone()).collect();
            let loss = m.step(&triple, &mut b);
            let touched = b.touched.clone();
            losses.push(loss);
            for (i, k) in touched.iter().enumerate() {
                for (v, d) in table[k.0 as usize].iter_mut().zip(&b.deltas[i * 8..(i + 1) * 8]) {
                    *v += d;
                }
            }
        }
        assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    }
}
